package testenv

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// PrometheusOptions configures NewPrometheus.
type PrometheusOptions struct {
	// Targets are host:port addresses scraped at /metrics, every
	// ScrapeInterval (default 1s), as job Job (default "test").
	Targets        []string
	Job            string
	ScrapeInterval time.Duration
	// Rules is a rule file's content ({groups: [...]}), evaluated every
	// ScrapeInterval; empty: none.
	Rules []byte
	// Dir holds the configuration, the data and the log. Default: a new
	// temporary directory removed by Stop.
	Dir string
	// StartTimeout bounds the wait for /-/ready. Default 60s.
	StartTimeout time.Duration
}

// Prometheus is a running prometheus server: Debian's package (make deps), on
// 127.0.0.1.
type Prometheus struct {
	// URL is the base URL, e.g. http://127.0.0.1:40123.
	URL     string
	LogPath string

	proc    *process
	tempDir string
}

// NewPrometheus starts prometheus and waits until it is ready. Call Stop
// when done.
func NewPrometheus(ctx context.Context, opts PrometheusOptions) (*Prometheus, error) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		return nil, errors.New("prometheus not found: `make deps` installs Debian's prometheus package")
	}
	p := &Prometheus{}
	dir, temp, err := workDir(opts.Dir, "testenv-prometheus-")
	if err != nil {
		return nil, err
	}
	p.tempDir = temp
	opts.Job = cmp.Or(opts.Job, "test")
	opts.ScrapeInterval = cmp.Or(opts.ScrapeInterval, time.Second)
	opts.StartTimeout = cmp.Or(opts.StartTimeout, 60*time.Second)
	if err := writePrometheusConfig(dir, opts); err != nil {
		p.cleanup()
		return nil, err
	}
	p.LogPath = filepath.Join(dir, "prometheus.log")
	if err := retryStart(ctx, func() error { return p.start(ctx, bin, dir, opts.StartTimeout) }); err != nil {
		p.cleanup()
		return nil, err
	}
	return p, nil
}

// writePrometheusConfig writes prometheus.yml into dir: one job scraping
// the targets at the scrape interval (which is also the evaluation
// interval and the timeout), and the rules file when there are rules.
func writePrometheusConfig(dir string, opts PrometheusOptions) error {
	interval := opts.ScrapeInterval.String()
	cfg := map[string]any{
		"global": map[string]any{"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
		"scrape_configs": []any{map[string]any{
			"job_name":       opts.Job,
			"static_configs": []any{map[string]any{"targets": opts.Targets}},
		}},
	}
	if len(opts.Rules) > 0 {
		if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), opts.Rules, 0o644); err != nil {
			return err
		}
		cfg["rule_files"] = []string{filepath.Join(dir, "rules.yaml")}
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "prometheus.yml"), b, 0o644)
}

func (p *Prometheus) start(ctx context.Context, bin, dir string, timeout time.Duration) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	p.URL = "http://" + hostPort(port)
	args := []string{
		"--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + hostPort(port),
	}
	proc, err := startProcess("prometheus", bin, args, nil, p.LogPath)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err = proc.waitReady(cctx, func(ctx context.Context) error {
		_, err := p.get(ctx, "/-/ready", nil)
		return err
	})
	if err != nil {
		_ = proc.stop(5 * time.Second)
		return err
	}
	p.proc = proc
	return nil
}

func (p *Prometheus) get(ctx context.Context, path string, q url.Values) ([]byte, error) {
	u := p.URL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("GET %s: HTTP %d: %s", path, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// apiResponse is the envelope of Prometheus's HTTP API.
type apiResponse struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
}

func (p *Prometheus) api(ctx context.Context, path string, q url.Values, out any) error {
	body, err := p.get(ctx, path, q)
	var r apiResponse
	if jerr := json.Unmarshal(body, &r); jerr != nil {
		if err != nil {
			return err
		}
		return fmt.Errorf("%s: %w", path, jerr)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s: %s: %s", path, r.ErrorType, r.Error)
	}
	return json.Unmarshal(r.Data, out)
}

// Sample is one series of an instant query's result.
type Sample struct {
	Metric map[string]string `json:"metric"`
	// Value is [unix time, "value"].
	Value [2]any `json:"value"`
}

// Float is the sample's value.
func (s Sample) Float() float64 {
	var f float64
	if v, ok := s.Value[1].(string); ok {
		fmt.Sscan(v, &f)
	}
	return f
}

// Query evaluates expr now. A parse or evaluation error is an error; an
// empty vector is not. Scalars come back as one sample without labels.
func (p *Prometheus) Query(ctx context.Context, expr string) ([]Sample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.api(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	switch data.ResultType {
	case "vector":
		var out []Sample
		return out, json.Unmarshal(data.Result, &out)
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(data.Result, &v); err != nil {
			return nil, err
		}
		return []Sample{{Value: v}}, nil
	}
	return nil, fmt.Errorf("query %q: result type %s", expr, data.ResultType)
}

// Rule is one loaded rule as /api/v1/rules reports it.
type Rule struct {
	Name      string `json:"name"`
	Query     string `json:"query"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
	Type      string `json:"type"`
	State     string `json:"state"`
}

// Rules lists the loaded rules of every group.
func (p *Prometheus) Rules(ctx context.Context) ([]Rule, error) {
	var data struct {
		Groups []struct {
			Rules []Rule `json:"rules"`
		} `json:"groups"`
	}
	if err := p.api(ctx, "/api/v1/rules", nil, &data); err != nil {
		return nil, err
	}
	var out []Rule
	for _, g := range data.Groups {
		out = append(out, g.Rules...)
	}
	return out, nil
}

// TargetsUp reports how many scrape targets are up, and the last scrape
// error of the others.
func (p *Prometheus) TargetsUp(ctx context.Context) (up int, errs []string, err error) {
	var data struct {
		ActiveTargets []struct {
			Health    string `json:"health"`
			LastError string `json:"lastError"`
			ScrapeURL string `json:"scrapeUrl"`
		} `json:"activeTargets"`
	}
	if err := p.api(ctx, "/api/v1/targets", nil, &data); err != nil {
		return 0, nil, err
	}
	for _, t := range data.ActiveTargets {
		if t.Health == "up" {
			up++
		} else {
			errs = append(errs, t.ScrapeURL+": "+t.Health+" "+t.LastError)
		}
	}
	return up, errs, nil
}

// LogTail returns the last n lines of the server's log.
func (p *Prometheus) LogTail(n int) string { return fileTail(p.LogPath, n) }

// Stop stops the server and removes a temporary directory.
func (p *Prometheus) Stop() error {
	var err error
	if p.proc != nil {
		err = p.proc.stop(10 * time.Second)
	}
	p.cleanup()
	return err
}

func (p *Prometheus) cleanup() {
	if p.tempDir != "" {
		os.RemoveAll(p.tempDir)
	}
}
