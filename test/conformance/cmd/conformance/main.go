// Command conformance runs Karpenter's regression suite against the
// simulated world (`make conformance`). It lists the suite's specs (a Ginkgo
// dry run of the test binary built from the pinned sigs.k8s.io/karpenter
// module by `go test -c`), plans them (conformance.MakePlan: the focus,
// test/conformance/skip.txt, and a pass per sizing with its own NodeClass and
// NodePool), and runs each pass against a bin/run-world of its own, started
// without its default NodeClass and NodePool. It prints one line per spec
// and, last, the passes summed:
//
//	conformance: P passed, F failed, N not applicable (total T)
//
// It exits 0 only when no spec failed. FOCUS (or -focus) narrows the run
// with a Ginkgo focus expression, e.g. FOCUS=StandaloneNodeClaim.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/conformance"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

func main() {
	// Whoever reads our output may go first (a closed terminal, `| head`):
	// a write then fails rather than killing the process before it stopped
	// the etcd, kube-apiserver and controller it started.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// defaultFeatureGates are the optional Karpenter features the suite
// exercises that this provider supports: NodeRepair (its RepairPolicies;
// the suite's Repair Policy specs need it), StaticCapacity (static
// NodePools order servers like any NodeClaim) and CapacityBuffer (core's
// virtual buffer pods are provisioned like pending pods). Without the last
// two, core does not act on static NodePools or buffers, so their specs
// cannot pass (docs/conformance.md, "Feature gates").
const defaultFeatureGates = "NodeRepair=true,StaticCapacity=true,CapacityBuffer=true"

func envOr(k, def string) string {
	if v, ok := os.LookupEnv(k); ok {
		return v
	}
	return def
}

// options of one run; paths are absolute after parse.
type options struct {
	dir, worldBin, suiteBin       string
	skipFile, nodeClass, nodePool string
	sizingDir                     string
	focus, profile, featureGates  string
	timeout                       time.Duration
	parallel                      int
	keep                          bool
}

func parse(args []string, stderr io.Writer) (options, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return options{}, err
	}
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.dir, "dir", filepath.Join(root, "bin", "conformance-run"), "where each pass's directory (<pass>/: the world, world.log, suite.log, report.json) goes")
	fs.StringVar(&o.worldBin, "world", filepath.Join(root, "bin", "run-world"), "the world's binary (make world builds it)")
	fs.StringVar(&o.suiteBin, "suite", filepath.Join(root, "bin", "regression.test"), "the regression suite's test binary (go test -c sigs.k8s.io/karpenter/test/suites/regression)")
	fs.StringVar(&o.skipFile, "skip-file", filepath.Join(root, "test", "conformance", "skip.txt"), "specs not applicable to this provider, with reasons")
	fs.StringVar(&o.nodeClass, "nodeclass", filepath.Join(root, "test", "conformance", "nodeclass.yaml"), "the suite's --default-nodeclass in the default pass")
	fs.StringVar(&o.nodePool, "nodepool", filepath.Join(root, "test", "conformance", "nodepool.yaml"), "the suite's --default-nodepool in the default pass")
	fs.StringVar(&o.sizingDir, "sizing-dir", filepath.Join(root, "test", "conformance"), "where the NodeClass and NodePool files of conformance.Sizings are")
	fs.StringVar(&o.focus, "focus", os.Getenv("FOCUS"), "Ginkgo focus expression ($FOCUS); empty runs every spec")
	fs.StringVar(&o.profile, "profile", "fast", "the world's delay profile")
	fs.StringVar(&o.featureGates, "feature-gates", envOr("CONFORMANCE_FEATURE_GATES", defaultFeatureGates), "the controller's FEATURE_GATES for the run ($CONFORMANCE_FEATURE_GATES); empty keeps the controller's defaults")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Hour, "the whole suite's timeout (--ginkgo.timeout)")
	fs.IntVar(&o.parallel, "parallel", 1, "worlds at once: each pass is split into this many shards, each on a world of its own")
	fs.BoolVar(&o.keep, "keep", false, "keep the world's logs in <dir>/world/run after the stop")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, p := range []*string{&o.dir, &o.worldBin, &o.suiteBin, &o.skipFile, &o.nodeClass, &o.nodePool, &o.sizingDir} {
		if *p, err = filepath.Abs(*p); err != nil {
			return o, err
		}
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if err != nil {
		return 2
	}
	s, err := conformance.ReadSkipFile(o.skipFile)
	if err != nil {
		fmt.Fprintln(stderr, "conformance:", err)
		return 2
	}
	for _, b := range []string{o.worldBin, o.suiteBin} {
		if _, err := os.Stat(b); err != nil {
			fmt.Fprintf(stderr, "conformance: %v (make conformance builds it)\n", err)
			return 2
		}
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		fmt.Fprintln(stderr, "conformance:", err)
		return 1
	}
	plan, err := planRun(o, s)
	if err != nil {
		fmt.Fprintln(stderr, "conformance:", err)
		return 1
	}
	took := lastDurations(o.dir)
	if o.parallel > 1 && len(took) > 0 {
		fmt.Fprintf(stdout, "conformance: shards dealt by how long %d specs took in the last run (%s)\n", len(took), filepath.Join(o.dir, "*", "report.json"))
	}
	plan = plan.Shard(o.parallel, took)
	for _, ps := range plan.Passes {
		fmt.Fprintf(stdout, "conformance: %s pass: %d specs with %s and %s\n", ps.Name, len(ps.Specs), ps.NodeClass, ps.NodePool)
	}
	sum := runPasses(ctx, o, plan, stdout, stderr)
	sum.Report(stdout)
	if len(sum.Failed) > 0 {
		return 1
	}
	return 0
}

// lastDurations is how long each spec took in the reports the last run left
// in dir (none on a first run; an unreadable report is passed over: the
// durations only deal the shards).
func lastDurations(dir string) map[string]time.Duration {
	took := map[string]time.Duration{}
	paths, _ := filepath.Glob(filepath.Join(dir, "*", "report.json"))
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		reports, err := conformance.ReadReport(bytes.NewReader(b))
		if err != nil {
			continue
		}
		maps.Copy(took, conformance.Durations(reports))
	}
	return took
}

// runPasses runs the plan's passes, o.parallel at a time, and sums their
// outcomes with the plan's specs not applicable. With more than one at a
// time, each suite's output goes only to its pass's suite.log.
func runPasses(ctx context.Context, o options, plan conformance.Plan, stdout, stderr io.Writer) conformance.Summary {
	sum := conformance.Summary{NotApplicable: plan.NotApplicable, OutsideFocus: plan.OutsideFocus}
	var mu sync.Mutex
	status := &lockedWriter{mu: &mu, w: stdout}
	suiteOut := io.Writer(status)
	if o.parallel > 1 {
		suiteOut = io.Discard
	}
	next := make(chan conformance.Pass)
	var wg sync.WaitGroup
	for range max(o.parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ps := range next {
				got, err := runPass(ctx, o, plan, ps, status, suiteOut)
				if err != nil {
					fmt.Fprintf(&lockedWriter{mu: &mu, w: stderr}, "conformance: %s pass: %v\n", ps.Name, err)
					got.Add(ps.Outcome(nil))
				}
				fmt.Fprintf(status, "conformance: %s pass: %d passed, %d failed\n", ps.Name, len(got.Passed), len(got.Failed))
				mu.Lock()
				sum.Add(got)
				mu.Unlock()
			}
		}()
	}
	for _, ps := range plan.Passes {
		next <- ps
	}
	close(next)
	wg.Wait()
	return sum
}

// lockedWriter serializes the writes of concurrent passes.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// planRun lists the suite's specs with a Ginkgo dry run (no cluster needed)
// and plans them.
func planRun(o options, skips []conformance.Skip) (conformance.Plan, error) {
	var focus *regexp.Regexp
	if o.focus != "" {
		var err error
		if focus, err = regexp.Compile(o.focus); err != nil {
			return conformance.Plan{}, fmt.Errorf("focus: %w", err)
		}
	}
	report := filepath.Join(o.dir, "specs.json")
	cmd := exec.Command(o.suiteBin, "-ginkgo.dry-run", "-ginkgo.no-color", "-ginkgo.json-report", report,
		"-default-nodeclass", o.nodeClass, "-default-nodepool", o.nodePool)
	cmd.Dir = o.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return conformance.Plan{}, fmt.Errorf("listing the suite's specs: %w\n%s", err, out)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		return conformance.Plan{}, err
	}
	reports, err := conformance.ReadReport(bytes.NewReader(b))
	if err != nil {
		return conformance.Plan{}, err
	}
	desc, specs := conformance.Specs(reports)
	if len(specs) == 0 {
		return conformance.Plan{}, fmt.Errorf("the suite's dry run (%s) lists no spec", report)
	}
	def := conformance.Pass{Name: "default", NodeClass: o.nodeClass, NodePool: o.nodePool}
	return conformance.MakePlan(desc, specs, focus, skips, def, conformance.Sizings, o.sizingDir), nil
}

// runPass starts a world in <dir>/<pass>, runs the pass's specs against it
// and stops the world, also when the suite or the caller's context ended
// the run.
func runPass(ctx context.Context, o options, plan conformance.Plan, ps conformance.Pass, status, suiteOut io.Writer) (sum conformance.Summary, err error) {
	if err := ctx.Err(); err != nil {
		return sum, err
	}
	dir := filepath.Join(o.dir, ps.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return sum, err
	}
	t0 := time.Now()
	w, err := startWorld(ctx, o, dir)
	if err != nil {
		return sum, err
	}
	// The world checks the money invariants over its ledger when it stops
	// and exits non-zero when one broke: the pass then has a failure of its
	// own, beside its specs' outcomes.
	defer func() {
		if serr := w.stop(); serr != nil {
			msg := serr.Error()
			if b, err := os.ReadFile(filepath.Join(dir, "world", "money.txt")); err == nil {
				msg += "; " + strings.SplitN(string(b), "\n", 2)[0]
			}
			sum.Failed = append(sum.Failed, conformance.Spec{Text: "[world] " + ps.Name + " pass", Failure: msg})
		}
	}()
	fmt.Fprintf(status, "conformance: %s pass: world ready after %s (log %s)\n", ps.Name, time.Since(t0).Round(100*time.Millisecond), w.logPath)

	report := filepath.Join(dir, "report.json")
	_ = os.Remove(report)
	t1 := time.Now()
	suiteErr := runSuite(ctx, o, dir, plan.Focus(ps), ps, w.kubeconfig, report, suiteOut)
	fmt.Fprintf(status, "conformance: %s pass: suite process ended after %s (%v); log %s, report %s\n",
		ps.Name, time.Since(t1).Round(time.Second), suiteErr, filepath.Join(dir, "suite.log"), report)
	f, err := os.Open(report)
	if err != nil {
		return sum, fmt.Errorf("no report from the suite: %w", errors.Join(err, suiteErr))
	}
	defer f.Close()
	reports, err := conformance.ReadReport(f)
	if err != nil {
		return sum, err
	}
	return ps.Outcome(reports), nil
}

// world is a running bin/run-world.
type world struct {
	cmd        *exec.Cmd
	done       chan error
	logPath    string
	kubeconfig string
}

// startWorld runs bin/run-world in the background in dir, with its output
// in <dir>/world.log, and waits until it printed its kubeconfig.
func startWorld(ctx context.Context, o options, dir string) (*world, error) {
	logPath := filepath.Join(dir, "world.log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := []string{"-dir", filepath.Join(dir, "world"), "-profile", o.profile, "-defaults=false"}
	if o.keep {
		args = append(args, "-keep")
	}
	if o.featureGates != "" {
		args = append(args, "-controller-env", "FEATURE_GATES="+o.featureGates)
	}
	cmd := exec.Command(o.worldBin, args...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	w := &world{cmd: cmd, done: make(chan error, 1), logPath: logPath}
	go func() {
		err := cmd.Wait()
		pw.Close()
		w.done <- err
	}()
	kubeconfig := make(chan string, 1)
	go func() {
		defer log.Close()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fmt.Fprintln(log, sc.Text())
			if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "export KUBECONFIG="); ok {
				kubeconfig <- v
			}
		}
	}()
	select {
	case w.kubeconfig = <-kubeconfig:
		return w, nil
	case err := <-w.done:
		w.done <- err
		return nil, fmt.Errorf("the world exited before it was ready, see %s: %w", logPath, err)
	case <-time.After(5 * time.Minute):
		return nil, errors.Join(fmt.Errorf("the world was not ready after 5 minutes: see %s", logPath), w.stop())
	case <-ctx.Done():
		return nil, errors.Join(ctx.Err(), w.stop())
	}
}

// stop interrupts the world as Ctrl-C would, so it stops every process it
// started, and kills it when it has not exited two minutes later.
func (w *world) stop() error {
	_ = w.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-w.done:
		w.done <- err
		if err != nil {
			return fmt.Errorf("world: %w (see %s)", err, w.logPath)
		}
		return nil
	case <-time.After(2 * time.Minute):
		_ = w.cmd.Process.Kill()
		return fmt.Errorf("the world did not stop within 2 minutes of SIGINT; killed (see %s)", w.logPath)
	}
}

// runSuite runs the regression suite's test binary on the specs of focus
// against the world, with the pass's NodeClass and NodePool, its output in
// <dir>/suite.log and on stdout, and its Ginkgo JSON report in report.
// Interrupted (ctx), it gets SIGINT, as Ginkgo then still writes the report
// of the specs that ran.
func runSuite(ctx context.Context, o options, dir, focus string, ps conformance.Pass, kubeconfig, report string, stdout io.Writer) error {
	log, err := os.Create(filepath.Join(dir, "suite.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	args := []string{
		"-test.timeout", (o.timeout + 10*time.Minute).String(),
		"-ginkgo.timeout", o.timeout.String(),
		"-ginkgo.no-color",
		"-ginkgo.json-report", report,
		"-default-nodeclass", ps.NodeClass,
		"-default-nodepool", ps.NodePool,
		"-ginkgo.focus", focus,
	}
	cmd := exec.Command(o.suiteBin, args...)
	// The suite leaves its timing tables in OUTPUT_DIR; the directory holds
	// them rather than a new one in /tmp per run.
	out := filepath.Join(dir, "output")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "OUTPUT_DIR="+out)
	cmd.Dir = dir
	cmd.Stdout = io.MultiWriter(log, stdout)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-done:
			return err
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			return <-done
		}
	}
}
