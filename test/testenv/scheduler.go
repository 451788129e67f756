package testenv

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// SchedulerOptions configures NewScheduler. The zero value is ready to use.
type SchedulerOptions struct {
	// Dir holds the scheduler's serving certificate and log. Default: a new
	// temporary directory removed by Stop.
	Dir string
	// Args are extra kube-scheduler flags, e.g. "--v=4".
	Args []string
	// StartTimeout bounds the wait for /readyz. Default 2 minutes.
	StartTimeout time.Duration
}

// Scheduler is a running kube-scheduler bound to a Kube.
type Scheduler struct {
	// Port is the HTTPS port of /healthz, /readyz and /metrics on 127.0.0.1.
	Port int
	// LogPath is the scheduler's log file.
	LogPath string

	proc    *process
	tempDir string
}

// NewScheduler runs the real kube-scheduler against k (through k's admin
// kubeconfig; leader election off; secure port on a free port) and waits
// until it is ready. Call Stop when done.
func NewScheduler(ctx context.Context, k *Kube, opts SchedulerOptions) (*Scheduler, error) {
	bin, err := FindBinary(BinKubeScheduler)
	if err != nil {
		return nil, err
	}
	if k == nil || k.KubeconfigPath == "" {
		return nil, fmt.Errorf("scheduler: Kube is not started (no kubeconfig)")
	}
	s := &Scheduler{}
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "testenv-scheduler-"); err != nil {
			return nil, err
		}
		s.tempDir = dir
	}
	s.LogPath = filepath.Join(dir, "kube-scheduler.log")
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	if err := retryStart(ctx, func() error { return s.start(ctx, bin, k, dir, opts.Args, timeout) }); err != nil {
		_ = s.cleanup()
		return nil, err
	}
	return s, nil
}

func (s *Scheduler) start(ctx context.Context, bin string, k *Kube, dir string, extra []string, timeout time.Duration) error {
	p, port, err := startComponent(ctx, "kube-scheduler", bin, k, dir, "/readyz", append([]string{"--leader-elect=false"}, extra...), s.LogPath, timeout)
	if err != nil {
		return err
	}
	s.proc, s.Port = p, port
	return nil
}

// startComponent runs a Kubernetes control-plane component (kube-scheduler,
// kube-controller-manager: they share these flags) against k through k's
// admin kubeconfig, serving on a free port on 127.0.0.1, and waits until
// its health path answers 200.
func startComponent(ctx context.Context, name, bin string, k *Kube, dir, health string, extra []string, logPath string, timeout time.Duration) (*process, int, error) {
	port, err := freePort()
	if err != nil {
		return nil, 0, err
	}
	args := append([]string{
		"--kubeconfig=" + k.KubeconfigPath,
		// Delegated authn/authz of the component's own endpoints go to the
		// same API server instead of in-cluster lookups that cannot work here.
		"--authentication-kubeconfig=" + k.KubeconfigPath,
		"--authorization-kubeconfig=" + k.KubeconfigPath,
		// envtest's API server has no request-header CA to look up.
		"--authentication-skip-lookup=true",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(dir, name+"-certs"),
	}, extra...)
	p, err := startProcess(name, bin, args, nil, logPath)
	if err != nil {
		return nil, 0, err
	}
	// The serving certificate is self-signed by the component at start, so
	// there is nothing to verify it against; this only probes readiness.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test component serves a self-signed certificate on localhost
	if err := waitHTTP(ctx, p, hc, fmt.Sprintf("https://%s%s", hostPort(port), health), timeout); err != nil {
		_ = p.stop(5 * time.Second)
		return nil, 0, err
	}
	return p, port, nil
}

// waitHTTP waits until url answers 200 (or p exits, or timeout passes).
func waitHTTP(ctx context.Context, p *process, hc *http.Client, url string, timeout time.Duration) error {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return p.waitReady(cctx, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: HTTP %d: %s", url, resp.StatusCode, b)
		}
		return nil
	})
}

// Stop stops the scheduler and removes its directory if NewScheduler
// created it.
func (s *Scheduler) Stop() error {
	var err error
	if s.proc != nil {
		err = s.proc.stop(10 * time.Second)
	}
	if cerr := s.cleanup(); err == nil {
		err = cerr
	}
	return err
}

func (s *Scheduler) cleanup() error {
	if s.tempDir == "" {
		return nil
	}
	return os.RemoveAll(s.tempDir)
}

// StartScheduler runs kube-scheduler against k for the test and stops it on
// cleanup (before k stops: cleanups run last-in first-out).
func StartScheduler(t testing.TB, k *Kube) *Scheduler {
	t.Helper()
	return StartSchedulerWithOptions(t, k, SchedulerOptions{})
}

// StartSchedulerWithOptions is StartScheduler with options; Dir defaults to
// t.TempDir().
func StartSchedulerWithOptions(t testing.TB, k *Kube, opts SchedulerOptions) *Scheduler {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	s, err := NewScheduler(context.Background(), k, opts)
	if err != nil {
		t.Fatalf("testenv: start kube-scheduler: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: kube-scheduler log tail (%s):\n%s", s.LogPath, fileTail(s.LogPath, 40))
		}
		if err := s.Stop(); err != nil {
			t.Errorf("testenv: stop kube-scheduler: %v", err)
		}
	})
	return s
}
