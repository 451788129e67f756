package monitoring

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/monitoring/dashboard"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/chart/helmrender"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

const (
	namespace  = "default"
	leaseName  = "karpenter-scaleway-em-leader-election"
	waitLong   = 4 * time.Minute
	chartPath  = "../../charts/karpenter-scaleway-em"
	kubeVerson = "v1.35.4"
)

// expectedEmpty are the metrics with no series in this run, and why. A
// metric listed here that has series fails the test, so the list shrinks
// as the metrics arrive.
var expectedEmpty = map[string]string{}

// The chart's alerts and the dashboard's queries against a real Prometheus
// scraping the controller through a run with hourly and monthly nodes, a
// spare and throttled API calls.
func TestAlertsAndDashboardAgainstRealPrometheus(t *testing.T) {
	if _, err := world.FindBinary(world.BinController); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()

	rules := chartRules(t)
	w := world.Start(t, world.Options{})
	// Leader election on, as the chart runs it: leader_election_master_status
	// is what the NoLeader alert reads.
	c := world.StartController(t, w, world.ControllerOptions{Env: []string{
		"DISABLE_LEADER_ELECTION=false",
		"LEADER_ELECTION_NAME=" + leaseName,
		"LEADER_ELECTION_NAMESPACE=" + w.SystemNamespace,
	}})
	hctx, hcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer hcancel()
	if err := c.WaitHealthy(hctx); err != nil {
		t.Fatal(err)
	}
	prom, err := testenv.NewPrometheus(ctx, testenv.PrometheusOptions{
		Targets: []string{strings.TrimSuffix(strings.TrimPrefix(c.MetricsURL, "http://"), "/metrics")},
		Job:     "karpenter-scaleway-em",
		Rules:   rules,
		Dir:     t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("prometheus log tail:\n%s", prom.LogTail(30))
		}
		_ = prom.Stop()
	}()

	// Some throttling, so the throttled and retry series are real answers.
	w.Sim.MustInject(scwsim.Fault{Kind: scwsim.FaultRateLimit, Method: "GET", Path: `/servers$`, RetryAfter: time.Second, Times: 3})

	hourly := w.NodeClass("hourly")
	monthly := w.NodeClass("monthly")
	monthly.Spec.Billing = v1alpha1.BillingSpec{Periods: []string{"monthly"}, MinimumLifetime: &metav1.Duration{Duration: time.Hour}}
	monthlyReq := corev1.NodeSelectorRequirement{Key: catalog.LabelBillingPeriod, Operator: corev1.NodeSelectorOpIn, Values: []string{"monthly"}}
	if err := w.Apply(ctx, hourly, monthly, w.NodePool("hourly", "hourly"), w.NodePool("monthly", "monthly", monthlyReq)); err != nil {
		t.Fatal(err)
	}
	hourlyPods := runPinned(t, w, "hourly-app", "hourly")
	defer hourlyPods.Stop()
	monthlyPods := runPinned(t, w, "monthly-app", "monthly")
	defer monthlyPods.Stop()
	waitBound(ctx, t, hourlyPods, 1)
	waitBound(ctx, t, monthlyPods, 1)

	// The monthly node goes (consolidation): its server stays as a spare.
	if err := monthlyPods.Scale(ctx, 0); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "a spare in Prometheus", func() (bool, string) {
		s, err := prom.Query(ctx, `karpenter_scaleway_em_spend_hourly_eur{usage="spare",nodeclass="monthly"}`)
		return err == nil && len(s) > 0, fmt.Sprintf("%v %v", s, err)
	})

	// Every metric the alerts and the dashboard read, and every rule loaded.
	loaded, err := prom.Rules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, r := range loaded {
		if r.Type != "alerting" {
			continue
		}
		names[r.Name] = true
		if r.Health != "ok" {
			t.Errorf("alert %s: health %q: %s", r.Name, r.Health, r.LastError)
		}
		if r.State == "firing" {
			t.Errorf("alert %s fires in a healthy run", r.Name)
		}
		for _, m := range metricNames(r.Query) {
			checkSeries(ctx, t, prom, "alert "+r.Name, m)
		}
	}
	if len(names) < 8 || !names["KarpenterScalewayEMNoLeader"] {
		t.Errorf("Prometheus loaded the alerts %v; want the chart's eight", names)
	}

	b, err := dashboard.JSON()
	if err != nil {
		t.Fatal(err)
	}
	queries, err := dashboard.Queries(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queries {
		expr := strings.ReplaceAll(q.Expr, "$__rate_interval", "1m")
		s, err := prom.Query(ctx, expr)
		if err != nil {
			t.Errorf("panel %q: %s: %v", q.Panel, expr, err)
			continue
		}
		if len(s) > 0 {
			continue
		}
		why := ""
		for _, m := range metricNames(expr) {
			if r, ok := expectedEmpty[m]; ok {
				why = r
			}
		}
		if why == "" {
			t.Errorf("panel %q: %s returns no series", q.Panel, expr)
		} else {
			t.Logf("panel %q empty as expected: %s", q.Panel, why)
		}
	}
	for m := range expectedEmpty {
		if s, err := prom.Query(ctx, seenQuery(m)); err == nil && len(s) > 0 {
			t.Errorf("%s is listed as expected-empty but has series: drop it from expectedEmpty", m)
		}
	}
}

// chartRules renders the chart's PrometheusRule with its defaults and
// returns its spec as a Prometheus rule file.
func chartRules(t *testing.T) []byte {
	t.Helper()
	c, err := loader.Load(chartPath)
	if err != nil {
		t.Fatal(err)
	}
	values := `
clusterName: monitoring
scaleway: {defaultProjectID: 11111111-2222-4333-8444-555555555555, credentials: {accessKey: SCWSIMULATED00000000, secretKey: 11111111-2222-4333-8444-555555555555}}
prometheusRule: {enabled: true}
leaderElection: {enabled: true, name: ` + leaseName + `}
`
	objs, err := helmrender.Render(c, []byte(values), helmrender.Release{Name: "karpenter-scaleway-em", Namespace: "karpenter", KubeVersion: kubeVerson})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "PrometheusRule" {
			continue
		}
		spec, ok := o.Object["spec"]
		if !ok {
			t.Fatal("PrometheusRule without spec")
		}
		b, err := yaml.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		if os.Getenv("MONITORING_DUMP_RULES") != "" {
			t.Logf("rules:\n%s", b)
		}
		return b
	}
	t.Fatal("the chart rendered no PrometheusRule with prometheusRule.enabled")
	return nil
}

// metricRE finds the metric names an expression reads (the provider's,
// Karpenter's and client-go's leader election).
var metricRE = regexp.MustCompile(`\b(karpenter_[a-z0-9_]+|leader_election_[a-z0-9_]+)\b`)

// metricNames are the metrics expr reads, histogram suffixes kept.
func metricNames(expr string) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range metricRE.FindAllString(expr, -1) {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	sort.Strings(out)
	return out
}

// seenQuery counts metric's series over the whole run: some exist only
// while something happens (an install's phase-start time goes with the
// install).
func seenQuery(metric string) string { return "count(last_over_time(" + metric + "[30m]))" }

// checkSeries fails unless metric had series during the run or is listed
// as expected-empty.
func checkSeries(ctx context.Context, t *testing.T, prom *testenv.Prometheus, what, metric string) {
	t.Helper()
	s, err := prom.Query(ctx, seenQuery(metric))
	if err != nil {
		t.Errorf("%s: %s: %v", what, seenQuery(metric), err)
		return
	}
	if len(s) > 0 {
		return
	}
	if why, ok := expectedEmpty[metric]; ok {
		t.Logf("%s reads %s, empty as expected: %s", what, metric, why)
		return
	}
	t.Errorf("%s reads %s, which has no series", what, metric)
}

// runPinned keeps one pod of 3 CPUs on nodes of the named NodePool.
func runPinned(t *testing.T, w *world.World, app, nodePool string) *world.Workload {
	t.Helper()
	wl := w.RunWorkloadOn(namespace, app, 1, "3", "1Gi", map[string]string{"karpenter.sh/nodepool": nodePool})
	return wl
}

func waitBound(ctx context.Context, t *testing.T, wl *world.Workload, n int) {
	t.Helper()
	eventually(ctx, t, fmt.Sprintf("%d pods of %s bound", n, wl.App), func() (bool, string) {
		bound, total, err := wl.Bound(ctx)
		return err == nil && bound >= n, fmt.Sprintf("%d/%d bound (%v)", bound, total, err)
	})
}

func eventually(ctx context.Context, t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	world.Eventually(ctx, t, what, waitLong, cond)
}
