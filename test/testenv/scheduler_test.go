package testenv

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestSchedulerBindsPodToReadyNode(t *testing.T) {
	ctx := context.Background()
	k := StartKube(t, KubeOptions{NoKarpenterCRDs: true})
	// --v=2 logs each binding, which the failure output then shows.
	StartSchedulerWithOptions(t, k, SchedulerOptions{Args: []string{"--v=2"}})

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "em-node-1", Labels: map[string]string{corev1.LabelHostname: "em-node-1"}}}
	if err := k.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110"),
	}
	node.Status = corev1.NodeStatus{
		Capacity: res, Allocatable: res,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now()}},
	}
	if err := k.Client.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	// A registered node carries no not-ready taint here (see KubeOptions):
	// kubelet-like registration is enough for pods to land on it.
	if err := k.Client.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
		t.Fatal(err)
	}
	if len(node.Spec.Taints) != 0 {
		t.Fatalf("new node has taints %v", node.Spec.Taints)
	}

	fits := pod("fits", "1")
	tooBig := pod("too-big", "64") // more CPU than the node has
	for _, p := range []*corev1.Pod{fits, tooBig} {
		if err := k.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := k.Client.Get(ctx, client.ObjectKeyFromObject(fits), fits); err != nil {
			return false, err
		}
		return fits.Spec.NodeName != "", nil
	})
	if err != nil {
		t.Fatalf("pod not bound: %v", err)
	}
	if fits.Spec.NodeName != "em-node-1" {
		t.Fatalf("pod bound to %q, want em-node-1", fits.Spec.NodeName)
	}

	// The scheduler really evaluates fit: the oversized pod is reported
	// Unschedulable rather than bound.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := k.Client.Get(ctx, client.ObjectKeyFromObject(tooBig), tooBig); err != nil {
			return false, err
		}
		for _, c := range tooBig.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("oversized pod not marked Unschedulable: %v (status %+v)", err, tooBig.Status)
	}
	if tooBig.Spec.NodeName != "" {
		t.Fatalf("oversized pod bound to %s", tooBig.Spec.NodeName)
	}
}

func TestNewSchedulerNeedsStartedKube(t *testing.T) {
	if _, err := NewScheduler(context.Background(), &Kube{}, SchedulerOptions{}); err == nil {
		t.Fatal("NewScheduler without a started Kube succeeded")
	}
}

func pod(name, cpu string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Image: "registry.invalid/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}},
		}}},
	}
}
