package docs

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// installPage is the page a new user follows to a first node.
const installPage = "docs/install.md"

// The release install.md installs, the Deployment it makes, and the workload
// its last step scales up.
const (
	installNamespace = "karpenter"
	installRelease   = "karpenter-scaleway-em"
	installWorkload  = "inflate"
	installPool      = "general-purpose"
	// hostedMarker is in the one block of layout (c) (a hosted control
	// plane), which a reader with static workers does not run.
	hostedMarker = "--set tenant.rbacOnly=true"
)

// simPlaceholders are what a reader of install.md fills in (their Scaleway
// key, their bucket's key and address) and what this world holds instead.
// Each must still be on the page: a stale entry fails the test.
func simPlaceholders(w *world.World) []struct{ From, To string } {
	sim := w.Sim.Options()
	return []struct{ From, To string }{
		{"SCW_ACCESS_KEY=SCWXXXXXXXXXXXXXXXXX", "SCW_ACCESS_KEY=SCWSIMULATED00000000"},
		{"SCW_SECRET_KEY=xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", "SCW_SECRET_KEY=" + w.Sim.SecretKey()},
		{"SCW_DEFAULT_PROJECT_ID=xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", "SCW_DEFAULT_PROJECT_ID=" + sim.ProjectID},
		{"AWS_ACCESS_KEY_ID=GK... --from-literal=AWS_SECRET_ACCESS_KEY=...", "AWS_ACCESS_KEY_ID=" + w.S3.AccessKey + " --from-literal=AWS_SECRET_ACCESS_KEY=" + w.S3.SecretKey},
		{"http://garage.garage.svc:3900", w.S3.Endpoint},
		{"https://s3.example.com       #", w.S3.Endpoint + " #"},
	}
}

// worldPlumbing are the variables only a simulated world needs (where its
// Scaleway API, rescue SSH and Talos API listen) and the test profile's
// short timeouts: everything else the controller reads must come from the
// chart's Deployment and the Secrets install.md creates.
var worldPlumbing = []string{
	"SCW_API_URL", "RESCUE_SSH_PORT", "TALOS_API_PORT",
	"KARPENTER_SCALEWAY_EM_API_POLL_INTERVAL", "INSTALL_RETRY_INTERVAL", "CATALOG_REFRESH_INTERVAL",
	"GC_GRACE_PERIOD", "GC_INTERVAL", "NODECLASS_RECHECK_INTERVAL",
	"DELIVERY_TIMEOUT", "RESCUE_TIMEOUT", "IMAGING_TIMEOUT", "BOOT_TIMEOUT",
	"BATCH_MAX_DURATION", "BATCH_IDLE_DURATION", "LOG_LEVEL",
	// Garage's region is "garage" (the chart's default); the world's S3
	// server signs with its own.
	"S3_REGION",
}

// TestDocsInstallReachesAReadyNode follows docs/install.md as a new user
// would, in a simulated world (Scaleway, rescue hosts, Talos, an S3 bucket,
// kube-controller-manager and KWOK for the pods), until the page's last step
// has a Ready bare-metal node running its pods:
//   - every shell block of the page runs in order as TestDocs runs it (the
//     same stand-ins and notHere list), with the reader's placeholders
//     replaced by the world's key, bucket and endpoints (simPlaceholders);
//   - layout (c)'s block (hostedMarker) is left out: this reader's cluster
//     has static workers, layout (a), the chart's defaults;
//   - the join Secret is the page's form (c), the last one it creates: a
//     simulated kubelet joins only with the cluster's CA, endpoint and a
//     bootstrap token in kube-system, which is what form (c) gives; forms
//     (a) and (b) name a Talos control plane this world does not have;
//   - the image is the world's, published under the bucket, prefix,
//     schematic and version the page and examples/general-purpose.yaml use
//     (the page's em-imager publish downloads from the internet);
//   - no kubelet runs the controller's pod: the test runs bin/karpenter-
//     scaleway-em with the environment of the Deployment the chart made
//     (values and Secret references resolved as a kubelet would), the
//     world's plumbing (worldPlumbing) and a kubeconfig of the chart's
//     ServiceAccount token, so the chart's RBAC is all it has.
func TestDocsInstallReachesAReadyNode(t *testing.T) {
	t.Parallel() // beside TestDocs and TestWalkthrough: all mostly wait
	w := world.Start(t, world.Options{
		RunPods: true, SystemNamespace: "sim-system", ClusterName: "prod-1",
		Bucket: "talos-images", Prefix: "talos", SchematicID: walkthroughSchematic, TalosVersion: walkthroughTalos,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	work := docsWorkdir(t, w.Kube)
	env := docsEnv(t, w.Kube, work)
	subs := simPlaceholders(w)
	page := ""
	for _, b := range blocks(t, installPage) {
		if isShell(b) {
			page += b.Text
		}
	}
	for _, p := range subs {
		if !strings.Contains(page, p.From) {
			t.Fatalf("%s no longer holds %q: update simPlaceholders", installPage, p.From)
		}
	}
	hosted := 0
	for _, b := range blocks(t, installPage) {
		if !isShell(b) {
			continue
		}
		// Layout (c), a hosted control plane, is for another kind of
		// cluster than this reader's (static workers, layout (a)).
		if strings.Contains(b.Text, hostedMarker) {
			hosted++
			continue
		}
		for _, p := range subs {
			b.Text = strings.ReplaceAll(b.Text, p.From, p.To)
		}
		// The three join forms are alternatives: each block that makes the
		// Secret replaces the one before it.
		if strings.Contains(b.Text, "create secret generic cluster-join") {
			_ = w.Clientset.CoreV1().Secrets(installNamespace).Delete(ctx, "cluster-join", metav1.DeleteOptions{})
		}
		script := prepare(b, map[int]bool{})
		out, err := runBlock(ctx, work, env, script)
		if err != nil {
			t.Fatalf("%s: the block fails: %v\n--- script\n%s--- output\n%s", b.where(), err, script, out)
		}
		t.Logf("%s: ran\n%s", b.where(), out)
	}

	if hosted != 1 {
		t.Fatalf("%s: %d shell blocks hold %q, want layout (c)'s one: update hostedMarker", installPage, hosted, hostedMarker)
	}

	controller := startChartController(ctx, t, w)
	world.Eventually(ctx, t, "inflate's pods Running and Ready on a Ready bare-metal node", 6*time.Minute, func() (bool, string) {
		ok, state := workloadReady(context.WithoutCancel(ctx), w)
		return ok, state + "\n" + controller.LogTail(5)
	})
	if refused := controller.LogLines("forbidden"); refused != "" {
		t.Errorf("the chart's RBAC refused the controller something:\n%s", refused)
	}
	claims := &karpv1.NodeClaimList{}
	if err := w.Kube.Client.List(ctx, claims); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range claims.Items {
		if c.Labels[karpv1.NodePoolLabelKey] != installPool {
			continue
		}
		n++
		if !c.StatusConditions().IsTrue(karpv1.ConditionTypeInitialized) {
			t.Errorf("NodeClaim %s of %s is not Initialized: %v", c.Name, installPool, c.Status.Conditions)
		}
	}
	if n == 0 {
		t.Errorf("no NodeClaim of NodePool %s", installPool)
	}
	t.Logf("%d NodeClaims of %s, all Initialized; the chart's controller log:\n%s", n, installPool, controller.LogTail(15))
}

// workloadReady says whether every pod of install.md's workload runs on a
// Ready node of the example's pool, and what it sees otherwise.
func workloadReady(ctx context.Context, w *world.World) (bool, string) {
	pods, err := w.Clientset.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + installWorkload})
	if err != nil || len(pods.Items) == 0 {
		return false, fmt.Sprintf("pods: %d, %v", len(pods.Items), err)
	}
	var state []string
	ready := 0
	for _, p := range pods.Items {
		state = append(state, fmt.Sprintf("%s %s on %q", p.Name, p.Status.Phase, p.Spec.NodeName))
		if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning || !podReady(p) {
			continue
		}
		n, err := w.Clientset.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err == nil && n.Labels["example.com/pool"] == "bare-metal" && nodeReady(n) {
			ready++
		}
	}
	return ready == len(pods.Items), strings.Join(state, "; ")
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// startChartController runs the controller as the Deployment the page
// installed describes it, in place of its pod.
func startChartController(ctx context.Context, t *testing.T, w *world.World) *world.Controller {
	t.Helper()
	d, err := w.Clientset.AppsV1().Deployments(installNamespace).Get(ctx, installRelease, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Deployment install.md's helm install makes: %v", err)
	}
	env, err := podEnv(ctx, w.Clientset, d)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"CLUSTER_NAME", "SYSTEM_NAMESPACE", "SCW_ACCESS_KEY", "SCW_SECRET_KEY", "SCW_DEFAULT_PROJECT_ID", "S3_ENDPOINT", "S3_BUCKET", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") && len(kv) > len(name)+1 }) {
			t.Fatalf("the chart's Deployment sets no %s", name)
		}
	}
	for _, kv := range w.ControllerEnv() {
		if slices.Contains(worldPlumbing, strings.SplitN(kv, "=", 2)[0]) {
			env = append(env, kv)
		}
	}
	env = append(env, "KUBECONFIG="+serviceAccountKubeconfig(ctx, t, w, d.Spec.Template.Spec.ServiceAccountName))
	c := world.StartController(t, w, world.ControllerOptions{BaseEnv: env, LogName: "chart-controller.log"})
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("the controller with the chart's environment: %v\n%s", err, c.LogTail(40))
	}
	return c
}

// serviceAccountKubeconfig writes a kubeconfig holding a token of the
// chart's ServiceAccount, as the pod's mounted token would be.
func serviceAccountKubeconfig(ctx context.Context, t *testing.T, w *world.World, sa string) string {
	t.Helper()
	if sa == "" {
		t.Fatal("the chart's Deployment names no ServiceAccount")
	}
	data, err := w.ServiceAccountKubeconfig(ctx, installNamespace, sa)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "serviceaccount.kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// podEnv is the environment a kubelet would give the Deployment's first
// container: literal values, Secret and ConfigMap keys, the pod's
// namespace and name, and resource fields (a missing referenced key is an
// error, as it keeps a real pod from starting).
func podEnv(ctx context.Context, cs kubernetes.Interface, d *appsv1.Deployment) ([]string, error) {
	ctr := d.Spec.Template.Spec.Containers[0]
	var env []string
	for _, from := range ctr.EnvFrom {
		data, err := envSource(ctx, cs, d.Namespace, from)
		if err != nil {
			return nil, err
		}
		for k, v := range data {
			env = append(env, from.Prefix+k+"="+v)
		}
	}
	for _, e := range ctr.Env {
		v, err := envValue(ctx, cs, d.Namespace, d.Name, ctr, e)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		env = append(env, e.Name+"="+v)
	}
	return env, nil
}

func envSource(ctx context.Context, cs kubernetes.Interface, ns string, from corev1.EnvFromSource) (map[string]string, error) {
	out := map[string]string{}
	switch {
	case from.SecretRef != nil:
		s, err := cs.CoreV1().Secrets(ns).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("envFrom Secret %s: %w", from.SecretRef.Name, err)
		}
		for k, v := range s.Data {
			out[k] = string(v)
		}
	case from.ConfigMapRef != nil:
		c, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("envFrom ConfigMap %s: %w", from.ConfigMapRef.Name, err)
		}
		for k, v := range c.Data {
			out[k] = v
		}
	}
	return out, nil
}

func envValue(ctx context.Context, cs kubernetes.Interface, ns, pod string, ctr corev1.Container, e corev1.EnvVar) (string, error) {
	src := e.ValueFrom
	switch {
	case src == nil:
		return e.Value, nil
	case src.SecretKeyRef != nil:
		s, err := cs.CoreV1().Secrets(ns).Get(ctx, src.SecretKeyRef.Name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		v, ok := s.Data[src.SecretKeyRef.Key]
		if !ok {
			return "", fmt.Errorf("Secret %s has no key %s", src.SecretKeyRef.Name, src.SecretKeyRef.Key)
		}
		return string(v), nil
	case src.ConfigMapKeyRef != nil:
		c, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, src.ConfigMapKeyRef.Name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return c.Data[src.ConfigMapKeyRef.Key], nil
	case src.FieldRef != nil:
		return map[string]string{"metadata.namespace": ns, "metadata.name": pod + "-0"}[src.FieldRef.FieldPath], nil
	case src.ResourceFieldRef != nil:
		return resourceField(ctr, src.ResourceFieldRef)
	}
	return "", fmt.Errorf("a valueFrom this test does not resolve")
}

// resourceField is a container's limit or request in units of the
// divisor, rounded up, as the kubelet gives it.
func resourceField(ctr corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	kind, res, ok := strings.Cut(ref.Resource, ".")
	if !ok {
		return "", fmt.Errorf("resource %q", ref.Resource)
	}
	list := ctr.Resources.Requests
	if kind == "limits" {
		list = ctr.Resources.Limits
	}
	q, ok := list[corev1.ResourceName(res)]
	if !ok {
		return "", fmt.Errorf("the container has no %s", ref.Resource)
	}
	div := 1.0
	if !ref.Divisor.IsZero() {
		div = ref.Divisor.AsApproximateFloat64()
	}
	return fmt.Sprint(int64(math.Ceil(q.AsApproximateFloat64() / div))), nil
}
