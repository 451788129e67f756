// Command world runs the simulated Scaleway world with the provider and
// Karpenter core until it is stopped (`make world`): etcd, kube-apiserver,
// kube-scheduler, kube-controller-manager, an S3 server holding a published
// Talos-like image, the Elastic Metal API simulator with its rescue hosts
// and simulated Talos, KWOK playing the pods of the nodes that Talos
// registered, and bin/karpenter-scaleway-em. It applies a NodeClass and a
// NodePool named "default" that fit the world (not with -defaults=false,
// for Karpenter's suites, which want none), writes an admin kubeconfig,
// prints how to use it and how to stop, then follows NodeClaims, nodes and
// pods until SIGINT or SIGTERM, when it stops everything it started.
//
//	make world                       # fast delays (seconds)
//	WORLD_PROFILE=realistic make world
//	bin/run-world -dir /tmp/w -keep     # another directory; keep the logs after the stop
//
// Anything can drive it through the kubeconfig: kubectl, or Karpenter's own
// test suites (make conformance).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/invariants"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
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

// Names of what the world applies, and of the files next to the kubeconfig.
const (
	defaultNodeClass = "default"
	defaultNodePool  = "default"
	kubeconfigFile   = "kubeconfig"
	nodeClassFile    = "nodeclass.yaml"
	nodePoolFile     = "nodepool.yaml"
	pidFile          = "pid"
	// moneyFile holds the money check of the world's last run (checkMoney).
	moneyFile = "money.txt"
)

// options of one run.
type options struct {
	dir     string // kubeconfig, the default objects' YAML, pid; the world's files in dir/run
	profile string
	keep    bool
	// defaults applies NodeClass and NodePool "default"; Karpenter's suites
	// (make conformance) want a cluster without any and bring their own.
	defaults bool
	// env adds KEY=VALUE to the controller's environment (FEATURE_GATES...).
	env []string
}

// run starts the world, serves until ctx ends and stops it: 0 after a clean
// stop, 1 when the world failed, 2 on bad usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("world", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.dir, "dir", "", "where the kubeconfig, the NodeClass and NodePool YAML, and the world's files (run/) go (default <repo>/bin/world)")
	fs.StringVar(&o.profile, "profile", envOr("WORLD_PROFILE", envOr("DEMO_PROFILE", "fast")), "simulator delays: test, fast or realistic ($WORLD_PROFILE, else $DEMO_PROFILE)")
	fs.BoolVar(&o.keep, "keep", false, "keep the world's files (logs, disks) in <dir>/run after the stop")
	fs.BoolVar(&o.defaults, "defaults", true, "apply NodeClass and NodePool default (false: none, as Karpenter's suites want)")
	fs.Func("controller-env", "KEY=VALUE added to the controller's environment (repeatable), e.g. FEATURE_GATES=StaticCapacity=true", func(v string) error {
		if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
			return fmt.Errorf("want KEY=VALUE, got %q", v)
		}
		o.env = append(o.env, v)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.dir == "" {
		root, err := testenv.RepoRoot()
		if err != nil {
			fmt.Fprintln(stderr, "world:", err)
			return 2
		}
		o.dir = filepath.Join(root, "bin", "world")
	}
	s := &server{out: stdout, start: time.Now(), opts: o}
	if err := s.serve(ctx); err != nil {
		fmt.Fprintln(stderr, "world: FAILED:", err)
		return 1
	}
	return 0
}

// server is one running world and what it prints.
type server struct {
	out   io.Writer
	start time.Time
	opts  options

	mu sync.Mutex
}

func (s *server) printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.out, "[%7.1fs] "+format+"\n", append([]any{time.Since(s.start).Seconds()}, args...)...)
}

// serve runs the world until ctx ends. Everything started is stopped on
// the way out, also after a failure halfway.
func (s *server) serve(ctx context.Context) (err error) {
	dir, err := filepath.Abs(s.opts.dir)
	if err != nil {
		return err
	}
	if err := claimDir(dir); err != nil {
		return err
	}
	runDir := filepath.Join(dir, "run")
	defer func() {
		// Files that point at a world that no longer runs would mislead.
		for _, f := range []string{kubeconfigFile, nodeClassFile, nodePoolFile, pidFile} {
			_ = os.Remove(filepath.Join(dir, f))
		}
		if !s.opts.keep {
			err = errors.Join(err, os.RemoveAll(runDir))
		}
	}()
	s.printf("starting the simulated world (profile %s) in %s", s.opts.profile, runDir)
	w, err := world.New(ctx, world.Options{Profile: s.opts.profile, ClusterName: "world", Dir: runDir, RunPods: true,
		Logf: func(f string, a ...any) { s.printf(f, a...) }})
	if err != nil {
		return err
	}
	defer func() {
		s.printf("stopping the world")
		err = errors.Join(err, w.Stop())
	}()
	c, err := w.NewController(world.ControllerOptions{Env: s.opts.env})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, c.Stop()) }()
	hctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := c.WaitHealthy(hctx); err != nil {
		return err
	}
	s.printf("bin/karpenter-scaleway-em running (pid %d, log %s)", c.Pid(), c.LogPath)
	if s.opts.defaults {
		if err := s.applyDefaults(ctx, w, dir); err != nil {
			return err
		}
	}
	kubeconfig := filepath.Join(dir, kubeconfigFile)
	if err := os.WriteFile(kubeconfig, w.Kube.Kubeconfig, 0o600); err != nil {
		return err
	}
	s.printf("world ready after %s; use it with:", time.Since(s.start).Round(100*time.Millisecond))
	s.mu.Lock()
	fmt.Fprintf(s.out, "  export KUBECONFIG=%s\n", kubeconfig)
	fmt.Fprintf(s.out, "  kubectl get nodeclaims,nodes -o wide; kubectl get pods -A -o wide\n")
	fmt.Fprintf(s.out, "  logs: %s (controller/, kube/, pods/, machines/, scwsim.log)\n", runDir)
	fmt.Fprintf(s.out, "stop it with Ctrl-C or: kill %d\n", os.Getpid())
	s.mu.Unlock()

	claims := world.NewClaimLog()
	watch(ctx, w, claims, s.printf)
	return s.checkMoney(w, claims, dir)
}

// checkMoney checks the money invariants over the simulated Scaleway's
// ledger of this world's whole life (world.CheckMoney: no NodeClaim with two
// servers, none taken from a live NodeClaim, none billed without an owner
// beyond the GC grace and a sweep), writes them to <dir>/money.txt and fails
// the world's exit when one broke: whatever drove the world (kubectl,
// Karpenter's regression suite) had servers leaked or doubled.
func (s *server) checkMoney(w *world.World, claims *world.ClaimLog, dir string) error {
	vs := w.CheckMoney(claims.Claims(), time.Now())
	orders := 0
	for _, e := range w.Sim.Ledger() {
		if e.Kind == scwsim.LedgerOrder {
			orders++
		}
	}
	looks, slowest := claims.Listings()
	report := fmt.Sprintf("money invariants (I1, I2, I4) over %d servers ordered and %d NodeClaims: %d broken"+
		" (%d listings of the NodeClaims and Nodes, the slowest %s)\n%s",
		orders, len(claims.Claims()), len(vs), looks, slowest.Round(time.Millisecond), invariants.Report(vs))
	path := filepath.Join(dir, moneyFile)
	if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
		return err
	}
	s.printf("%s", strings.TrimSpace(report))
	if len(vs) > 0 {
		return fmt.Errorf("%d money invariants broken (see %s)", len(vs), path)
	}
	return nil
}

// claimDir makes dir and records this process in it, refusing a directory
// a running world holds; a stale pid (a world killed with SIGKILL) and its
// leftovers are cleared.
func claimDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	pid := filepath.Join(dir, pidFile)
	if b, err := os.ReadFile(pid); err == nil {
		if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && p != os.Getpid() && syscall.Kill(p, 0) == nil {
			return fmt.Errorf("a world already runs in %s (pid %d): stop it, or give another -dir", dir, p)
		}
	}
	for _, stale := range []string{"run", moneyFile} {
		if err := os.RemoveAll(filepath.Join(dir, stale)); err != nil {
			return err
		}
	}
	return os.WriteFile(pid, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600)
}

// applyDefaults applies NodeClass and NodePool "default" (the world's
// bucket, image and join Secret; hourly offers), writes them as YAML next to
// the kubeconfig for tools that want the same objects, and waits until the
// NodeClass is Ready.
func (s *server) applyDefaults(ctx context.Context, w *world.World, dir string) error {
	nc := w.NodeClass(defaultNodeClass)
	np := w.NodePool(defaultNodePool, defaultNodeClass)
	np.TypeMeta.APIVersion, np.TypeMeta.Kind = "karpenter.sh/v1", "NodePool"
	for f, o := range map[string]client.Object{nodeClassFile: nc, nodePoolFile: np} {
		b, err := yaml.Marshal(o)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			return err
		}
	}
	if err := w.Apply(ctx, nc, np); err != nil {
		return err
	}
	if err := w.WaitNodeClassReady(ctx, nc.Name, 2*time.Minute); err != nil {
		return err
	}
	s.printf("NodeClass %s Ready and NodePool %s applied (%s, %s)", nc.Name, np.Name,
		filepath.Join(dir, nodeClassFile), filepath.Join(dir, nodePoolFile))
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
