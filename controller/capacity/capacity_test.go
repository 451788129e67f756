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

// recorder keys what it is told by offer|localDisks.
type recorder map[string]corev1.ResourceList

func (r recorder) ObserveCapacity(offer, localDisks string, c corev1.ResourceList) {
	r[offer+"|"+localDisks] = c
}

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
	// The node's local-disk policy goes with its capacity: ephemeral-storage
	// depends on the disk EPHEMERAL is on.
	ephemeral := node("d", "scaleway-em://fr-par-2/4", "EM-I226E-NVME", corev1.ConditionTrue, "250Gi")
	ephemeral.Labels["karpenter-scaleway-em.io/local-disks"] = "Ephemeral"
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		node("a", "scaleway-em://fr-par-2/1", "EM-A116X-SSD", corev1.ConditionTrue, "31Gi"),
		node("b", "scaleway-em://fr-par-2/2", "EM-B112X-SSD", corev1.ConditionFalse, "1Gi"),
		node("c", "aws:///eu-west-1a/i-1", "m5.large", corev1.ConditionTrue, "8Gi"),
		ephemeral,
	).Build()
	got := recorder{}
	if _, err := (&Controller{Kube: kube, Catalog: got}).Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	mem := got["EM-A116X-SSD|"][corev1.ResourceMemory]
	eph := got["EM-I226E-NVME|Ephemeral"][corev1.ResourceMemory]
	if len(got) != 2 || mem.String() != "31Gi" || eph.String() != "250Gi" {
		t.Fatalf("observed %v, want EM-A116X-SSD (no policy label) with 31Gi and EM-I226E-NVME under Ephemeral with 250Gi", got)
	}
}
