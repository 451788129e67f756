package world

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Workload keeps a number of pause pods of one app, as a ReplicaSet would:
// the world runs no kube-controller-manager, so pods evicted by Karpenter
// (drift, repair, consolidation) are recreated by this loop and left
// pending until a node fits them.
type Workload struct {
	w                           *World
	Namespace, App, CPU, Memory string
	Spread                      bool
	// NodeSelector of the pods (nil: none).
	NodeSelector map[string]string
	// Tolerations of the pods (nil: none), e.g. of a NodePool's taints.
	Tolerations []corev1.Toleration

	mu     sync.Mutex
	want   int
	seq    int
	cancel context.CancelFunc
	done   chan struct{}
}

// RunWorkload starts keeping n pods of app requesting cpu and memory each
// (one per node when spread) in namespace; Stop ends the loop.
func (w *World) RunWorkload(namespace, app string, n int, cpu, memory string, spread bool) *Workload {
	return w.run(&Workload{Namespace: namespace, App: app, CPU: cpu, Memory: memory, Spread: spread, want: n})
}

// RunWorkloadOn is RunWorkload for pods with a node selector, e.g. one
// NodePool's nodes ({karpenter.sh/nodepool: name}).
func (w *World) RunWorkloadOn(namespace, app string, n int, cpu, memory string, nodeSelector map[string]string) *Workload {
	return w.run(&Workload{Namespace: namespace, App: app, CPU: cpu, Memory: memory, NodeSelector: nodeSelector, want: n})
}

// RunWorkloadTolerating is RunWorkload for pods that tolerate every taint of
// taints (the NodePool's, which keep other pods off bare metal).
func (w *World) RunWorkloadTolerating(namespace, app string, n int, cpu, memory string, spread bool, taints []corev1.Taint) *Workload {
	tol := make([]corev1.Toleration, 0, len(taints))
	for _, t := range taints {
		tol = append(tol, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOpExists, Effect: t.Effect})
	}
	return w.run(&Workload{Namespace: namespace, App: app, CPU: cpu, Memory: memory, Spread: spread, Tolerations: tol, want: n})
}

func (w *World) run(wl *Workload) *Workload {
	ctx, cancel := context.WithCancel(context.Background())
	wl.w, wl.cancel, wl.done = w, cancel, make(chan struct{})
	go func() {
		defer close(wl.done)
		for ctx.Err() == nil {
			wl.reconcile(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return wl
}

// Stop ends the loop (the pods stay).
func (wl *Workload) Stop() {
	wl.cancel()
	<-wl.done
}

func (wl *Workload) reconcile(ctx context.Context) {
	pods := wl.w.Clientset.CoreV1().Pods(wl.Namespace)
	l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "app=" + wl.App})
	if err != nil {
		return
	}
	alive := 0
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			alive++
		}
	}
	wl.mu.Lock()
	want := wl.want
	wl.mu.Unlock()
	d := Deployment(wl.Namespace, wl.App, int32(want), wl.CPU, wl.Memory, wl.Spread)
	d.Spec.Template.Spec.NodeSelector = wl.NodeSelector
	d.Spec.Template.Spec.Tolerations = wl.Tolerations
	for ; alive < want; alive++ {
		wl.mu.Lock()
		wl.seq++
		name := fmt.Sprintf("%s-%d", wl.App, wl.seq)
		wl.mu.Unlock()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: wl.Namespace, Labels: d.Spec.Template.Labels},
			Spec: d.Spec.Template.Spec}
		_, _ = pods.Create(ctx, p, metav1.CreateOptions{})
	}
}

// Scale sets the number of pods. Scaling down deletes pods at once (grace
// 0: no kubelet runs their containers), newest first.
func (wl *Workload) Scale(ctx context.Context, n int) error {
	wl.mu.Lock()
	wl.want = n
	wl.mu.Unlock()
	pods := wl.w.Clientset.CoreV1().Pods(wl.Namespace)
	l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "app=" + wl.App})
	if err != nil {
		return err
	}
	zero := int64(0)
	alive := 0
	for i := len(l.Items) - 1; i >= 0; i-- {
		p := l.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		alive++
		if alive > n {
			if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
				return fmt.Errorf("delete pod %s: %w", p.Name, err)
			}
		}
	}
	return nil
}

// Bound returns how many of the workload's pods are bound to a node, and how many exist.
func (wl *Workload) Bound(ctx context.Context) (bound, total int, err error) {
	l, err := wl.w.Clientset.CoreV1().Pods(wl.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + wl.App})
	if err != nil {
		return 0, 0, err
	}
	for _, p := range l.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		total++
		if p.Spec.NodeName != "" {
			bound++
		}
	}
	return bound, total, nil
}

// Eventually polls cond every 100ms until it holds or timeout passes (or
// ctx ends); the failure names what was awaited and the last state cond
// reported.
func Eventually(ctx context.Context, t testing.TB, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("timed out after %s waiting for %s; last state: %s", timeout, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
