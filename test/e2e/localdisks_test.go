package e2e

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/e2e/harness"
)

// A pod asks for more ephemeral-storage than the smallest disk of
// EM-I226E-NVME (2 x 960 GB, 2 x 7.68 TB) holds. With localDisks Ephemeral
// Karpenter predicts EPHEMERAL on a 7.68 TB disk, orders the offer, and the
// node registers exactly the capacity predicted, its EPHEMERAL placed on a
// 7.68 TB disk by the config's selector. About 15 s on two cores.
func TestEphemeralStorageOnTheLargeDisk(t *testing.T) {
	const offer = "EM-I226E-NVME"
	e := harness.Start(t, harness.Setup{
		Reqs: []corev1.NodeSelectorRequirement{{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{offer}}},
		NodeClass: func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
			nc.Spec.LocalDisks = string(localdisks.Ephemeral)
		},
	})
	request := resource.MustParse("2Ti") // 2.2 TB: more than 960 GB
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "scratch", Namespace: harness.Namespace, Labels: map[string]string{"app": "scratch"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceEphemeralStorage: request}}}}},
	}
	if _, err := e.W.Clientset.CoreV1().Pods(harness.Namespace).Create(e.Ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitBound("scratch", 1, harness.WaitLong)

	nodeName := e.Pods("scratch")[0].Spec.NodeName
	var node *corev1.Node
	for _, n := range e.Nodes() {
		if n.Name == nodeName {
			node = &n
		}
	}
	if node == nil {
		t.Fatalf("node %s not found", nodeName)
	}
	registered := node.Status.Capacity[corev1.ResourceEphemeralStorage]
	var predicted resource.Quantity
	for _, c := range e.NodeClaims() {
		if c.Status.ProviderID == node.Spec.ProviderID {
			predicted = c.Status.Capacity[corev1.ResourceEphemeralStorage]
		}
	}
	if predicted.IsZero() || registered.Cmp(predicted) != 0 || registered.Cmp(request) < 0 {
		t.Errorf("ephemeral-storage predicted %s, registered %s, requested %s", predicted.String(), registered.String(), request.String())
	}
	if node.Labels[localdisks.LabelPolicy] != string(localdisks.Ephemeral) || node.Labels[corev1.LabelInstanceTypeStable] != offer {
		t.Errorf("node labels %v", node.Labels)
	}
	if !strings.Contains(node.Annotations[v1alpha1.AnnotationDisks], `"disks":[{`) {
		t.Errorf("the node does not show its disks: %s=%q", v1alpha1.AnnotationDisks, node.Annotations[v1alpha1.AnnotationDisks])
	}

	// Where the simulated Talos put EPHEMERAL: on one of the largest disks.
	_, id, err := scaleway.ParseProviderID(node.Spec.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.W.Machines.Status(id)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := e.W.Machines.Hardware(id)
	if err != nil {
		t.Fatal(err)
	}
	var top, eph int64
	for _, d := range tree.Spec.Disks {
		top = max(top, d.SizeBytes)
		if d.Name == st.EphemeralDisk {
			eph = d.SizeBytes
		}
	}
	if eph != top || tree.DevicePath(st.EphemeralDisk) == st.BootDisk {
		t.Errorf("EPHEMERAL on %q (%d bytes, boot disk %s), want a largest disk (%d bytes)", st.EphemeralDisk, eph, st.BootDisk, top)
	}
	e.AssertNoDuplicateOrders()
	e.AssertNothingLeaked()
}
