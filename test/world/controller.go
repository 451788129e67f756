package world

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

// Binaries `make build` puts in bin/.
const (
	BinController = "karpenter-scaleway-em"
	BinEMImager   = "em-imager"
)

// FindBinary returns the path of a binary `make build` makes:
// $TEST_ASSET_<NAME> (e.g. TEST_ASSET_KARPENTER_SCALEWAY_EM), else
// <repository root>/bin/<name>. The error names the make target. A
// bin/<name> older than the sources it is built from is an error: `go test`
// does not rebuild it, and a test run against a controller from before a
// merge fails far from the cause (a metric that binary never had).
func FindBinary(name string) (string, error) {
	path, err := testenv.FindBinaryBuiltBy(name, "make build")
	if err != nil {
		return "", err
	}
	root, rerr := testenv.RepoRoot()
	if rerr != nil || path != filepath.Join(root, "bin", name) {
		return path, nil // an explicit override is the caller's choice
	}
	sources := []string{root} // the controller embeds em-imager: everything
	if name == BinEMImager {
		sources = []string{filepath.Join(root, "imager")}
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	// One walk of the sources per binary build and test process: a world
	// start asks several times.
	key := path + "@" + st.ModTime().String()
	if _, ok := freshBinaries.Load(key); ok {
		return path, nil
	}
	if err := checkFresh(path, root, sources); err != nil {
		return "", err
	}
	freshBinaries.Store(key, true)
	return path, nil
}

// freshBinaries are the builds checkFresh passed in this process.
var freshBinaries sync.Map

// checkFresh fails when a Go source under one of dirs (tests, and test/,
// bin/, testdata/ and hidden directories, aside), or root's go.mod or
// go.sum, is newer than bin.
func checkFresh(bin, root string, dirs []string) error {
	st, err := os.Stat(bin)
	if err != nil {
		return err
	}
	newer, err := newerSource(root, dirs, st.ModTime())
	if err != nil || newer == "" {
		return err
	}
	rel, _ := filepath.Rel(root, newer)
	return fmt.Errorf("%s is older than %s: run \"make build\"", bin, rel)
}

// newerSource is the first file the binary is built from that changed
// after built: go.mod, go.sum, then the non-test Go files under dirs; ""
// when none did.
func newerSource(root string, dirs []string, built time.Time) (string, error) {
	for _, f := range []string{"go.mod", "go.sum"} {
		path := filepath.Join(root, f)
		if info, err := os.Stat(path); err == nil && info.ModTime().After(built) {
			return path, nil
		}
	}
	for _, dir := range dirs {
		if newer, err := newerIn(dir, built); err != nil || newer != "" {
			return newer, err
		}
	}
	return "", nil
}

// newerIn is the first non-test Go file under dir changed after built,
// skipping directories that hold no source of the binary.
func newerIn(dir string, built time.Time) (string, error) {
	var newer string
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || newer != "" {
			return err
		}
		if info.IsDir() {
			if path != dir && skipSourceDir(info.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if isSource(path) && info.ModTime().After(built) {
			newer = path
		}
		return nil
	})
	return newer, err
}

// skipSourceDir says which directories hold no source of the binary: tests,
// tools, test data and hidden directories.
func skipSourceDir(name string) bool {
	return name == "test" || name == "bin" || name == "testdata" || strings.HasPrefix(name, ".")
}

// isSource reports whether path is a Go file built into the binary.
func isSource(path string) bool {
	return strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go")
}

// ControllerOptions tune one controller process.
type ControllerOptions struct {
	// Env overrides or adds environment variables (KEY=VALUE) after
	// ControllerEnv, e.g. "FEATURE_GATES=NodeRepair=true".
	Env []string
	// BaseEnv, when set, replaces ControllerEnv: a test that checks that
	// an environment made elsewhere (a chart's Deployment) is complete must
	// not have the world fill in what it lacks.
	BaseEnv []string
	// Args are extra flags.
	Args []string
	// LogName is the log file's name in <world>/controller (default controller.log).
	LogName string
	// LeaderElection runs the process with Karpenter's leader election, as
	// the chart deploys it (two replicas, one Lease): the Lease LeaseName
	// in the world's system namespace. Without it the process works at once
	// (DISABLE_LEADER_ELECTION=true). The durations are controller-runtime's
	// (15s lease, 10s renew deadline, 2s retry): Karpenter sets no others,
	// so a replica killed without releasing the Lease is replaced after at
	// most about 17 seconds.
	LeaderElection bool
	// RecordAPICalls sends the process's Scaleway API calls through a proxy
	// of its own that records them (APICalls), so that a test can tell what
	// each of two replicas did. The proxy passes answers through and turns
	// a dropped upstream connection into a dropped one.
	RecordAPICalls bool
}

// LeaseName is the leader election Lease of LeaderElection (the chart's
// default leaderElection.name).
const LeaseName = "karpenter-scaleway-em-leader-election"

// ControllerEnv is the environment the controller runs with against this
// world, as a deployment would set it (credentials only here, never in flags).
func (w *World) ControllerEnv() []string {
	env := []string{
		"CLUSTER_NAME=" + w.ClusterName,
		"SYSTEM_NAMESPACE=" + w.SystemNamespace,
		"KUBECONFIG=" + w.Kube.KubeconfigPath,
		"DISABLE_LEADER_ELECTION=true",
		"LOG_LEVEL=debug",
		"BATCH_MAX_DURATION=2s",
		"BATCH_IDLE_DURATION=500ms",
		"SCW_ACCESS_KEY=SCWSIMULATED00000000",
		"SCW_SECRET_KEY=" + w.Sim.SecretKey(),
		"SCW_DEFAULT_PROJECT_ID=" + w.Sim.Options().ProjectID,
		"SCW_DEFAULT_ORGANIZATION_ID=" + w.Sim.Options().OrganizationID,
		"SCW_DEFAULT_ZONE=fr-par-2",
		"SCW_API_URL=" + w.SimURL,
		"S3_ENDPOINT=" + w.S3.Endpoint,
		"S3_REGION=" + w.S3.Region,
		"S3_BUCKET=" + w.Bucket,
		"AWS_ACCESS_KEY_ID=" + w.S3.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + w.S3.SecretKey,
		"RESCUE_SSH_PORT=" + strconv.Itoa(w.Machines.SSHPort()),
		"TALOS_API_PORT=" + strconv.Itoa(w.Machines.TalosAPIPort()),
	}
	// Phase timeouts and polling scaled to the simulator's delays.
	if w.Opts.Profile != "realistic" {
		env = append(env,
			"KARPENTER_SCALEWAY_EM_API_POLL_INTERVAL="+w.APIPollInterval().String(),
			"INSTALL_RETRY_INTERVAL=200ms",
			"CATALOG_REFRESH_INTERVAL=10s",
			"GC_GRACE_PERIOD="+GCGracePeriod.String(),
			"GC_INTERVAL="+GCInterval.String(),
			"NODECLASS_RECHECK_INTERVAL=10s",
			"DELIVERY_TIMEOUT=3m",
			"RESCUE_TIMEOUT=2m",
			"IMAGING_TIMEOUT=3m",
			"BOOT_TIMEOUT=2m",
		)
	}
	return env
}

// APIPollInterval is how often the controller polls the simulated
// Scaleway in this world's profile: scaled to its delays in "test" and
// "fast", the controller's default in "realistic".
func (w *World) APIPollInterval() time.Duration {
	switch w.Opts.Profile {
	case "test":
		return 200 * time.Millisecond
	case "fast":
		return time.Second
	}
	return scaleway.DefaultPollInterval
}

// Controller is bin/karpenter-scaleway-em running against a world as a
// subprocess, with its real main, flags and environment.
type Controller struct {
	w       *World
	bin     string
	opts    ControllerOptions
	LogPath string
	// MetricsURL and HealthURL of the running process.
	MetricsURL, HealthURL string

	// proxy records the API calls (RecordAPICalls); it outlives restarts.
	proxy *apiRecorder

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	waitErr  error
	starts   int
	started  time.Time
	stopping bool
}

// NewController starts the controller; Stop ends it. It fails with the make
// target when the binary is missing.
func (w *World) NewController(opts ControllerOptions) (*Controller, error) {
	bin, err := FindBinary(BinController)
	if err != nil {
		return nil, err
	}
	if opts.LogName == "" {
		opts.LogName = "controller.log"
	}
	c := &Controller{w: w, bin: bin, opts: opts, LogPath: filepath.Join(w.Dir, "controller", opts.LogName)}
	if opts.RecordAPICalls {
		p, err := newAPIRecorder(w.SimURL)
		if err != nil {
			return nil, err
		}
		p.curr = c.Starts
		c.proxy = p
		w.onStop(p.close)
	}
	if err := c.start(); err != nil {
		return nil, err
	}
	return c, nil
}

// StartReplicas starts n processes of the controller with leader election
// (opts.LeaderElection is set), as the chart's Deployment runs them: logs
// <name>-1.log ... <name>-n.log (name: opts.LogName without ".log",
// default "replica"), ports of their own. The first one started is not
// necessarily the leader: see Leader.
func StartReplicas(t testing.TB, w *World, n int, opts ControllerOptions) []*Controller {
	t.Helper()
	opts.LeaderElection = true
	base := strings.TrimSuffix(opts.LogName, ".log")
	if base == "" {
		base = "replica"
	}
	var out []*Controller
	for i := 1; i <= n; i++ {
		o := opts
		o.LogName = fmt.Sprintf("%s-%d.log", base, i)
		out = append(out, StartController(t, w, o))
	}
	return out
}

// StartController starts the controller for a test; it is stopped on
// t.Cleanup and, if the test failed, the tail of its log goes to the test log.
func StartController(t testing.TB, w *World, opts ControllerOptions) *Controller {
	t.Helper()
	c, err := w.NewController(opts)
	if err != nil {
		t.Fatalf("controller: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("controller log tail (%s):\n%s", c.LogPath, c.LogTail(80))
		}
		_ = c.Stop()
		if t.Failed() {
			keepLog(t, c.LogPath)
		}
	})
	return c
}

// keepLog copies a failed test's controller log into $TEST_FAILURE_LOGS
// (make test sets bin/test-failures), since the tail above often ends
// before the decision that went wrong and the world's directory goes with
// the test.
func keepLog(t testing.TB, path string) {
	dir := os.Getenv("TEST_FAILURE_LOGS")
	if dir == "" {
		return
	}
	b, err := os.ReadFile(path)
	if err == nil {
		name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
		dst := filepath.Join(dir, fmt.Sprintf("%s-%d-controller.log", name, time.Now().Unix()))
		if err = os.MkdirAll(dir, 0o755); err == nil {
			err = os.WriteFile(dst, b, 0o600)
		}
		if err == nil {
			t.Logf("the whole controller log: %s", dst)
		}
	}
	if err != nil {
		t.Logf("keeping the controller log: %v", err)
	}
}

func (c *Controller) start() error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(c.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.starts++
	fmt.Fprintf(f, "=== world: start #%d at %s\n", c.starts, time.Now().UTC().Format(time.RFC3339Nano))
	c.mu.Unlock()
	cmd := exec.Command(c.bin, c.opts.Args...)
	cmd.Stdout, cmd.Stderr = f, f
	base := c.opts.BaseEnv
	if base == nil {
		base = c.w.ControllerEnv()
	}
	env := append(append(os.Environ(), base...),
		"METRICS_PORT="+strconv.Itoa(ports[0]), "HEALTH_PROBE_PORT="+strconv.Itoa(ports[1]))
	if c.opts.LeaderElection {
		// Later values win (os/exec keeps the last of a key).
		env = append(env, "DISABLE_LEADER_ELECTION=false", "LEADER_ELECTION_NAME="+LeaseName,
			"LEADER_ELECTION_NAMESPACE="+c.w.SystemNamespace)
	}
	if c.proxy != nil {
		env = append(env, "SCW_API_URL="+c.proxy.url)
	}
	cmd.Env = append(env, c.opts.Env...)
	// Its own process group, so a kill reaches nothing else and Ctrl-C in
	// the demo's terminal reaches the demo, which stops it in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", c.bin, err)
	}
	done := make(chan struct{})
	c.mu.Lock()
	c.cmd, c.done, c.stopping, c.started = cmd, done, false, time.Now()
	c.MetricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0])
	c.HealthURL = fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[1])
	c.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		c.mu.Lock()
		c.waitErr = err
		c.mu.Unlock()
		close(done)
	}()
	return nil
}

// WaitHealthy waits until the controller answers its health probe, and fails
// early if it exits.
func (c *Controller) WaitHealthy(ctx context.Context) error {
	for {
		c.mu.Lock()
		done, url := c.done, c.HealthURL
		c.mu.Unlock()
		select {
		case <-done:
			return fmt.Errorf("controller exited: %w; log tail:\n%s", c.ExitErr(), c.LogTail(40))
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("controller not healthy at %s: %w; log tail:\n%s", url, ctx.Err(), c.LogTail(40))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Running reports whether the process is alive.
func (c *Controller) Running() bool {
	c.mu.Lock()
	done := c.done
	c.mu.Unlock()
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// ExitErr is the process's exit error once it ended.
func (c *Controller) ExitErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waitErr
}

// Pid of the running process.
func (c *Controller) Pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd.Process.Pid
}

// Kill ends the process with SIGKILL, as a crashed or OOM-killed pod would,
// and waits for it to be gone.
func (c *Controller) Kill() error { return c.signal(syscall.SIGKILL, 10*time.Second) }

// Pause freezes the process (SIGSTOP), as a stopped container or a long
// pause of its host would: it holds its connections and its Lease until the
// Lease expires, and does nothing. Resume wakes it up.
func (c *Controller) Pause() error { return c.sendOnly(syscall.SIGSTOP) }

// Resume wakes up a paused process (SIGCONT).
func (c *Controller) Resume() error { return c.sendOnly(syscall.SIGCONT) }

func (c *Controller) sendOnly(sig syscall.Signal) error {
	c.mu.Lock()
	cmd := c.cmd
	c.mu.Unlock()
	if !c.Running() {
		return errors.New("controller: not running")
	}
	return syscall.Kill(-cmd.Process.Pid, sig)
}

// Stop ends the process with SIGTERM (SIGKILL after 15s).
func (c *Controller) Stop() error {
	if err := c.signal(syscall.SIGTERM, 15*time.Second); err != nil {
		return c.Kill()
	}
	return nil
}

func (c *Controller) signal(sig syscall.Signal, wait time.Duration) error {
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.stopping = true
	c.mu.Unlock()
	select {
	case <-done:
		return nil
	default:
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
		return nil
	case <-time.After(wait):
		return fmt.Errorf("controller (pid %d) still running %s after %s", cmd.Process.Pid, wait, sig)
	}
}

// Restart starts a new process after Kill or Stop (a new pod).
func (c *Controller) Restart() error {
	if c.Running() {
		return errors.New("controller: Restart while running: Kill or Stop it first")
	}
	return c.start()
}

// LogTail returns the last n lines of the controller's log.
func (c *Controller) LogTail(n int) string { return tailFile(c.LogPath, n) }

// LogLines returns the lines of the controller's whole log that hold sub
// ("" when none does), e.g. "forbidden" for what RBAC refused it.
func (c *Controller) LogLines(sub string) string {
	b, _ := os.ReadFile(c.LogPath)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Metrics fetches the Prometheus text exposition of the running process.
func (c *Controller) Metrics(ctx context.Context) (string, error) {
	c.mu.Lock()
	url := c.MetricsURL
	c.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String(), nil
}

// tailFile returns the last n lines of a file ("" if unreadable).
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
