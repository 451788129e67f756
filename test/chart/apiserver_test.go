package chart

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/bootstraptoken"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/joinsecret"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

// TestAgainstAPIServer applies the charts and the examples to a real
// kube-apiserver 1.35 whose CRDs come from the CRD chart itself.
func TestAgainstAPIServer(t *testing.T) {
	k := testenv.StartKube(t, testenv.KubeOptions{
		NoKarpenterCRDs: true,
		CRDPaths:        []string{repoPath(t, crdChart+"/templates"), "testdata/servicemonitor-crd.yaml", "testdata/prometheusrule-crd.yaml"},
	})
	ctx := t.Context()
	for _, ns := range []string{releaseNS, "team-a", "team-b", "kube-system", "kube-node-lease"} {
		err := k.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	c := loadChart(t, controllerChart)

	t.Run("chart objects are valid (server-side dry-run)", func(t *testing.T) {
		values := map[string]string{
			"minimal": minimalValues,
			"everything": minimalValues + `
imageBucket: {endpoint: "http://garage:3900", bucket: talos, presignEndpoint: "https://s3.example.com", credentials: {accessKeyID: GK1, secretAccessKey: k}}
serviceMonitor: {enabled: true, endpointConfig: {interval: 30s}}
prometheusRule: {enabled: true, alertLabels: {team: platform}}
dashboards: {enabled: true, annotations: {grafana_folder: Karpenter}}
rbac: {joinSecretNamespaces: [team-a, team-b], additionalClusterRoleRules: [{apiGroups: [""], resources: [configmaps], verbs: [get]}]}
podAnnotations: {example.com/a: b}
additionalLabels: {team: platform}
controller: {env: [{name: X, value: "1"}], extraVolumeMounts: [{name: extra, mountPath: /etc/extra}]}
extraVolumes: [{name: extra, configMap: {name: extra}}]
`,
		}
		for name, v := range values {
			objs := mustRender(t, c, v)
			for _, o := range objs {
				if err := apply(ctx, k.Client, o, true); err != nil {
					t.Errorf("%s: %s %s/%s: %v", name, o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
			}
		}
	})

	t.Run("dry-run rejects an invalid object", func(t *testing.T) {
		// The check above can fail: a Deployment with an unknown field and a
		// bad port is refused by the same path.
		objs := mustRender(t, c, minimalValues)
		d := mustFind(t, objs, "Deployment", releaseName).DeepCopy()
		_ = unstructured.SetNestedField(d.Object, int64(2), "spec", "replicaz")
		if err := apply(ctx, k.Client, d, true); err == nil || !strings.Contains(err.Error(), "replicaz") {
			t.Errorf("unknown field accepted: %v", err)
		}
		svc := mustFind(t, objs, "Service", releaseName).DeepCopy()
		_ = unstructured.SetNestedSlice(svc.Object, []any{map[string]any{"name": "x", "port": int64(70000)}}, "spec", "ports")
		if err := apply(ctx, k.Client, svc, true); err == nil {
			t.Error("port 70000 accepted")
		}
	})

	t.Run("RBAC grants what the controller needs and no more", func(t *testing.T) {
		applyRBAC(t, ctx, k.Client, mustRender(t, c, minimalValues))
		sa := "system:serviceaccount:" + releaseNS + ":" + releaseName
		allowed := []access{
			{"", "secrets", "", "get", releaseNS, "cluster-join"},
			{"", "secrets", "", "get", releaseNS, "karpenter-scaleway-em-rescue-ssh"},
			{"", "secrets", "", "create", releaseNS, ""},
			{"coordination.k8s.io", "leases", "", "create", releaseNS, ""},
			{"coordination.k8s.io", "leases", "", "update", releaseNS, "karpenter-scaleway-em-leader-election"},
			{"coordination.k8s.io", "leases", "", "delete", "kube-node-lease", "node-1"},
			{"karpenter-scaleway-em.io", "scalewayelasticmetalnodeclasses", "", "watch", "", ""},
			{"karpenter-scaleway-em.io", "scalewayelasticmetalnodeclasses", "", "patch", "", "default"},
			{"karpenter-scaleway-em.io", "scalewayelasticmetalnodeclasses", "status", "patch", "", "default"},
			{"karpenter.sh", "nodeclaims", "", "create", "", ""},
			{"karpenter.sh", "nodeclaims", "status", "patch", "", "x"},
			{"karpenter.sh", "nodepools", "", "list", "", ""},
			{"", "nodes", "", "delete", "", "n"},
			{"", "pods", "eviction", "create", "default", "p"},
			{"", "events", "", "create", "default", ""},
			{"", "services", "", "get", "kube-system", "kube-dns"},
		}
		denied := []access{
			// Secrets outside the join namespaces (default: the release namespace).
			{"", "secrets", "", "get", "team-a", "cluster-join"},
			{"", "secrets", "", "get", "default", "x"},
			{"", "secrets", "", "get", "", ""},
			// No listing or watching of Secrets anywhere, kube-system included.
			{"", "secrets", "", "list", "", ""},
			{"", "secrets", "", "list", "kube-system", ""},
			{"", "secrets", "", "watch", "kube-system", ""},
			{"", "secrets", "", "list", releaseNS, ""},
			{"", "secrets", "", "watch", "team-a", ""},
			// Bootstrap tokens (rbac.perNodeClaimBootstrapTokens, on by default): by name only.
			{"", "secrets", "", "update", "kube-system", "bootstrap-token-abcdef"},
			{"", "secrets", "", "create", "default", ""},
			{"", "secrets", "", "update", releaseNS, "karpenter-scaleway-em-rescue-ssh"},
			{"", "secrets", "", "delete", releaseNS, "cluster-join"},
			{"coordination.k8s.io", "leases", "", "update", releaseNS, "another-lease"},
			{"karpenter-scaleway-em.io", "scalewayelasticmetalnodeclasses", "", "delete", "", "default"},
			{"karpenter-scaleway-em.io", "scalewayelasticmetalnodeclasses", "", "create", "", ""},
			{"karpenter.sh", "nodepools", "", "create", "", ""},
			{"", "configmaps", "", "get", "kube-system", "x"},
			{"", "services", "", "get", "kube-system", "kubernetes"},
			{"rbac.authorization.k8s.io", "clusterroles", "", "escalate", "", ""},
		}
		for _, a := range allowed {
			if ok, err := a.check(ctx, k.Client, sa); err != nil || !ok {
				t.Errorf("denied %v (%v)", a, err)
			}
		}
		for _, a := range denied {
			if ok, err := a.check(ctx, k.Client, sa); err != nil || ok {
				t.Errorf("allowed %v (%v)", a, err)
			}
		}
	})

	t.Run("joinSecretNamespaces moves Secret reads", func(t *testing.T) {
		applyRBAC(t, ctx, k.Client, mustRender(t, c, minimalValues+"fullnameOverride: narrow\nrbac: {joinSecretNamespaces: [team-a]}\n"))
		sa := "system:serviceaccount:" + releaseNS + ":narrow"
		for a, want := range map[access]bool{
			{"", "secrets", "", "get", "team-a", "cluster-join"}:                      true,
			{"", "secrets", "", "get", "team-b", "cluster-join"}:                      false,
			{"", "secrets", "", "get", releaseNS, "cluster-join"}:                     false, // the release namespace is not listed
			{"", "secrets", "", "get", releaseNS, "karpenter-scaleway-em-rescue-ssh"}: true,  // its own key, by name
			{"", "secrets", "", "list", "team-a", ""}:                                 false,
		} {
			if ok, err := a.check(ctx, k.Client, sa); err != nil || ok != want {
				t.Errorf("%v: allowed %v, want %v (%v)", a, ok, want, err)
			}
		}
	})

	t.Run("perNodeClaimBootstrapTokens grants create, and only create, on kube-system Secrets", func(t *testing.T) {
		// Every verb RBAC knows for Secrets, on no name, a token's name and
		// another Secret's name.
		verbs := []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
		names := []string{"", "bootstrap-token-abcdef", "cilium-ca"}
		// Off (a cluster whose NodeClasses all use Shared tokens): no kube-system Secrets at all.
		applyRBAC(t, ctx, k.Client, mustRender(t, c, minimalValues+"fullnameOverride: notokens\nrbac: {perNodeClaimBootstrapTokens: false}\n"))
		for _, verb := range verbs {
			for _, name := range names {
				a := access{"", "secrets", "", verb, "kube-system", name}
				if ok, err := a.check(ctx, k.Client, "system:serviceaccount:"+releaseNS+":notokens"); err != nil || ok {
					t.Errorf("%v allowed with perNodeClaimBootstrapTokens: false (%v)", a, err)
				}
			}
		}
		// On by default (PerNodeClaim is the NodeClass default): create, and
		// nothing else. A get or delete could not be limited to the
		// bootstrap-token- names and would reach every kube-system Secret.
		sa := "system:serviceaccount:" + releaseNS + ":tokens"
		applyRBAC(t, ctx, k.Client, mustRender(t, c, minimalValues+"fullnameOverride: tokens\n"))
		for _, verb := range verbs {
			for _, name := range names {
				a := access{"", "secrets", "", verb, "kube-system", name}
				want := verb == "create"
				if ok, err := a.check(ctx, k.Client, sa); err != nil || ok != want {
					t.Errorf("%v: allowed %v, want %v (%v)", a, ok, want, err)
				}
			}
		}
		for _, a := range []access{{"", "secrets", "", "create", "default", ""}, {"", "secrets", "", "list", "default", ""}} {
			if ok, err := a.check(ctx, k.Client, sa); err != nil || ok {
				t.Errorf("%v allowed (%v)", a, err)
			}
		}

		// The controller's token code works with exactly these rights: run it
		// as the ServiceAccount (a get or delete would be refused), twice for
		// one claim as a retried install does.
		tokens := &bootstraptoken.Manager{Kube: impersonate(t, k, sa), Namespace: "kube-system", TTL: time.Hour}
		first, err := tokens.Ensure(ctx, "chart-claim")
		if err != nil {
			t.Fatalf("Ensure as the chart's ServiceAccount: %v", err)
		}
		second, err := tokens.Ensure(ctx, "chart-claim")
		if err != nil || second == first {
			t.Fatalf("second Ensure as the chart's ServiceAccount = %q, %v (first %q)", second, err, first)
		}
		list := &corev1.SecretList{}
		if err := k.Client.List(ctx, list, client.InNamespace("kube-system"), client.MatchingLabels{bootstraptoken.LabelNodeClaim: "chart-claim"}); err != nil || len(list.Items) != 2 {
			t.Fatalf("token Secrets of the claim: %d, %v; want 2", len(list.Items), err)
		}
	})

	t.Run("join Secrets are read as the chart's ServiceAccount within the allowed namespaces", func(t *testing.T) {
		applyRBAC(t, ctx, k.Client, mustRender(t, c, minimalValues+"fullnameOverride: joiner\n"))
		sa := "system:serviceaccount:" + releaseNS + ":joiner"
		for _, ns := range []string{releaseNS, "team-a"} {
			sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster-join"}, Data: map[string][]byte{"token": []byte("x")}}
			if err := k.Client.Create(ctx, sec); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
		as := impersonate(t, k, sa)
		reader := joinsecret.Reader{Reader: as, Scope: joinsecret.Scope{Namespaces: []string{releaseNS}}}
		if err := reader.Get(ctx, client.ObjectKey{Namespace: releaseNS, Name: "cluster-join"}, &corev1.Secret{}); err != nil {
			t.Errorf("join Secret in the release namespace: %v", err)
		}
		var notAllowed *joinsecret.NotAllowedError
		if err := reader.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "cluster-join"}, &corev1.Secret{}); !errors.As(err, &notAllowed) {
			t.Errorf("join Secret in team-a through the reader = %v, want NotAllowed", err)
		}
		// And RBAC refuses it as well, should the controller's check be bypassed.
		if err := as.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "cluster-join"}, &corev1.Secret{}); !apierrors.IsForbidden(err) {
			t.Errorf("Secret in team-a read directly as the ServiceAccount = %v, want Forbidden", err)
		}
	})

	t.Run("examples apply", func(t *testing.T) {
		files, err := filepath.Glob(repoPath(t, "examples/*.yaml"))
		if err != nil || len(files) < 5 {
			t.Fatalf("examples: %v %v", files, err)
		}
		for _, f := range files {
			t.Run(filepath.Base(f), func(t *testing.T) {
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				objs, err := decodeObjects(data)
				if err != nil {
					t.Fatal(err)
				}
				classes := map[string]bool{}
				var pools []*unstructured.Unstructured
				for _, o := range objs {
					switch o.GetKind() {
					case "ScalewayElasticMetalNodeClass":
						classes[o.GetName()] = true
					case "NodePool":
						pools = append(pools, o)
					default:
						t.Errorf("unexpected %s in an example", o.GetKind())
					}
					if err := apply(ctx, k.Client, o, false); err != nil {
						t.Errorf("%s %s: %v", o.GetKind(), o.GetName(), err)
					}
				}
				if len(classes) == 0 || len(pools) == 0 {
					t.Fatalf("an example holds a NodeClass and a NodePool; got %s", describe(objs))
				}
				for _, p := range pools {
					ref, _, _ := unstructured.NestedStringMap(p.Object, "spec", "template", "spec", "nodeClassRef")
					if ref["group"] != "karpenter-scaleway-em.io" || ref["kind"] != "ScalewayElasticMetalNodeClass" || !classes[ref["name"]] {
						t.Errorf("NodePool %s refers to %v, not a NodeClass of this file", p.GetName(), ref)
					}
					// Read back: the apiserver kept the requirements (nothing pruned).
					got := &unstructured.Unstructured{}
					got.SetGroupVersionKind(p.GroupVersionKind())
					if err := k.Client.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
						t.Fatal(err)
					}
					want, _, _ := unstructured.NestedSlice(p.Object, "spec", "template", "spec", "requirements")
					have, _, _ := unstructured.NestedSlice(got.Object, "spec", "template", "spec", "requirements")
					if len(want) != len(have) {
						t.Errorf("NodePool %s: %d requirements stored, %d applied", p.GetName(), len(have), len(want))
					}
				}
			})
		}
	})

	t.Run("the apiserver rejects a broken NodeClass", func(t *testing.T) {
		// The examples check can fail: typos and bad values are refused.
		bad := map[string]string{
			"unknown field": `{"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"bad1"},
				"spec":{"imag":{},"image":{"manifestURL":"https://x/m.json"},"talos":{"joinSecretRef":{"name":"a","namespace":"b"}}}}`,
			"no image source": `{"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"bad2"},
				"spec":{"image":{"bucket":"talos"},"talos":{"joinSecretRef":{"name":"a","namespace":"b"}}}}`,
			"unknown zone": `{"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"bad3"},
				"spec":{"zones":["fr-par-9"],"image":{"manifestURL":"https://x/m.json"},"talos":{"joinSecretRef":{"name":"a","namespace":"b"}}}}`,
			"plain http manifest without a pin": `{"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"bad4"},
				"spec":{"image":{"manifestURL":"http://garage-web/m.json"},"talos":{"joinSecretRef":{"name":"a","namespace":"b"}}}}`,
			"malformed pin": `{"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"bad5"},
				"spec":{"image":{"manifestURL":"http://garage-web/m.json","manifestSHA256":"ABC"},"talos":{"joinSecretRef":{"name":"a","namespace":"b"}}}}`,
			"unknown config delivery": `{"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"bad6"},
				"spec":{"image":{"manifestURL":"https://x/m.json"},"talos":{"joinSecretRef":{"name":"a","namespace":"b"},"configDelivery":"HTTP"}}}`,
			"rescue disk with ..": `{"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"bad7"},
				"spec":{"image":{"manifestURL":"https://x/m.json"},"talos":{"joinSecretRef":{"name":"a","namespace":"b"}},"rescue":{"disk":"/dev/disk/../../etc/shadow"}}}`,
			"rescue disk with a space": `{"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"bad8"},
				"spec":{"image":{"manifestURL":"https://x/m.json"},"talos":{"joinSecretRef":{"name":"a","namespace":"b"}},"rescue":{"disk":"/dev/sda; reboot"}}}`,
			"negative hourly spend limit": `{"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"bad9"},
				"spec":{"image":{"manifestURL":"https://x/m.json"},"talos":{"joinSecretRef":{"name":"a","namespace":"b"}},"limits":{"hourlySpend":"-1"}}}`,
			"monthly commitment as a quantity": `{"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"bad10"},
				"spec":{"image":{"manifestURL":"https://x/m.json"},"talos":{"joinSecretRef":{"name":"a","namespace":"b"}},"limits":{"monthlyCommitment":"1k"}}}`,
			"spend limit as a number": `{"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"bad11"},
				"spec":{"image":{"manifestURL":"https://x/m.json"},"talos":{"joinSecretRef":{"name":"a","namespace":"b"}},"limits":{"hourlySpend":2.5}}}`,
			"warm pool over 10 servers in all": `{"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"bad12"},
				"spec":{"image":{"manifestURL":"https://x/m.json"},"talos":{"joinSecretRef":{"name":"a","namespace":"b"}},"warmPool":[{"offer":"EM-A116X-SSD","servers":6},{"offer":"EM-B112X-SSD","servers":5}]}}`,
			"warm pool with an unknown billing period": `{"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"bad13"},
				"spec":{"image":{"manifestURL":"https://x/m.json"},"talos":{"joinSecretRef":{"name":"a","namespace":"b"}},"warmPool":[{"offer":"EM-A116X-SSD","servers":1,"billingPeriod":"weekly"}]}}`,
		}
		for name, j := range bad {
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON([]byte(j)); err != nil {
				t.Fatal(err)
			}
			if err := apply(ctx, k.Client, u, false); err == nil {
				t.Errorf("%s: accepted", name)
			} else if name == "plain http manifest without a pin" && !strings.Contains(err.Error(), "manifestSHA256") {
				t.Errorf("%s: refused without naming the pin: %v", name, err)
			}
		}
		// The rule can pass: plain http with a pin is fine (the pin is the trust root).
		pinned := &unstructured.Unstructured{}
		if err := pinned.UnmarshalJSON([]byte(`{"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"pinned"},
			"spec":{"image":{"manifestURL":"http://garage-web/m.json","manifestSHA256":"` + strings.Repeat("0a", 32) + `"},"talos":{"joinSecretRef":{"name":"a","namespace":"b"}}}}`)); err != nil {
			t.Fatal(err)
		}
		if err := apply(ctx, k.Client, pinned, true); err != nil {
			t.Errorf("pinned plain http manifest refused: %v", err)
		}
		// Spend limits are decimal strings of euros.
		limits := &unstructured.Unstructured{}
		if err := limits.UnmarshalJSON([]byte(`{"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"limits"},
			"spec":{"image":{"manifestURL":"https://x/m.json"},"talos":{"joinSecretRef":{"name":"a","namespace":"b"}},"limits":{"hourlySpend":"2.5","monthlyCommitment":"0"}}}`)); err != nil {
			t.Fatal(err)
		}
		if err := apply(ctx, k.Client, limits, true); err != nil {
			t.Errorf("spend limits 2.5 and 0 refused: %v", err)
		}
		// A warm pool of 10 servers in all is the cap, not over it.
		pool := &unstructured.Unstructured{}
		if err := pool.UnmarshalJSON([]byte(`{"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"pool"},
			"spec":{"image":{"manifestURL":"https://x/m.json"},"talos":{"joinSecretRef":{"name":"a","namespace":"b"}},"warmPool":[{"offer":"EM-A116X-SSD","servers":6},{"offer":"EM-B112X-SSD","servers":4}]}}`)); err != nil {
			t.Fatal(err)
		}
		if err := apply(ctx, k.Client, pool, true); err != nil {
			t.Errorf("a warm pool of 10 servers refused: %v", err)
		}
		// Stable disk names (by-id with '.' and ':') are accepted.
		for i, disk := range []string{"/dev/disk/by-id/nvme-eui.0025388b71b2a1c4", "/dev/disk/by-id/wwn-0x5000c500a1b2c3d4:0",
			"/dev/disk/by-path/pci-0000:3b:00.0-nvme-1", "/dev/nvme0n1", "auto"} {
			ok := &unstructured.Unstructured{}
			if err := ok.UnmarshalJSON([]byte(fmt.Sprintf(`{"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"disk-%d"},
				"spec":{"image":{"manifestURL":"https://x/m.json"},"talos":{"joinSecretRef":{"name":"a","namespace":"b"}},"rescue":{"disk":%q}}}`, i, disk))); err != nil {
				t.Fatal(err)
			}
			if err := apply(ctx, k.Client, ok, true); err != nil {
				t.Errorf("rescue.disk %s refused: %v", disk, err)
			}
		}
	})

	t.Run("NodeClass defaults: Disk config delivery, PerNodeClaim tokens", func(t *testing.T) {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON([]byte(`{"apiVersion":"karpenter-scaleway-em.io/v1alpha1","kind":"ScalewayElasticMetalNodeClass","metadata":{"name":"defaults"},
			"spec":{"image":{"manifestURL":"https://x/m.json"},"talos":{"joinSecretRef":{"name":"a","namespace":"b"}}}}`)); err != nil {
			t.Fatal(err)
		}
		if err := k.Client.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
		delivery, _, _ := unstructured.NestedString(u.Object, "spec", "talos", "configDelivery")
		token, _, _ := unstructured.NestedString(u.Object, "spec", "talos", "bootstrapToken")
		if delivery != "Disk" || token != "PerNodeClaim" {
			t.Errorf("defaults configDelivery %q bootstrapToken %q, want Disk and PerNodeClaim", delivery, token)
		}
	})
}

// applyRBAC applies the rendered RBAC objects and ServiceAccount.
func applyRBAC(t *testing.T, ctx context.Context, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if strings.HasPrefix(o.GetAPIVersion(), "rbac.authorization.k8s.io/") || o.GetKind() == "ServiceAccount" {
			if err := apply(ctx, c, o, false); err != nil {
				t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
}

// impersonate is a client acting as user (the admin impersonates it).
func impersonate(t *testing.T, k *testenv.Kube, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(k.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + strings.Split(user, ":")[2], "system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: k.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// apply is `kubectl apply --server-side [--dry-run=server]`.
func apply(ctx context.Context, c client.Client, o *unstructured.Unstructured, dryRun bool) error {
	opts := []client.ApplyOption{client.FieldOwner("chart-test"), client.ForceOwnership}
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), opts...)
}

// access is one request a SubjectAccessReview checks.
type access struct {
	group, resource, subresource, verb, namespace, name string
}

func (a access) String() string {
	return fmt.Sprintf("%s %s.%s/%s %s/%s", a.verb, a.resource, a.group, a.subresource, a.namespace, a.name)
}

func (a access) check(ctx context.Context, c client.Client, user string) (bool, error) {
	ns := strings.Split(user, ":")[2]
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Group: a.group, Resource: a.resource, Subresource: a.subresource, Verb: a.verb, Namespace: a.namespace, Name: a.name,
		},
	}}
	if err := c.Create(ctx, sar); err != nil {
		return false, err
	}
	return sar.Status.Allowed, nil
}
