package docs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ociregistry "github.com/google/go-containerregistry/pkg/registry"
	"helm.sh/helm/v3/pkg/chart/loader"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/chart/helmrender"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// docFiles are the pages whose blocks TestDocs runs, in the order a new
// user reads them: the blocks of one page run in order, and the pages share
// one working directory and one API server (install.md's values.yaml is
// upgrade.md's).
var docFiles = []string{"README.md", "docs/install.md", "docs/upgrade.md", "docs/uninstall.md", "imager/README.md"}

// notHere is the one list of commands that cannot run here, each with its
// reason. A shell line (with its continuation lines) that starts with
// Prefix, in File, becomes a no-op; everything else in a shell block runs.
// An entry that matches no line fails the test, so the list never outlives
// the docs.
var notHere = []struct{ File, Prefix, Reason string }{
	{"README.md", "make demo", "runs the simulated world for minutes; test/e2e and CI's make demo run it"},
	{"README.md", "make test", "the suites this test is part of"},
	{"README.md", "ctr -n k8s.io images import", "needs containerd on a node and make image's archive"},
	{"README.md", "make image-push", "pushes to a real registry (registry.example.com)"},
	{"README.md", "curl -sS -X POST --data-binary @schematic.yaml https://factory.talos.dev", "Image Factory on the internet; TestIDsMatchImageFactory (imager/schematic) checks the ID offline"},
	{"docs/install.md", "garage ", "the garage CLI on a Garage node; the world's S3 server is versitygw"},
	{"docs/install.md", "curl -sS -X POST --data-binary @schematic.yaml https://factory.talos.dev", "Image Factory on the internet"},
	{"docs/install.md", "em-imager publish", "downloads from factory.talos.dev; imager/publish's tests and the walkthrough's world publish"},
	{"docs/install.md", "talosctl gen secrets", "talosctl is not installed here; the test puts a secrets.yaml in place"},
	{"docs/install.md", "docker buildx build", "pushes to a real registry (registry.example.com) after make image; TestBuild/dockerfiles (build/ociimage) builds both Dockerfiles with buildah and compares them with make image's"},
	{"docs/install.md", "buildah bud", "needs make image's bin/image/context (a minute of builds); TestBuild/dockerfiles (build/ociimage) runs the same buildah build"},
	{"docs/install.md", "kubectl -n karpenter logs deploy/karpenter-scaleway-em -f", "needs the controller running (no pods here: no kube-controller-manager)"},
	{"docs/uninstall.md", "SCW_ACCESS_KEY=... SCW_SECRET_KEY=...", "make smoke-live against a real Scaleway account; TestRunOnTheSimulatorReadsOnly (test/live) runs it on the simulator"},
	{"imager/README.md", "go test -run '^$' -fuzz", "fuzzes for 10 minutes; make fuzz"},
	{"imager/README.md", "go test -run 'FuzzXZ|XZ'", "make test runs ./imager/decompress's tests"},
	{"imager/README.md", "make deps", "installs Debian packages as root"},
	{"imager/README.md", "go test -count=1 ./imager/...", "make test runs it"},
	{"imager/README.md", "make bench", "minutes of benchmarks"},
	{"imager/README.md", "docker run", "no container engine here; pulls from ghcr.io"},
}

// walkthroughBlocks are imager/README.md's rescue walkthrough: TestWalkthrough
// runs them against the simulated world (they need servers and a rescue
// host), so TestDocs leaves them to it.
func isWalkthrough(b block) bool {
	return b.File == "imager/README.md" && b.Heading == walkthroughSection
}

// placeholders are replaced in every block before it runs: what a reader
// puts in place of a name the docs leave to them.
var placeholders = []struct{ From, To, Why string }{
	{"<your selector>", "example.com/pool=bare-metal", "uninstall.md: the NodePools' selector"},
	{"emnc <name>", "emnc general-purpose", "uninstall.md: the NodeClass install.md applied"},
	{"oci://registry.example.com/charts", "oci://$OCI_REGISTRY/charts", "install.md: the reader's chart registry, here an OCI registry in the test (docsRegistry)"},
}

// requiredValues are the chart values without a default, as install.md's
// values.yaml sets them.
const requiredValues = "clusterName: prod-1\nscaleway: {credentials: {existingSecret: scaleway-api}}\n"

// scenarios set the cluster up as a block expects it, where running the
// pages in order leaves it otherwise: the script runs before the block
// whose first command line starts with the key.
var scenarios = map[string]scenario{
	// uninstall.md's "if that happened": the CRD chart went first while a
	// NodeClaim still had its finalizer, so the CRDs wait, Terminating, with
	// it. (In page order, the CRD chart went after everything, and is gone.)
	"kubectl get nodeclaims -o custom-columns": {Before: `set -euo pipefail
kubectl wait --for=delete crd/nodeclaims.karpenter.sh crd/scalewayelasticmetalnodeclasses.karpenter-scaleway-em.io --timeout=60s || true
helm upgrade --install karpenter-scaleway-em-crd charts/karpenter-scaleway-em-crd -n karpenter
kubectl wait --for condition=established crd/nodeclaims.karpenter.sh --timeout=60s
kubectl apply -f - <<'EOF'
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: stuck, finalizers: [karpenter.sh/termination]}
spec:
  nodeClassRef: {group: karpenter-scaleway-em.io, kind: ScalewayElasticMetalNodeClass, name: general-purpose}
  requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]
EOF
kubectl delete nodeclaim stuck --wait=false
kubectl apply -f examples/general-purpose.yaml
kubectl patch emnc general-purpose --type=merge -p '{"metadata":{"finalizers":["karpenter-scaleway-em.io/termination"]}}'
kubectl delete emnc general-purpose --wait=false
helm uninstall karpenter-scaleway-em-crd -n karpenter
`,
		// "The CRDs then go."
		After: `kubectl wait --for=delete crd/nodeclaims.karpenter.sh crd/scalewayelasticmetalnodeclasses.karpenter-scaleway-em.io --timeout=60s`},
}

// scenario is what runs before a block, and what must hold after it.
type scenario struct{ Before, After string }

// TestDocs runs every shell block and applies every YAML example of
// docFiles against a real API server (etcd + kube-apiserver, the project's
// CRDs installed), in a working directory holding the repository's charts
// and examples. A command that fails, or YAML the API server or the
// chart's schema refuses, fails the test. The commands run with:
//   - kubectl: the system's, on that API server, with -w dropped (a watch
//     ends only when the reader stops it: it lists once);
//   - helm: the stand-in of helm_test.go (render with the chart's schema,
//     then apply server side; push and oci:// charts with Helm's registry
//     client, against an OCI registry in the test at $OCI_REGISTRY, which
//     replaces registry.example.com/charts); em-imager: bin/em-imager;
//   - make: chart-package only, the repository's target;
//   - tenant.kubeconfig, controlplane.yaml, worker.yaml and secrets.yaml in
//     place (the reader's own files; the API server plays both the tenant
//     and the management cluster), and the namespace tenant-a (the hosted
//     control plane's, which Kamaji creates);
//   - the Secret karpenter/cluster-join deleted before each block: the
//     three join forms are alternatives, each creating it.
//
// Commands that cannot run here are in notHere, with the reason; the
// walkthrough is TestWalkthrough's.
func TestDocs(t *testing.T) {
	t.Parallel() // beside TestWalkthrough: both mostly wait
	k := testenv.StartKube(t, testenv.KubeOptions{CRDs: apis.CRDs})
	cs, err := kubernetes.NewForConfig(k.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Run("Examples", func(t *testing.T) { dryRunExamples(ctx, t, k) })
	work := docsWorkdir(t, k)
	env := docsEnv(t, k, work)
	used := map[int]bool{}
	for _, file := range docFiles {
		for _, b := range blocks(t, file) {
			switch {
			case isWalkthrough(b):
			case isYAML(b):
				if err := checkYAML(ctx, t, k, b); err != nil {
					t.Errorf("%s: the YAML example is refused: %v\n%s", b.where(), err, b.Text)
				}
			case isShell(b):
				_ = cs.CoreV1().Secrets("karpenter").Delete(ctx, "cluster-join", metav1.DeleteOptions{})
				script := prepare(b, used)
				sc, ok := scenarioFor(b)
				if ok {
					if out, err := runBlock(ctx, work, env, sc.Before); err != nil {
						t.Fatalf("%s: the scenario before it: %v\n%s", b.where(), err, out)
					}
				}
				out, err := runBlock(ctx, work, env, script)
				if err != nil {
					t.Errorf("%s: the block fails: %v\n--- script\n%s--- output\n%s", b.where(), err, script, out)
					continue
				}
				t.Logf("%s: ran\n%s", b.where(), out)
				if ok && sc.After != "" {
					if out, err := runBlock(ctx, work, env, sc.After); err != nil {
						t.Errorf("%s: what the page says follows does not: %v\n%s", b.where(), err, out)
					}
				}
			}
		}
	}
	for i, e := range notHere {
		if !used[i] {
			t.Errorf("notHere: no shell line of %s starts with %q any more: remove the entry", e.File, e.Prefix)
		}
	}
	for i, p := range placeholders {
		if !used[-1-i] {
			t.Errorf("placeholders: no shell block holds %q any more: remove the entry", p.From)
		}
	}
}

// scenarioFor is the scenario of a block, if any.
func scenarioFor(b block) (scenario, bool) {
	for _, line := range strings.Split(b.Text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for prefix, sc := range scenarios {
			if strings.HasPrefix(line, prefix) {
				return sc, true
			}
		}
		return scenario{}, false
	}
	return scenario{}, false
}

// prepare turns a block into the script that runs: placeholders replaced,
// the lines notHere names (and their continuations) made no-ops, stopping
// at the first failing command. used records the notHere entries (by
// index) and placeholders (by -1-index) that matched.
func prepare(b block, used map[int]bool) string {
	text := b.Text
	for i, p := range placeholders {
		if strings.Contains(text, p.From) {
			used[-1-i] = true
		}
		text = strings.ReplaceAll(text, p.From, p.To)
	}
	var out []string
	skipping := false
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		trimmed := strings.TrimSpace(line)
		if !skipping {
			for i, e := range notHere {
				if e.File == b.File && strings.HasPrefix(trimmed, e.Prefix) {
					used[i] = true
					skipping = true
				}
			}
		}
		if skipping {
			out = append(out, ": "+shellQuote("not run here (test/docs notHere): "+trimmed))
			skipping = strings.HasSuffix(trimmed, `\`)
			continue
		}
		out = append(out, line)
	}
	return "set -euo pipefail\n" + strings.Join(out, "\n") + "\n"
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func runBlock(ctx context.Context, dir string, env []string, script string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// docsWorkdir is the reader's working directory: the repository's charts and
// examples, and their own files the docs expect.
func docsWorkdir(t *testing.T, k *testenv.Kube) string {
	t.Helper()
	work := t.TempDir()
	for _, d := range []string{"charts", "examples"} {
		if err := os.Symlink(filepath.Join(root(t), d), filepath.Join(work, d)); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string][]byte{
		"tenant.kubeconfig": k.Kubeconfig,
		"worker.yaml":       []byte("version: v1alpha1\nmachine:\n  type: worker\n"),
		"secrets.yaml":      []byte("cluster:\n  id: placeholder\n"),
		"controlplane.yaml": []byte("version: v1alpha1\nmachine:\n  type: controlplane\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(work, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return work
}

// docsEnv is PATH with the stand-ins, and the API server's kubeconfig.
func docsEnv(t *testing.T, k *testenv.Kube, work string) []string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bin")
	state := filepath.Join(filepath.Dir(bin), "helm")
	for _, d := range []string{bin, state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	standInOnPath(t, bin, "helm")
	imager, err := world.FindBinary(world.BinEMImager)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(imager, filepath.Join(bin, "em-imager")); err != nil {
		t.Fatal(err)
	}
	// make chart-package is the repository's own target (the reader's
	// checkout is this one), writing into the reader's bin/charts; the Go
	// caches are the test's, as HOME is not.
	wrapOnPath(t, bin, "make", "#!/bin/bash\n[ \"$*\" = chart-package ] || { echo \"make (test stand-in): only chart-package is mapped, not $*\" >&2; exit 1; }\n"+
		"exec %s -C %s CHART_OUT=\"$PWD/bin/charts\" chart-package\n", root(t))
	// A watch lists once: -w and --watch are dropped.
	wrapOnPath(t, bin, "kubectl", "#!/bin/bash\nargs=()\nfor a in \"$@\"; do case \"$a\" in -w|--watch) ;; *) args+=(\"$a\");; esac; done\nexec %s \"${args[@]}\"\n")
	return append([]string{
		"PATH=" + bin + ":" + os.Getenv("PATH"),
		"HOME=" + filepath.Dir(bin),
		"KUBECONFIG=" + k.KubeconfigPath,
		"HELM_STANDIN_STATE=" + state,
		"OCI_REGISTRY=" + docsRegistry(t),
	}, goEnv(t)...)
}

// docsRegistry starts an OCI registry (go-containerregistry's, in memory)
// for install.md's helm push and helm upgrade oci://, and returns its
// host:port. It speaks plain HTTP, which helm v3 falls back to when a
// registry does not answer HTTPS.
func docsRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(ociregistry.New(ociregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// goEnv is the Go environment the blocks' go commands (make chart-package's
// go run) need with HOME elsewhere: the test's caches and toolchain, and
// no network.
func goEnv(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	v := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(v) != 3 {
		t.Fatalf("go env: %q", out)
	}
	return []string{"GOCACHE=" + v[0], "GOMODCACHE=" + v[1], "GOPATH=" + v[2], "GOTOOLCHAIN=local", "GOPROXY=off", "GOFLAGS=-mod=readonly"}
}

// checkYAML applies a YAML example: Kubernetes objects with a server-side
// dry run; anything else is chart values, rendered with the controller
// chart and its schema (install.md's layouts).
func checkYAML(ctx context.Context, t *testing.T, k *testenv.Kube, b block) error {
	objs, err := helmrender.Objects([]byte(b.Text))
	if err == nil && len(objs) > 0 && objs[0].GetKind() != "" {
		for _, o := range objs {
			if err := k.Client.Create(ctx, o, client.DryRunAll); err != nil {
				return fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
			}
		}
		return nil
	}
	var vals map[string]any
	if err := yaml.UnmarshalStrict([]byte(b.Text), &vals); err != nil {
		return fmt.Errorf("neither objects nor chart values: %w", err)
	}
	c, err := loader.Load(filepath.Join(root(t), "charts/karpenter-scaleway-em"))
	if err != nil {
		return err
	}
	// A fragment goes on top of the values install.md requires (its
	// values.yaml): the cluster's name and the Scaleway credentials.
	_, err = helmrender.Render(c, []byte(requiredValues+b.Text), helmrender.Release{Name: "karpenter-scaleway-em", Namespace: "karpenter", KubeVersion: "v1.35.0"})
	return err
}

// dryRunExamples applies every examples/*.yaml, which the pages point to,
// with a server-side dry run in a cluster that has the karpenter
// namespace: the API server's validation (the CRDs' schemas and CEL rules)
// must accept each object.
func dryRunExamples(ctx context.Context, t *testing.T, k *testenv.Kube) {
	files, err := filepath.Glob(filepath.Join(root(t), "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	if err := k.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "karpenter"}}, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := helmrender.Objects(data)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, o := range objs {
			if err := k.Client.Create(ctx, o, client.DryRunAll); err != nil {
				t.Errorf("examples/%s: %s %s refused: %v", filepath.Base(f), o.GetKind(), o.GetName(), err)
			}
		}
	}
}
