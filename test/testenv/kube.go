package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	karpenterapis "sigs.k8s.io/karpenter/pkg/apis"

	// Karpenter's API packages register their types into client-go's
	// scheme.Scheme in init(); importing them makes NodePool, NodeClaim and
	// NodeOverlay usable with Kube.Client.
	_ "sigs.k8s.io/karpenter/pkg/apis/v1"
	_ "sigs.k8s.io/karpenter/pkg/apis/v1alpha1"
)

// KubeOptions configures NewKube. The zero value starts an API server with
// Karpenter core's CRDs installed.
type KubeOptions struct {
	// CRDs to install in addition to Karpenter's.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// CRDPaths are files or directories of CRD YAML/JSON to install. A path
	// that does not exist is an error.
	CRDPaths []string
	// CRDYAML are (multi-document) YAML streams of CRDs to install.
	CRDYAML [][]byte
	// NoKarpenterCRDs leaves out Karpenter core's CRDs (NodePool, NodeClaim,
	// NodeOverlay, CapacityBuffer), which are installed by default.
	NoKarpenterCRDs bool
	// Scheme for Kube.Client. Default: client-go's scheme.Scheme, which holds
	// the built-in types, Karpenter's and apiextensions/v1.
	Scheme *runtime.Scheme
	// APIServerFlags are extra kube-apiserver flags, e.g.
	// {"feature-gates": {"X=true"}}; a flag given here replaces testenv's and
	// envtest's value for it. By default the ServiceAccount and
	// TaintNodesByCondition admission plugins are disabled, as no
	// kube-controller-manager runs to complete their work.
	APIServerFlags map[string][]string
	// Dir holds the kubeconfig and the logs. Default: a new temporary
	// directory removed by Stop.
	Dir string
	// StartTimeout bounds each of etcd's and kube-apiserver's start. Default:
	// $KUBEBUILDER_CONTROLPLANE_START_TIMEOUT, else 2 minutes (a loaded
	// 2-core CI machine needs more than envtest's 20s).
	StartTimeout time.Duration
}

// Kube is a running etcd + kube-apiserver with an admin identity.
type Kube struct {
	// Config is an admin (system:masters) REST config.
	Config *rest.Config
	// Client is a controller-runtime client on Config with Scheme.
	Client client.Client
	Scheme *runtime.Scheme
	// Kubeconfig is Config as a kubeconfig file's content; KubeconfigPath is
	// that file (mode 0600) in the directory.
	Kubeconfig     []byte
	KubeconfigPath string
	// Dir holds the kubeconfig and the logs (etcd.log, kube-apiserver.log).
	Dir string
	// CRDs are the CRDs that were installed.
	CRDs []*apiextensionsv1.CustomResourceDefinition

	env     *envtest.Environment
	logs    []*os.File
	tempDir string
	stopped sync.Once
	stopErr error
}

var addAPIExtensions = sync.OnceValue(func() error { return apiextensionsv1.AddToScheme(scheme.Scheme) })

// KarpenterCRDs returns Karpenter core's CRDs as embedded in
// sigs.k8s.io/karpenter/pkg/apis (deep copies; safe to modify).
func KarpenterCRDs() []*apiextensionsv1.CustomResourceDefinition {
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(karpenterapis.CRDs))
	for _, c := range karpenterapis.CRDs {
		out = append(out, c.DeepCopy())
	}
	return out
}

// ParseCRDs reads CRDs from a (multi-document) YAML or JSON stream. Empty
// documents are skipped; any other kind is an error.
func ParseCRDs(data []byte) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*apiextensionsv1.CustomResourceDefinition
	for i := 0; ; i++ {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(raw.Raw)) == 0 || string(bytes.TrimSpace(raw.Raw)) == "null" {
			continue
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := utilyaml.Unmarshal(raw.Raw, crd); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if crd.Kind != "CustomResourceDefinition" || crd.APIVersion != apiextensionsv1.SchemeGroupVersion.String() {
			return nil, fmt.Errorf("document %d: kind %q apiVersion %q, want CustomResourceDefinition %s", i, crd.Kind, crd.APIVersion, apiextensionsv1.SchemeGroupVersion)
		}
		out = append(out, crd)
	}
}

// NewKube starts etcd and kube-apiserver (through envtest, with the binaries
// from FindBinary), installs the CRDs and writes a kubeconfig. Call Stop
// when done.
func NewKube(ctx context.Context, opts KubeOptions) (*Kube, error) {
	apiserverBin, err := FindBinary(BinKubeAPIServer)
	if err != nil {
		return nil, err
	}
	etcdBin, err := FindBinary(BinEtcd)
	if err != nil {
		return nil, err
	}
	if err := addAPIExtensions(); err != nil {
		return nil, err
	}
	k := &Kube{Scheme: opts.Scheme}
	if k.Scheme == nil {
		k.Scheme = scheme.Scheme
	}
	if k.Dir, k.tempDir, err = workDir(opts.Dir, "testenv-kube-"); err != nil {
		return nil, err
	}
	fail := func(err error) (*Kube, error) {
		return nil, errors.Join(err, k.Stop())
	}
	crds, err := opts.crds()
	if err != nil {
		return fail(err)
	}
	apiLog, err := k.openLog("kube-apiserver.log")
	if err != nil {
		return fail(err)
	}
	etcdLog, err := k.openLog("etcd.log")
	if err != nil {
		return fail(err)
	}
	newEnv := func() *envtest.Environment {
		return k.newEnv(opts, crds, &envtest.APIServer{Path: apiserverBin, Out: apiLog, Err: apiLog},
			&envtest.Etcd{Path: etcdBin, Out: etcdLog, Err: etcdLog})
	}
	res := k.startControlPlane(ctx, newEnv, apiLog.Name(), etcdLog.Name())
	if res.err != nil {
		return fail(fmt.Errorf("start kube-apiserver/etcd: %w\nkube-apiserver log tail:\n%s\netcd log tail:\n%s",
			res.err, fileTail(apiLog.Name(), 20), fileTail(etcdLog.Name(), 10)))
	}
	k.Config = res.cfg
	if err := k.connect(); err != nil {
		return fail(err)
	}
	return k, nil
}

// crds gathers the CRDs to install: Karpenter's unless left out, the
// options' objects, then their YAML. A CRD path that does not exist fails
// here: envtest would notice only after starting the control plane, and
// this error names the field.
func (opts KubeOptions) crds() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var crds []*apiextensionsv1.CustomResourceDefinition
	if !opts.NoKarpenterCRDs {
		crds = append(crds, KarpenterCRDs()...)
	}
	crds = append(crds, opts.CRDs...)
	for i, y := range opts.CRDYAML {
		parsed, err := ParseCRDs(y)
		if err != nil {
			return nil, fmt.Errorf("KubeOptions.CRDYAML[%d]: %w", i, err)
		}
		crds = append(crds, parsed...)
	}
	for i, p := range opts.CRDPaths {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("KubeOptions.CRDPaths[%d]: %w", i, err)
		}
	}
	return crds, nil
}

// newEnv builds an envtest environment for the options. No
// kube-controller-manager runs here, so nothing would ever remove the
// node.kubernetes.io/not-ready taint that TaintNodesByCondition puts on
// every new Node: pods could never schedule onto registered nodes. envtest
// already disables ServiceAccount (no token controller either).
func (k *Kube) newEnv(opts KubeOptions, crds []*apiextensionsv1.CustomResourceDefinition, apiserver *envtest.APIServer, etcd *envtest.Etcd) *envtest.Environment {
	timeout := opts.StartTimeout
	if timeout == 0 && os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT") == "" {
		timeout = 2 * time.Minute
	}
	apiserver.Configure().Append("disable-admission-plugins", "TaintNodesByCondition")
	for flag, values := range opts.APIServerFlags {
		apiserver.Configure().Set(flag, values...)
	}
	return &envtest.Environment{
		ControlPlane:             envtest.ControlPlane{APIServer: apiserver, Etcd: etcd},
		Scheme:                   k.Scheme,
		CRDs:                     crds,
		CRDDirectoryPaths:        opts.CRDPaths,
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: timeout,
	}
}

// startControlPlane starts etcd and kube-apiserver. envtest picks its
// ports by listening and closing, then retries with the same ports: a
// process that binds one meanwhile (another world's S3 or etcd, started
// side by side) fails all its retries. So a start that failed on an
// address in use is tried again with a fresh environment, which picks
// fresh ports.
func (k *Kube) startControlPlane(ctx context.Context, newEnv func() *envtest.Environment, apiLog, etcdLog string) startResult {
	var res startResult
	for attempt := 1; ; attempt++ {
		k.env = newEnv()
		res = startEnv(ctx, k.env)
		if res.err == nil || attempt == startAttempts || ctx.Err() != nil ||
			!strings.Contains(fileTail(etcdLog, 10)+fileTail(apiLog, 10), "address already in use") {
			return res
		}
		_ = k.env.Stop()
	}
}

// connect writes the kubeconfig of the started control plane and makes
// the client.
func (k *Kube) connect() error {
	k.CRDs = k.env.CRDs
	k.Kubeconfig = k.env.KubeConfig
	k.KubeconfigPath = filepath.Join(k.Dir, "kubeconfig")
	if err := os.WriteFile(k.KubeconfigPath, k.Kubeconfig, 0o600); err != nil {
		return err
	}
	var err error
	k.Client, err = client.New(k.Config, client.Options{Scheme: k.Scheme})
	return err
}

type startResult struct {
	cfg *rest.Config
	err error
}

// startEnv starts env; envtest's Start takes no context, so it is awaited
// even when ctx ends first (envtest has its own timeouts), and Stop then
// sees a settled state.
func startEnv(ctx context.Context, env *envtest.Environment) startResult {
	done := make(chan startResult, 1)
	go func() {
		cfg, err := env.Start()
		done <- startResult{cfg, err}
	}()
	select {
	case res := <-done:
		return res
	case <-ctx.Done():
		res := <-done
		if res.err == nil {
			res.err = ctx.Err()
		}
		return res
	}
}

func (k *Kube) openLog(name string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(k.Dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err == nil {
		k.logs = append(k.logs, f)
	}
	return f, err
}

// LogTails returns the last lines of the kube-apiserver and etcd logs.
func (k *Kube) LogTails(n int) string {
	return "kube-apiserver:\n" + fileTail(filepath.Join(k.Dir, "kube-apiserver.log"), n) +
		"\netcd:\n" + fileTail(filepath.Join(k.Dir, "etcd.log"), n)
}

// Stop stops kube-apiserver and etcd and removes the directory if NewKube
// created it. It is safe to call more than once.
func (k *Kube) Stop() error {
	k.stopped.Do(func() {
		var errs []error
		if k.env != nil {
			errs = append(errs, k.env.Stop())
		}
		for _, f := range k.logs {
			errs = append(errs, f.Close())
		}
		if k.tempDir != "" {
			errs = append(errs, os.RemoveAll(k.tempDir))
		}
		k.stopErr = errors.Join(errs...)
	})
	return k.stopErr
}

// StartKube starts a kube-apiserver + etcd for the test (Karpenter's CRDs
// installed unless opts.NoKarpenterCRDs) and stops it on cleanup. It fails
// the test, naming `make tools`, when a binary is missing.
func StartKube(t testing.TB, opts KubeOptions) *Kube {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	k, err := NewKube(context.Background(), opts)
	if err != nil {
		t.Fatalf("testenv: start Kubernetes control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: control plane log tails:\n%s", k.LogTails(30))
		}
		if err := k.Stop(); err != nil {
			t.Errorf("testenv: stop Kubernetes control plane: %v", err)
		}
	})
	return k
}

// CachedClient is a client that reads through a started informer cache, as
// Karpenter core's controllers do, with the spec.providerID index on Nodes
// that core lists them by. The cache stops with t.
func (k *Kube) CachedClient(t testing.TB) client.Client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := cache.New(k.Config, cache.Options{Scheme: k.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.IndexField(ctx, &corev1.Node{}, "spec.providerID", func(o client.Object) []string {
		return []string{o.(*corev1.Node).Spec.ProviderID}
	}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("cache never synced")
	}
	cached, err := client.New(k.Config, client.Options{Scheme: k.Scheme, Cache: &client.CacheOptions{Reader: c}})
	if err != nil {
		t.Fatal(err)
	}
	return cached
}
