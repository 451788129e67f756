package testenv

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The real server scrapes a target, evaluates a rule file, answers
// queries, and reports a query that does not parse as an error.
func TestPrometheusScrapesAndEvaluates(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "testenv_things_total", Help: "Things."})
	reg.MustRegister(c)
	c.Add(42)
	target := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer target.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rules := []byte(`groups:
- name: test
  rules:
  - alert: ManyThings
    expr: testenv_things_total > 10
  # Two series on the "one" side of group_left: parses, fails every evaluation.
  - alert: Broken
    expr: vector(1) + on() group_left() (label_replace(vector(1), "a", "1", "", "") or label_replace(vector(1), "a", "2", "", ""))
`)
	p, err := NewPrometheus(ctx, PrometheusOptions{Targets: []string{strings.TrimPrefix(target.URL, "http://")}, Rules: rules, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()

	var got []Sample
	for ctx.Err() == nil {
		if got, err = p.Query(ctx, "testenv_things_total"); err == nil && len(got) == 1 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(got) != 1 || got[0].Float() != 42 || got[0].Metric["job"] != "test" {
		t.Fatalf("query: %+v, %v; log:\n%s", got, err, p.LogTail(20))
	}
	if up, errs, err := p.TargetsUp(ctx); err != nil || up != 1 {
		t.Errorf("targets up %d (%v, %v)", up, errs, err)
	}
	if _, err := p.Query(ctx, "sum(("); err == nil {
		t.Error("a query that does not parse gave no error")
	}
	for ctx.Err() == nil {
		rs, err := p.Rules(ctx)
		if err != nil {
			t.Fatal(err)
		}
		health := map[string]string{}
		for _, r := range rs {
			health[r.Name] = r.Health
		}
		if health["ManyThings"] == "ok" && health["Broken"] == "err" {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	rs, err := p.Rules(context.Background())
	t.Fatalf("rules never evaluated as ManyThings ok and Broken err (duplicate series on the one side): %+v %v", rs, err)
}
