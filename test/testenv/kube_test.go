package testenv

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	karpv1alpha1 "sigs.k8s.io/karpenter/pkg/apis/v1alpha1"
)

// A CRD in the shape of the provider's NodeClass, given as raw YAML with an
// empty document and a comment around it.
const widgetCRD = `
# leading comment
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.testenv.io
spec:
  group: example.testenv.io
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Cluster
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
---
`

func TestKubeWithKarpenterCRDs(t *testing.T) {
	ctx := context.Background()
	k := StartKube(t, KubeOptions{CRDYAML: [][]byte{[]byte(widgetCRD)}})

	// The kubeconfig file works for a separate client (what the scheduler
	// and the demo use).
	if st, err := os.Stat(k.KubeconfigPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig %s: %v %v", k.KubeconfigPath, st, err)
	}
	cs, err := kubernetes.NewForConfig(k.Config)
	if err != nil {
		t.Fatal(err)
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.Major != "1" || v.Minor != "35" || !strings.HasPrefix(v.GitVersion, "v1.35.") {
		t.Fatalf("server version %+v, want v1.35.x (version stamp from tools.mk)", v)
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "karpenter"}}
	if err := k.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}

	np := &karpv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "bare-metal"},
		Spec: karpv1.NodePoolSpec{Template: karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: "karpenter-scaleway-em.io", Kind: "EMNodeClass", Name: "default"},
			Requirements: []karpv1.NodeSelectorRequirementWithMinValues{{
				Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"},
			}},
		}}},
	}
	if err := k.Client.Create(ctx, np); err != nil {
		t.Fatalf("create NodePool: %v", err)
	}
	got := &karpv1.NodePool{}
	if err := k.Client.Get(ctx, client.ObjectKey{Name: "bare-metal"}, got); err != nil {
		t.Fatal(err)
	}
	// Defaults come from the real CRD schema, so this proves it is installed.
	if got.Spec.Disruption.ConsolidationPolicy != karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized || len(got.Spec.Disruption.Budgets) == 0 {
		t.Fatalf("NodePool defaults not applied: policy %q, budgets %v", got.Spec.Disruption.ConsolidationPolicy, got.Spec.Disruption.Budgets)
	}
	// CEL validation of the real CRD: a NodeClassRef without a kind is refused.
	bad := np.DeepCopy()
	bad.Name, bad.ResourceVersion = "bad", ""
	bad.Spec.Template.Spec.NodeClassRef.Kind = ""
	if err := k.Client.Create(ctx, bad); !apierrors.IsInvalid(err) {
		t.Fatalf("NodePool without nodeClassRef.kind: err = %v, want Invalid", err)
	}

	overlays := &karpv1alpha1.NodeOverlayList{}
	if err := k.Client.List(ctx, overlays); err != nil {
		t.Fatalf("NodeOverlay CRD not served: %v", err)
	}
	claims := &karpv1.NodeClaimList{}
	if err := k.Client.List(ctx, claims); err != nil {
		t.Fatalf("NodeClaim CRD not served: %v", err)
	}

	// The extra CRD from raw YAML is installed and validates.
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(schema.GroupVersionKind{Group: "example.testenv.io", Version: "v1", Kind: "Widget"})
	w.SetName("w")
	w.Object["spec"] = map[string]any{"size": int64(0)}
	if err := k.Client.Create(ctx, w); !apierrors.IsInvalid(err) {
		t.Fatalf("widget with size 0: err = %v, want Invalid", err)
	}
	w.Object["spec"] = map[string]any{"size": int64(3)}
	if err := k.Client.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := k.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Discovery().ServerVersion(); err == nil {
		t.Fatal("API server still answers after Stop")
	}
}

func TestKubeRejectsMissingCRDPath(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-dir")
	k, err := NewKube(context.Background(), KubeOptions{CRDPaths: []string{missing}})
	if err == nil {
		_ = k.Stop()
		t.Fatal("NewKube with a missing CRD path succeeded")
	}
	if !strings.Contains(err.Error(), "KubeOptions.CRDPaths[0]") {
		t.Fatalf("error does not name the field: %v", err)
	}
}

func TestParseCRDs(t *testing.T) {
	crds, err := ParseCRDs([]byte(widgetCRD))
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) != 1 || crds[0].Name != "widgets.example.testenv.io" || crds[0].Spec.Names.Kind != "Widget" {
		t.Fatalf("parsed %+v", crds)
	}
	if _, err := ParseCRDs([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")); err == nil || !strings.Contains(err.Error(), "ConfigMap") {
		t.Fatalf("ConfigMap accepted as a CRD: %v", err)
	}
	if _, err := ParseCRDs([]byte("kind: [unclosed\n")); err == nil {
		t.Fatal("broken YAML accepted")
	}
	names := map[string]bool{}
	for _, c := range KarpenterCRDs() {
		names[c.Name] = true
	}
	for _, want := range []string{"nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "nodeoverlays.karpenter.sh"} {
		if !names[want] {
			t.Errorf("KarpenterCRDs lacks %s (has %v)", want, names)
		}
	}
}
