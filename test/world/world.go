package world

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/manifest"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/diskimage"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/machine"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/talosapi"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

// Defaults of a world.
const (
	DefaultClusterName     = "sim"
	DefaultSystemNamespace = "karpenter"
	DefaultBucket          = "talos-images"
	DefaultPrefix          = "talos"
	DefaultTalosVersion    = "v1.12.1"
	// DefaultImageSize keeps imaging quick in tests while still going
	// through every em-imager stage (download, decode, hash, write).
	DefaultImageSize = 32 << 20
	// JoinSecretName is the join Secret (in the system namespace).
	JoinSecretName = "talos-join"
)

// SchematicID is the (made-up) Image Factory schematic of the simulated images.
var SchematicID = func() string {
	h := sha256.Sum256([]byte("karpenter-scaleway-em simulated schematic"))
	return hex.EncodeToString(h[:])
}()

// Options configure a world. The zero value is a world with the "test"
// delay profile.
type Options struct {
	// Profile is the simulator's delay profile: test (default), fast, realistic.
	Profile string
	// Sim adjusts the simulator's options after the profile is applied
	// (stock, quotas, jitter...).
	Sim func(*scwsim.Options)
	// ClusterName (tag karpenter.sh/managed-by) and SystemNamespace of the controller.
	ClusterName     string
	SystemNamespace string
	// TalosVersion of the image published at start; ImageSize its raw size.
	// SchematicID (default SchematicID), Bucket and Prefix say where it goes.
	TalosVersion string
	SchematicID  string
	Bucket       string
	Prefix       string
	// JoinSecretName in the system namespace (default JoinSecretName).
	JoinSecretName string
	ImageSize      int64
	// ImageKernelArgs are the kernel arguments of the images published
	// (default diskimage.MetalISOKernelArgs: nodes read their config from
	// the metal-iso partition, NodeClass configDelivery Disk, the default).
	// diskimage.DefaultKernelArgs makes images that only the legacy
	// configDelivery MaintenanceAPI can configure.
	ImageKernelArgs string
	// Dir holds every log, disk and bucket; empty: a temporary directory
	// (t.TempDir() under Start) removed on Stop.
	Dir string
	// ImageFormats published: zstd (default, what the controller prefers)
	// and/or xz (slower to publish).
	ImageFormats []string
	// Host tunes the simulated machines.
	Host HostOptions
	// RescueLogin is how the simulated rescue systems let the controller
	// in (default RescueLoginKey).
	RescueLogin RescueLogin
	// RunPods makes pods run as in a cluster: kube-controller-manager
	// (Deployments, ReplicaSets, Jobs, DaemonSets, the node lifecycle and
	// taint eviction, garbage collection) and KWOK, which plays the pods of
	// the nodes the simulated Talos registered (Running and Ready; a
	// terminating pod is deleted once its preStop hook, at most its grace
	// period, has run). Off, pods stay as the scheduler bound
	// them and Workload plays the ReplicaSet. docs/world.md says who owns
	// what.
	RunPods bool
	// Logf receives progress lines (nil: discarded; Start uses t.Logf).
	Logf func(format string, args ...any)
}

// RescueLogin is one of the rescue logins Scaleway's rescue systems are
// reported to have; the API shows each boot's user and password
// (rescue_server) in all of them.
type RescueLogin string

const (
	// RescueLoginKey (default): the key-only user "rescue", whose sudo
	// needs no password.
	RescueLoginKey RescueLogin = "key"
	// RescueLoginPassword: a per-server user em-XXXXX whose sudo wants the
	// password the API shows for the boot.
	RescueLoginPassword RescueLogin = "password"
	// RescueLoginRefused: as RescueLoginPassword, but sudo refuses the
	// API's password: every install fails in imaging (RescueSudoRefused).
	RescueLoginRefused RescueLogin = "refused-password"
	// RescueLoginAPIUserRefused: the API shows a per-server user em-XXXXX
	// for the boot, but the rescue system takes the key only for "rescue"
	// (passwordless sudo): the controller's login as the API's user is
	// refused and it logs in as RESCUE_SSH_USER instead.
	RescueLoginAPIUserRefused RescueLogin = "api-user-refused"
)

// rescueLogin sets the simulator up for login and says what the machines'
// sudo wants and which user their SSH takes ("": the API's).
func rescueLogin(login RescueLogin, sim *scwsim.Options) (machine.SudoPolicy, string, error) {
	switch login {
	case "", RescueLoginKey:
		return machine.SudoPasswordless, "", nil
	case RescueLoginPassword:
		sim.RescueUser = scwsim.RescueUserPerServer
		return machine.SudoAPIPassword, "", nil
	case RescueLoginRefused:
		sim.RescueUser = scwsim.RescueUserPerServer
		return machine.SudoRefusesAPIPassword, "", nil
	case RescueLoginAPIUserRefused:
		sim.RescueUser = scwsim.RescueUserPerServer
		return machine.SudoPasswordless, "rescue", nil
	}
	return "", "", fmt.Errorf("world: RescueLogin %q is not one of %q", login,
		[]RescueLogin{RescueLoginKey, RescueLoginPassword, RescueLoginRefused, RescueLoginAPIUserRefused})
}

// World is a running simulated Scaleway world with a Kubernetes control plane.
type World struct {
	Opts Options
	Dir  string

	Kube      *testenv.Kube
	Clientset kubernetes.Interface
	Scheduler *testenv.Scheduler
	// ControllerManager and KWOK run with Options.RunPods (nil otherwise).
	ControllerManager *testenv.ControllerManager
	KWOK              *testenv.KWOK
	S3                *testenv.S3
	Sim               *scwsim.Sim
	// SimURL is the Scaleway API endpoint (SCW_API_URL).
	SimURL string
	// Machines plays the servers (rescue SSH, Talos API, kubelet).
	Machines *Machines

	ClusterName     string
	SystemNamespace string
	Bucket, Prefix  string
	// Images published so far, by Talos version.
	Images map[string]Image
	// JoinSecret is the join Secret the NodeClass names.
	JoinSecret types.NamespacedName

	mu       sync.Mutex
	tempDir  string
	stopOnce sync.Once
	stopErr  error
	stops    []func() error
}

// Start builds a world for a test; it is stopped on t.Cleanup. A missing
// binary fails the test with the make target that builds it.
func Start(t testing.TB, opts Options) *World {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	w, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("world: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("world: log tails:\n%s", w.LogTails(25))
		}
		if err := w.Stop(); err != nil {
			t.Errorf("world: stop: %v", err)
		}
	})
	return w
}

// New builds and starts a world; Stop releases everything. On error,
// whatever was started is stopped.
func New(ctx context.Context, opts Options) (w *World, err error) {
	opts = opts.withDefaults()
	simOpts, err := scwsim.Profile(opts.Profile)
	if err != nil {
		return nil, fmt.Errorf("Options.Profile: %w", err)
	}
	if err := checkBinaries(opts.RunPods); err != nil {
		return nil, err
	}

	w = &World{Opts: opts, Dir: opts.Dir, ClusterName: opts.ClusterName, SystemNamespace: opts.SystemNamespace,
		Bucket: opts.Bucket, Prefix: opts.Prefix, Images: map[string]Image{},
		JoinSecret: types.NamespacedName{Namespace: opts.SystemNamespace, Name: opts.JoinSecretName}}
	if w.Dir == "" {
		if w.Dir, err = os.MkdirTemp("", "world-"); err != nil {
			return nil, err
		}
		w.tempDir = w.Dir
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, w.Stop())
			w = nil
		}
	}()
	if err := w.makeDirs(); err != nil {
		return w, err
	}
	if err := w.startKubeAndS3(ctx); err != nil {
		return w, err
	}
	if err := w.startScheduling(ctx); err != nil {
		return w, err
	}
	if err := w.createNamespace(ctx, opts.SystemNamespace); err != nil {
		return w, err
	}
	join, err := w.createJoinSecret(ctx)
	if err != nil {
		return w, fmt.Errorf("join Secret: %w", err)
	}
	if err := w.startSim(simOpts, join); err != nil {
		return w, err
	}
	opts.Logf("world: Scaleway API simulator at %s (profile %s)", w.SimURL, opts.Profile)
	return w, nil
}

// makeDirs makes the directory of each part of the world.
func (w *World) makeDirs() error {
	for _, d := range []string{"kube", "scheduler", "s3", "machines", "controller", "pods"} {
		if err := os.MkdirAll(filepath.Join(w.Dir, d), 0o700); err != nil {
			return err
		}
	}
	return nil
}

// withDefaults fills in every option left empty.
func (opts Options) withDefaults() Options {
	opts.Profile = cmp.Or(opts.Profile, scwsim.ProfileTest)
	opts.ClusterName = cmp.Or(opts.ClusterName, DefaultClusterName)
	opts.SystemNamespace = cmp.Or(opts.SystemNamespace, DefaultSystemNamespace)
	opts.TalosVersion = cmp.Or(opts.TalosVersion, DefaultTalosVersion)
	opts.SchematicID = cmp.Or(opts.SchematicID, SchematicID)
	opts.Bucket = cmp.Or(opts.Bucket, DefaultBucket)
	opts.Prefix = cmp.Or(opts.Prefix, DefaultPrefix)
	opts.JoinSecretName = cmp.Or(opts.JoinSecretName, JoinSecretName)
	opts.ImageSize = cmp.Or(opts.ImageSize, DefaultImageSize)
	opts.ImageKernelArgs = cmp.Or(opts.ImageKernelArgs, diskimage.MetalISOKernelArgs)
	if len(opts.ImageFormats) == 0 {
		opts.ImageFormats = []string{manifest.FormatZstd}
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	return opts
}

// checkBinaries fails fast, before minutes of work, when a binary the world
// runs is missing.
func checkBinaries(runPods bool) error {
	bins := []string{testenv.BinKubeAPIServer, testenv.BinEtcd, testenv.BinKubeScheduler, testenv.BinVersityGW}
	if runPods {
		bins = append(bins, testenv.BinKubeControllerManager, testenv.BinKWOK)
	}
	for _, b := range bins {
		if _, err := testenv.FindBinary(b); err != nil {
			return err
		}
	}
	_, err := FindBinary(BinEMImager)
	return err
}

// startKubeAndS3 starts Kubernetes, and S3 with the image, side by side:
// both take seconds.
func (w *World) startKubeAndS3(ctx context.Context) error {
	s3ch := make(chan error, 1)
	t0 := time.Now()
	go func() { s3ch <- w.startS3(ctx, t0) }()
	kube, kerr := testenv.NewKube(ctx, testenv.KubeOptions{Dir: filepath.Join(w.Dir, "kube"), CRDs: apis.CRDs})
	if kube != nil {
		w.Kube = kube
		w.onStop(kube.Stop)
	}
	s3err := <-s3ch
	if kerr != nil {
		return fmt.Errorf("kube-apiserver: %w", kerr)
	}
	if s3err != nil {
		return s3err
	}
	w.Opts.Logf("world: kube-apiserver %s up after %s", kube.Config.Host, time.Since(t0).Round(time.Millisecond))
	var err error
	w.Clientset, err = kubernetes.NewForConfig(kube.Config)
	return err
}

// startS3 starts S3, makes the bucket and publishes the image of the
// world's Talos version.
func (w *World) startS3(ctx context.Context, t0 time.Time) error {
	s3, err := testenv.NewS3(ctx, testenv.S3Options{Dir: filepath.Join(w.Dir, "s3")})
	if err != nil {
		return fmt.Errorf("S3: %w", err)
	}
	w.S3 = s3
	w.onStop(s3.Stop)
	if err := s3.CreateBucket(ctx, w.Bucket); err != nil {
		return fmt.Errorf("S3 bucket %s: %w", w.Bucket, err)
	}
	opts := w.Opts
	img, err := w.PublishImage(ctx, opts.TalosVersion)
	if err == nil {
		opts.Logf("world: S3 %s holds Talos-like image %s (raw sha256 %.12s, %d MiB, %s) after %s", s3.Endpoint,
			img.TalosVersion, img.RawSHA256, opts.ImageSize>>20, strings.Join(opts.ImageFormats, "+"), time.Since(t0).Round(time.Millisecond))
	}
	return err
}

// startScheduling starts kube-scheduler and, when the world runs pods,
// what runs them.
func (w *World) startScheduling(ctx context.Context) error {
	sched, err := testenv.NewScheduler(ctx, w.Kube, testenv.SchedulerOptions{Dir: filepath.Join(w.Dir, "scheduler")})
	if err != nil {
		return fmt.Errorf("kube-scheduler: %w", err)
	}
	w.Scheduler = sched
	w.onStop(sched.Stop)
	if w.Opts.RunPods {
		return w.startPods(ctx)
	}
	return nil
}

// startSim starts the Scaleway API simulator with the profile's options,
// the rescue login and the caller's changes, and the machines it boots.
func (w *World) startSim(simOpts scwsim.Options, join Join) error {
	opts := w.Opts
	sudo, sshUser, err := rescueLogin(opts.RescueLogin, &simOpts)
	if err != nil {
		return err
	}
	if opts.Sim != nil {
		opts.Sim(&simOpts)
	}
	if simOpts.Logf == nil {
		if simOpts.Logf, err = w.simLog(); err != nil {
			return err
		}
	}
	if err := simOpts.Validate(); err != nil {
		return err
	}
	w.Sim = scwsim.New(simOpts)
	w.onStop(func() error { w.Sim.Close(); return nil })
	machines, err := newMachines(w, join, opts.Host, sudo, sshUser)
	if err != nil {
		return fmt.Errorf("machines: %w", err)
	}
	w.Machines = machines
	w.onStop(machines.Close)
	w.Sim.SetHost(machines)
	if w.SimURL, err = w.Sim.Start(); err != nil {
		return fmt.Errorf("the Scaleway API simulator: %w", err)
	}
	return nil
}

// simLog is the simulator's log, scwsim.log in the world's directory, one
// timestamped line per call.
func (w *World) simLog() (func(format string, args ...any), error) {
	f, err := os.OpenFile(filepath.Join(w.Dir, "scwsim.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	w.onStop(f.Close)
	var mu sync.Mutex
	return func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(f, time.Now().UTC().Format("15:04:05.000 ")+format+"\n", args...)
	}, nil
}

func (w *World) onStop(f func() error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stops = append(w.stops, f)
}

// Stop stops everything the world started, last started first.
func (w *World) Stop() error {
	w.stopOnce.Do(func() {
		w.mu.Lock()
		stops := w.stops
		w.stops = nil
		w.mu.Unlock()
		var errs []error
		for i := len(stops) - 1; i >= 0; i-- {
			errs = append(errs, stops[i]())
		}
		if w.tempDir != "" {
			errs = append(errs, os.RemoveAll(w.tempDir))
		}
		w.stopErr = errors.Join(errs...)
	})
	return w.stopErr
}

// LogTails returns the last n lines of each component's log.
func (w *World) LogTails(n int) string {
	var b strings.Builder
	if w.Kube != nil {
		b.WriteString(w.Kube.LogTails(n))
	}
	logs := []string{filepath.Join(w.Dir, "scwsim.log"), filepath.Join(w.Dir, "machines", "machines.log")}
	if w.Opts.RunPods {
		logs = append(logs, filepath.Join(w.Dir, "pods", "kube-controller-manager.log"), filepath.Join(w.Dir, "pods", "kwok.log"))
	}
	for _, p := range logs {
		fmt.Fprintf(&b, "--- %s\n%s\n", filepath.Base(p), tailFile(p, n))
	}
	return b.String()
}

func (w *World) createNamespace(ctx context.Context, name string) error {
	_, err := w.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("namespace %s: %w", name, err)
	}
	return nil
}

// startPods starts kube-controller-manager and KWOK (Options.RunPods), both
// logging into <Dir>/pods. KWOK plays only the nodes the simulated Talos
// registered (talosapi.AnnotationKubelet) and no Node stage: their kubelet
// keeps their status and Lease.
func (w *World) startPods(ctx context.Context) error {
	dir := filepath.Join(w.Dir, "pods")
	kcm, err := testenv.NewControllerManager(ctx, w.Kube, testenv.ControllerManagerOptions{Dir: dir})
	if err != nil {
		return fmt.Errorf("kube-controller-manager: %w", err)
	}
	w.ControllerManager = kcm
	w.onStop(kcm.Stop)
	kw, err := testenv.NewKWOK(ctx, w.Kube, testenv.KWOKOptions{Dir: dir,
		ManageNodesWithAnnotation: talosapi.AnnotationKubelet + "=" + talosapi.KubeletSimulated})
	if err != nil {
		return fmt.Errorf("kwok: %w", err)
	}
	w.KWOK = kw
	w.onStop(kw.Stop)
	w.Opts.Logf("world: kube-controller-manager and KWOK running (pods of the simulated Talos nodes go Running)")
	return nil
}
