package chart

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
		objs := mustRender(t, c, minimalValues)
		for _, o := range objs {
			if strings.HasPrefix(o.GetAPIVersion(), "rbac.authorization.k8s.io/") || o.GetKind() == "ServiceAccount" {
				if err := apply(ctx, k.Client, o, false); err != nil {
					t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
				}
			}
		}
		sa := "system:serviceaccount:" + releaseNS + ":" + releaseName
		allowed := []access{
			{"", "secrets", "", "get", "team-a", "cluster-join"},
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
			{"", "secrets", "", "list", "", ""},
			{"", "secrets", "", "watch", "team-a", ""},
			{"", "secrets", "", "update", releaseNS, "karpenter-scaleway-em-rescue-ssh"},
			{"", "secrets", "", "delete", "team-a", "cluster-join"},
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

	t.Run("joinSecretNamespaces narrows Secret reads", func(t *testing.T) {
		objs := mustRender(t, c, minimalValues+"fullnameOverride: narrow\nrbac: {joinSecretNamespaces: [team-a]}\n")
		for _, o := range objs {
			if strings.HasPrefix(o.GetAPIVersion(), "rbac.authorization.k8s.io/") || o.GetKind() == "ServiceAccount" {
				if err := apply(ctx, k.Client, o, false); err != nil {
					t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
				}
			}
		}
		sa := "system:serviceaccount:" + releaseNS + ":narrow"
		if ok, err := (access{"", "secrets", "", "get", "team-a", "cluster-join"}).check(ctx, k.Client, sa); err != nil || !ok {
			t.Errorf("cannot get a join Secret in team-a (%v)", err)
		}
		if ok, err := (access{"", "secrets", "", "get", "team-b", "cluster-join"}).check(ctx, k.Client, sa); err != nil || ok {
			t.Errorf("can get a Secret in team-b (%v)", err)
		}
	})

	t.Run("perNodeClaimBootstrapTokens grants token Secrets in kube-system only", func(t *testing.T) {
		sa := "system:serviceaccount:" + releaseNS + ":tokens"
		create := access{"", "secrets", "", "create", "kube-system", ""}
		if ok, err := create.check(ctx, k.Client, sa); err != nil || ok {
			t.Fatalf("token Secrets allowed before the value is set (%v)", err)
		}
		objs := mustRender(t, c, minimalValues+"fullnameOverride: tokens\nrbac: {perNodeClaimBootstrapTokens: true}\n")
		for _, o := range objs {
			if strings.HasPrefix(o.GetAPIVersion(), "rbac.authorization.k8s.io/") || o.GetKind() == "ServiceAccount" {
				if err := apply(ctx, k.Client, o, false); err != nil {
					t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
				}
			}
		}
		for _, verb := range []string{"create", "list", "delete"} {
			if ok, err := (access{"", "secrets", "", verb, "kube-system", ""}).check(ctx, k.Client, sa); err != nil || !ok {
				t.Errorf("cannot %s Secrets in kube-system (%v)", verb, err)
			}
		}
		if ok, err := (access{"", "secrets", "", "list", "default", ""}).check(ctx, k.Client, sa); err != nil || ok {
			t.Errorf("can list Secrets outside kube-system (%v)", err)
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
		}
		for name, j := range bad {
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON([]byte(j)); err != nil {
				t.Fatal(err)
			}
			if err := apply(ctx, k.Client, u, false); err == nil {
				t.Errorf("%s: accepted", name)
			}
		}
	})
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
