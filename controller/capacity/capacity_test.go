package capacity

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

type recorder map[string]corev1.ResourceList

func (r recorder) ObserveCapacity(offer string, c corev1.ResourceList) { r[offer] = c }

func node(name, pid, offer string, readyStatus corev1.ConditionStatus, mem string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelInstanceTypeStable: offer}},
		Spec:       corev1.NodeSpec{ProviderID: pid},
		Status: corev1.NodeStatus{
			Capacity:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(mem)},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: readyStatus}},
		},
	}
}

func TestOnlyReadyNodesOfThisProviderAreObserved(t *testing.T) {
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		node("a", "scaleway-em://fr-par-2/1", "EM-A116X-SSD", corev1.ConditionTrue, "31Gi"),
		node("b", "scaleway-em://fr-par-2/2", "EM-B112X-SSD", corev1.ConditionFalse, "1Gi"),
		node("c", "aws:///eu-west-1a/i-1", "m5.large", corev1.ConditionTrue, "8Gi"),
	).Build()
	got := recorder{}
	if _, err := (&Controller{Kube: kube, Catalog: got}).Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	mem := got["EM-A116X-SSD"][corev1.ResourceMemory]
	if len(got) != 1 || mem.String() != "31Gi" {
		t.Fatalf("observed %v, want only EM-A116X-SSD with 31Gi", got)
	}
}
