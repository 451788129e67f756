package chart

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	helmchart "helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/chart/helmrender"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

// The three layouts of docs/install.md ("Where the controller runs"), each
// rendered with the values the page gives and applied to real API servers.

// layoutCluster is a kube-apiserver with the CRD chart's CRDs, the
// namespaces the chart writes to and, when schedule is set, a real
// kube-scheduler.
func layoutCluster(t *testing.T, schedule bool, namespaces ...string) *testenv.Kube {
	t.Helper()
	k := testenv.StartKube(t, testenv.KubeOptions{
		NoKarpenterCRDs: true,
		CRDPaths:        []string{repoPath(t, crdChart+"/templates"), "testdata/servicemonitor-crd.yaml"},
	})
	for _, ns := range append([]string{"kube-system", "kube-node-lease"}, namespaces...) {
		err := k.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if schedule {
		testenv.StartSchedulerWithOptions(t, k, testenv.SchedulerOptions{Args: []string{"--v=2"}})
	}
	return k
}

// addNode registers a Ready node as a kubelet would; a control-plane node
// carries Talos's (and kubeadm's) role label and NoSchedule taint.
func addNode(t *testing.T, k *testenv.Kube, name string, controlPlane bool) {
	t.Helper()
	ctx := t.Context()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelTopologyZone: "fr-par-2"}}}
	if controlPlane {
		node.Labels["node-role.kubernetes.io/control-plane"] = ""
		node.Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
	}
	if err := k.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")}
	node.Status = corev1.NodeStatus{Capacity: res, Allocatable: res,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now()}}}
	if err := k.Client.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
}

// applyAll applies every rendered object for real (server-side apply).
func applyAll(t *testing.T, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if err := apply(t.Context(), c, o, false); err != nil {
			t.Fatalf("%s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
}

// replicaPods creates the Deployment's replicas as the ReplicaSet
// controller would (no kube-controller-manager runs here): pods from its
// template, which the real scheduler then places or leaves Pending.
func replicaPods(t *testing.T, k *testenv.Kube, objs []*unstructured.Unstructured, prefix string) []*corev1.Pod {
	t.Helper()
	d := mustFind(t, objs, "Deployment", releaseName)
	replicas, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas")
	tmpl, _, _ := unstructured.NestedMap(d.Object, "spec", "template")
	var pods []*corev1.Pod
	for i := range replicas {
		p := &corev1.Pod{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, p); err != nil {
			t.Fatal(err)
		}
		p.Name, p.Namespace = fmt.Sprintf("%s-%d", prefix, i), d.GetNamespace()
		if err := k.Client.Create(t.Context(), p); err != nil {
			t.Fatalf("replica pod: %v", err)
		}
		pods = append(pods, p)
	}
	return pods
}

// scheduling waits until every pod is bound or reported Unschedulable, and
// returns the node of each ("" for Unschedulable).
func scheduling(t *testing.T, k *testenv.Kube, pods []*corev1.Pod) []string {
	t.Helper()
	nodes := make([]string, len(pods))
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for i, p := range pods {
			if err := k.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return false, err
			}
			nodes[i] = p.Spec.NodeName
			if p.Spec.NodeName != "" {
				continue
			}
			unschedulable := false
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
					unschedulable = true
				}
			}
			if !unschedulable {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the scheduler decided nothing for %d pods: %v", len(pods), err)
	}
	return nodes
}

// TestLayoutStaticWorkers is layout (a), the defaults: the replicas run on
// two different workers, never on the control plane.
func TestLayoutStaticWorkers(t *testing.T) {
	k := layoutCluster(t, true, releaseNS)
	addNode(t, k, "cp-1", true)
	addNode(t, k, "worker-1", false)
	addNode(t, k, "worker-2", false)
	objs := mustRender(t, loadChart(t, controllerChart), minimalValues)
	applyAll(t, k.Client, objs)
	nodes := scheduling(t, k, replicaPods(t, k, objs, "static"))
	if nodes[0] == "" || nodes[1] == "" || nodes[0] == nodes[1] || strings.HasPrefix(nodes[0], "cp-") || strings.HasPrefix(nodes[1], "cp-") {
		t.Errorf("replicas on %q, want two different workers", nodes)
	}
}

// controlPlaneValues are layout (b)'s values in docs/install.md.
const controlPlaneValues = `
controlPlane: {tolerate: true, pin: true}
replicaAntiAffinity: Preferred
`

// TestLayoutControlPlaneOnly is layout (b): a Talos cluster whose only
// nodes are control-plane nodes (tainted NoSchedule). With the defaults no
// replica can be placed; with the layout's values both run, also on a
// one-node control plane.
func TestLayoutControlPlaneOnly(t *testing.T) {
	k := layoutCluster(t, true, releaseNS)
	addNode(t, k, "cp-1", true)
	c := loadChart(t, controllerChart)

	defaults := mustRender(t, c, minimalValues)
	applyAll(t, k.Client, defaults)
	if nodes := scheduling(t, k, replicaPods(t, k, defaults, "defaults")); nodes[0] != "" || nodes[1] != "" {
		t.Fatalf("with the defaults, replicas were placed on %q: the check below proves nothing", nodes)
	}
	for _, p := range []string{"defaults-0", "defaults-1"} {
		if err := k.Client.Delete(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNS, Name: p}}); err != nil {
			t.Fatal(err)
		}
	}

	objs := mustRender(t, c, minimalValues+controlPlaneValues)
	applyAll(t, k.Client, objs)
	if nodes := scheduling(t, k, replicaPods(t, k, objs, "cp")); nodes[0] != "cp-1" || nodes[1] != "cp-1" {
		t.Errorf("replicas on %q, want both on the one control-plane node", nodes)
	}
	// Preferred still spreads the replicas where there are nodes enough: the
	// term selects the replicas themselves.
	d := mustFind(t, objs, "Deployment", releaseName)
	pref, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution")
	if len(pref) != 1 {
		t.Fatalf("preferred anti-affinity %v", pref)
	}
	if sel, _, _ := unstructured.NestedStringMap(pref[0].(map[string]any), "podAffinityTerm", "labelSelector", "matchLabels"); sel["app.kubernetes.io/instance"] != releaseName {
		t.Errorf("preferred anti-affinity term without the pods' selector: %v", pref[0])
	}
	// pin keeps them off workers, should the cluster get some.
	sel, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "spec", "nodeSelector")
	if v, ok := sel["node-role.kubernetes.io/control-plane"]; !ok || v != "" || sel["kubernetes.io/os"] != "linux" {
		t.Errorf("nodeSelector %v, want the control-plane role beside kubernetes.io/os", sel)
	}
}

// tenantNS is the tenant's namespace of the controller in layout (c); the
// management cluster's release namespace (mgmtNS) differs on purpose.
const (
	tenantNS = "karpenter"
	mgmtNS   = "tenant-a"
)

// hostedValues are layout (c)'s values in docs/install.md: the same file
// for both installs; the tenant one adds tenant.rbacOnly.
const hostedValues = `
tenant:
  kubeconfigSecret: {name: tenant-a-karpenter-kubeconfig, key: kubeconfig}
  namespace: ` + tenantNS + `
  tokenSecret: karpenter-scaleway-em-token
serviceMonitor: {enabled: true}
`

// TestLayoutHostedControlPlane is layout (c): the controller runs in the
// management cluster and reaches the tenant through a kubeconfig Secret. Two
// API servers; each gets what the docs say to install there. The controller's
// requests, as the kubeconfig made from the tenant's token Secret sends
// them, are allowed by the RBAC applied to the tenant.
func TestLayoutHostedControlPlane(t *testing.T) {
	mgmt := layoutCluster(t, false, mgmtNS)
	tenant := layoutCluster(t, false, tenantNS)
	ctx := t.Context()
	c := loadChart(t, controllerChart)

	// The tenant install: the same values and tenant.rbacOnly.
	tenantObjs, err := helmRenderNS(c, minimalValues+strings.Replace(hostedValues, "tenant:\n", "tenant:\n  rbacOnly: true\n", 1), tenantNS)
	if err != nil {
		t.Fatal(err)
	}
	mgmtObjs, err := helmRenderNS(c, minimalValues+hostedValues, mgmtNS)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("each cluster gets its share", func(t *testing.T) {
		for _, o := range tenantObjs {
			switch o.GetKind() {
			case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			case "Secret":
				if o.GetName() != "karpenter-scaleway-em-token" {
					t.Errorf("tenant side renders Secret %s: credentials belong to the management cluster", o.GetName())
				}
			default:
				t.Errorf("tenant side renders %s %s", o.GetKind(), o.GetName())
			}
			if ns := o.GetNamespace(); ns != "" && ns != tenantNS && ns != "kube-system" && ns != "kube-node-lease" {
				t.Errorf("tenant side: %s %s in namespace %s", o.GetKind(), o.GetName(), ns)
			}
		}
		for _, kind := range []string{"ClusterRole", "Role", "RoleBinding", "ClusterRoleBinding"} {
			if n := count(mgmtObjs, kind); n != 0 {
				t.Errorf("management side renders %d %s: the controller has no business in that cluster", n, kind)
			}
		}
		for _, kind := range []string{"Deployment", "Service", "ServiceMonitor", "ServiceAccount", "PodDisruptionBudget"} {
			if count(mgmtObjs, kind) != 1 {
				t.Errorf("management side renders %d %s, want 1", count(mgmtObjs, kind), kind)
			}
		}
		if n := count(tenantObjs, "Role"); n < 4 {
			t.Errorf("tenant side renders %d Roles: %s", n, describe(tenantObjs))
		}
		applyAll(t, tenant.Client, tenantObjs)
		applyAll(t, mgmt.Client, mgmtObjs)
	})

	// The tenant's token controller is part of kube-controller-manager,
	// which does not run here: a TokenRequest for the same ServiceAccount
	// stands in for the token Secret's content.
	tenantSA := mustFind(t, tenantObjs, "ServiceAccount", releaseName)
	cs := kubernetes.NewForConfigOrDie(tenant.Config)
	tr, err := cs.CoreV1().ServiceAccounts(tenantNS).CreateToken(ctx, tenantSA.GetName(),
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of the tenant's ServiceAccount: %v", err)
	}
	kubeconfig, err := clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"tenant-a": {Server: tenant.Config.Host, CertificateAuthorityData: tenant.Config.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"karpenter": {Token: tr.Status.Token}},
		Contexts:       map[string]*clientcmdapi.Context{"tenant-a": {Cluster: "tenant-a", AuthInfo: "karpenter"}},
		CurrentContext: "tenant-a",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgmt.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: "tenant-a-karpenter-kubeconfig"},
		Data: map[string][]byte{"kubeconfig": kubeconfig}}); err != nil {
		t.Fatal(err)
	}

	// The file the pod sees: the Deployment (as stored by the management
	// API server) mounts the Secret's key read-only, and KUBECONFIG names it.
	podKubeconfig := func(t *testing.T) string {
		t.Helper()
		d := &unstructured.Unstructured{}
		d.SetGroupVersionKind(mustFind(t, mgmtObjs, "Deployment", releaseName).GroupVersionKind())
		if err := mgmt.Client.Get(ctx, client.ObjectKey{Namespace: mgmtNS, Name: releaseName}, d); err != nil {
			t.Fatal(err)
		}
		spec, _, _ := unstructured.NestedMap(d.Object, "spec", "template", "spec")
		if spec["automountServiceAccountToken"] != false {
			t.Errorf("automountServiceAccountToken %v: the pod would carry a token of the management cluster", spec["automountServiceAccountToken"])
		}
		var secretName, item, volume string
		vols, _, _ := unstructured.NestedSlice(spec, "volumes")
		for _, v := range vols {
			vm := v.(map[string]any)
			if name, _, _ := unstructured.NestedString(vm, "secret", "secretName"); name == "tenant-a-karpenter-kubeconfig" {
				volume, secretName = vm["name"].(string), name
				items, _, _ := unstructured.NestedSlice(vm, "secret", "items")
				if len(items) != 1 || items[0].(map[string]any)["key"] != "kubeconfig" {
					t.Fatalf("kubeconfig volume items %v", items)
				}
				item = items[0].(map[string]any)["path"].(string)
			}
		}
		if secretName == "" {
			t.Fatalf("no volume of the kubeconfig Secret: %v", vols)
		}
		cs, _, _ := unstructured.NestedSlice(spec, "containers")
		ctr := cs[0].(map[string]any)
		var mountPath string
		mounts, _, _ := unstructured.NestedSlice(ctr, "volumeMounts")
		for _, m := range mounts {
			mm := m.(map[string]any)
			if mm["name"] == volume {
				if mm["readOnly"] != true {
					t.Errorf("kubeconfig mounted writable: %v", mm)
				}
				mountPath = mm["mountPath"].(string)
			}
		}
		env := map[string]string{}
		for _, name := range []string{"KUBECONFIG", "SYSTEM_NAMESPACE", "LEADER_ELECTION_NAMESPACE", "LEADER_ELECTION_NAME", "JOIN_SECRET_NAMESPACES"} {
			v, _, _ := envVar(ctr, name)
			env[name] = v
		}
		if env["KUBECONFIG"] == "" || env["KUBECONFIG"] != filepath.Join(mountPath, item) {
			t.Fatalf("KUBECONFIG %q, mount %q item %q", env["KUBECONFIG"], mountPath, item)
		}
		for _, name := range []string{"SYSTEM_NAMESPACE", "LEADER_ELECTION_NAMESPACE", "JOIN_SECRET_NAMESPACES"} {
			if env[name] != tenantNS {
				t.Errorf("%s %q, want the tenant's namespace %q", name, env[name], tenantNS)
			}
		}
		// Lay the Secret out as the kubelet would, at the mount path.
		sec := &corev1.Secret{}
		if err := mgmt.Client.Get(ctx, client.ObjectKey{Namespace: mgmtNS, Name: secretName}, sec); err != nil {
			t.Fatal(err)
		}
		root := t.TempDir()
		path := filepath.Join(root, env["KUBECONFIG"])
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, sec.Data["kubeconfig"], 0o440); err != nil {
			t.Fatal(err)
		}
		return path
	}

	t.Run("the pod reaches the tenant as the tenant's ServiceAccount", func(t *testing.T) {
		path := podKubeconfig(t)
		// controller-runtime's GetConfig (Karpenter core's) takes KUBECONFIG
		// before any in-cluster config.
		t.Setenv("KUBECONFIG", path)
		cfg, err := ctrlconfig.GetConfig()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != tenant.Config.Host {
			t.Fatalf("config points at %s, want the tenant %s", cfg.Host, tenant.Config.Host)
		}
		as, err := client.New(cfg, client.Options{Scheme: tenant.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		// Leader election: the Lease in the tenant's namespace.
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "karpenter-scaleway-em-leader-election"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: new("replica-1")}}
		if err := as.Create(ctx, lease); err != nil {
			t.Fatalf("leader election Lease in the tenant: %v", err)
		}
		lease.Spec.HolderIdentity = new("replica-2")
		if err := as.Update(ctx, lease); err != nil {
			t.Fatalf("renewing the Lease in the tenant: %v", err)
		}
		// The rescue SSH key Secret, created then read by name.
		key := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "karpenter-scaleway-em-rescue-ssh"}}
		if err := as.Create(ctx, key); err != nil {
			t.Fatalf("rescue key Secret in the tenant: %v", err)
		}
		if err := as.Get(ctx, client.ObjectKeyFromObject(key), key); err != nil {
			t.Fatal(err)
		}
		// What Karpenter core reads at start.
		if err := as.List(ctx, &corev1.NodeList{}); err != nil {
			t.Errorf("list nodes in the tenant: %v", err)
		}
		// Nothing in the management cluster is this identity's.
		if err := as.Get(ctx, client.ObjectKey{Namespace: mgmtNS, Name: "tenant-a-karpenter-kubeconfig"}, &corev1.Secret{}); !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
			t.Errorf("the kubeconfig reaches the management cluster's Secret: %v", err)
		}
	})

	t.Run("tenant RBAC grants what the controller needs", func(t *testing.T) {
		sa := "system:serviceaccount:" + tenantNS + ":" + tenantSA.GetName()
		for a, want := range map[access]bool{
			{"coordination.k8s.io", "leases", "", "update", tenantNS, "karpenter-scaleway-em-leader-election"}: true,
			{"", "secrets", "", "get", tenantNS, "karpenter-scaleway-em-rescue-ssh"}:                           true,
			{"", "secrets", "", "get", tenantNS, "cluster-join"}:                                               true,
			{"", "configmaps", "", "update", tenantNS, "karpenter-scaleway-em-identity"}:                       true,
			{"", "secrets", "", "create", "kube-system", ""}:                                                   true,
			{"", "services", "", "get", "kube-system", "kube-dns"}:                                             true,
			{"coordination.k8s.io", "leases", "", "delete", "kube-node-lease", "node-1"}:                       true,
			{"karpenter-scaleway-em.io", "scalewayelasticmetalnodeclasses", "status", "patch", "", "default"}:  true,
			{"karpenter.sh", "nodeclaims", "", "create", "", ""}:                                               true,
			{"", "nodes", "", "delete", "", "n"}:                                                               true,
			{"", "pods", "eviction", "create", "default", "p"}:                                                 true,
			{"", "secrets", "", "list", tenantNS, ""}:                                                          false,
			{"", "secrets", "", "get", mgmtNS, "cluster-join"}:                                                 false,
		} {
			if ok, err := a.check(ctx, tenant.Client, sa); err != nil || ok != want {
				t.Errorf("%v: allowed %v, want %v (%v)", a, ok, want, err)
			}
		}
	})
}

// helmRenderNS renders the controller chart as release releaseName in
// namespace ns.
func helmRenderNS(c *helmchart.Chart, values, ns string) ([]*unstructured.Unstructured, error) {
	return helmrender.Render(c, []byte(values), helmrender.Release{Name: releaseName, Namespace: ns, KubeVersion: kubeVersion})
}

// TestLayoutNotes renders NOTES.txt (which helm prints after an install and
// helmrender leaves out) in each layout: each says where things are.
func TestLayoutNotes(t *testing.T) {
	c := loadChart(t, controllerChart)
	for name, tc := range map[string]struct{ values, ns, want string }{
		"static workers":      {minimalValues, releaseNS, "is installed in karpenter for cluster \"prod-1\""},
		"control plane only":  {minimalValues + controlPlaneValues, releaseNS, "Logs: kubectl -n karpenter logs deploy/karpenter-scaleway-em"},
		"hosted, management":  {minimalValues + hostedValues, mgmtNS, "It manages the tenant cluster of Secret tenant-a-karpenter-kubeconfig"},
		"hosted, tenant side": {minimalValues + strings.Replace(hostedValues, "tenant:\n", "tenant:\n  rbacOnly: true\n", 1), tenantNS, "(token Secret karpenter-scaleway-em-token)"},
	} {
		vals, err := chartutil.ReadValues([]byte(tc.values))
		if err != nil {
			t.Fatal(err)
		}
		top, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{Name: releaseName, Namespace: tc.ns, IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
		if err != nil {
			t.Fatal(err)
		}
		files, err := engine.Render(c, top)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if notes := files[controllerChartName+"/templates/NOTES.txt"]; !strings.Contains(notes, tc.want) {
			t.Errorf("%s: NOTES.txt lacks %q:\n%s", name, tc.want, notes)
		}
	}
}

const controllerChartName = "karpenter-scaleway-em"
