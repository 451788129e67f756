package testenv

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// stopCase is one pod of TestKWOKStopsAPodWhenItsContainersHaveStopped: its
// preStop hook and grace period, and the bounds on how long after the delete
// it may disappear.
type stopCase struct {
	name     string
	preStop  *corev1.LifecycleHandler
	grace    int64
	min, max time.Duration
}

// A terminating pod stays Running and Ready while its preStop hook runs, at
// most for its grace period, as a kubelet keeps it (Karpenter's regression
// spec "should delete pod that has a pre-stop hook after termination grace
// period seconds" watches for exactly that); one without a hook goes at once.
func TestKWOKStopsAPodWhenItsContainersHaveStopped(t *testing.T) {
	ctx := context.Background()
	k, kw, node := startKWOKNode(ctx, t)
	// The deletionTimestamp has whole seconds, so a grace period of g seconds
	// may end up to a second early.
	cases := []stopCase{
		{name: "no-hook", grace: 60, max: 5 * time.Second},
		// The API server refuses a sleep hook as long as the grace period, so
		// the suite's long hook is an exec of sleep (karpenter pkg/test
		// PodOptions.PreStopSleep): it lasts the whole grace period here.
		{name: "exec-hook", preStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", "sleep 300"}}}, grace: 8, min: 6 * time.Second, max: 15 * time.Second},
		{name: "sleep-hook", preStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 3}}, grace: 60, min: time.Second, max: 10 * time.Second},
	}
	pods := make([]*corev1.Pod, len(cases))
	for i, c := range cases {
		pods[i] = stopCasePod(c, node.Name)
		if err := k.Client.Create(ctx, pods[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pods {
		if err := waitPodReady(ctx, k.Client, p); err != nil {
			t.Fatalf("pod %s never went Ready under KWOK: %v (log %s)", p.Name, err, kw.LogPath)
		}
	}

	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Go(func() { checkStop(ctx, t, k.Client, pods[i], c) })
	}
	wg.Wait()
}

// startKWOKNode starts a control plane and KWOK, and registers one Node
// whose pods KWOK plays.
func startKWOKNode(ctx context.Context, t *testing.T) (*Kube, *KWOK, *corev1.Node) {
	t.Helper()
	k := StartKube(t, KubeOptions{NoKarpenterCRDs: true})
	kw, err := NewKWOK(ctx, k, KWOKOptions{ManageNodesWithAnnotation: "testenv.io/kubelet=kwok"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kw.Stop() })
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kwok-node", Annotations: map[string]string{"testenv.io/kubelet": "kwok"}}}
	if err := k.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	return k, kw, node
}

// A bound pod goes Ready after a container start's time, not at once (else
// the suite sees pods Ready on a node Karpenter has not initialized yet); a
// pod labelled kwok.x-k8s.io/stage=unhealthy runs but never goes Ready, as
// one whose readiness probe fails (Karpenter's regression spec "should not
// drift any nodes if their PodDisruptionBudgets are unhealthy" asks for it
// so).
func TestKWOKStartsPodsAfterAContainerStartAndUnhealthyOnesUnready(t *testing.T) {
	ctx := context.Background()
	k, kw, node := startKWOKNode(ctx, t)
	healthy := stopCasePod(stopCase{name: "healthy", grace: 0}, node.Name)
	unhealthy := stopCasePod(stopCase{name: "unhealthy", grace: 0}, node.Name)
	unhealthy.Labels = map[string]string{"kwok.x-k8s.io/stage": "unhealthy"}
	created := time.Now()
	for _, p := range []*corev1.Pod{healthy, unhealthy} {
		if err := k.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitPodReady(ctx, k.Client, healthy); err != nil {
		t.Fatalf("pod without the label never went Ready: %v (log %s)", err, kw.LogPath)
	}
	if took := time.Since(created); took < 4*time.Second {
		t.Errorf("pod Ready %v after it was bound, want a container start's time (5s) first", took.Round(100*time.Millisecond))
	}
	got := &corev1.Pod{}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := k.Client.Get(ctx, client.ObjectKeyFromObject(unhealthy), got); err != nil {
			return false, err
		}
		return got.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("unhealthy pod never Running: %v, status %+v", err, got.Status)
	}
	// KWOK has played every stage it would by the time the other pod is
	// Ready and this one Running; a second look catches a late Ready.
	time.Sleep(2 * time.Second)
	if err := k.Client.Get(ctx, client.ObjectKeyFromObject(unhealthy), got); err != nil {
		t.Fatal(err)
	}
	if PodReady(got) || len(got.Status.ContainerStatuses) != 1 || got.Status.ContainerStatuses[0].Ready {
		t.Fatalf("unhealthy pod is Ready or its container is: %+v", got.Status)
	}
}

func stopCasePod(c stopCase, nodeName string) *corev1.Pod {
	ctr := corev1.Container{Name: "app", Image: "registry.example/app:1"}
	if c.preStop != nil {
		ctr.Lifecycle = &corev1.Lifecycle{PreStop: c.preStop}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: "default"},
		Spec:       corev1.PodSpec{NodeName: nodeName, TerminationGracePeriodSeconds: &c.grace, Containers: []corev1.Container{ctr}},
	}
}

func waitPodReady(ctx context.Context, c client.Client, p *corev1.Pod) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return false, err
		}
		return PodReady(got), nil
	})
}

// checkStop deletes the pod (with its own grace period, as a drain's
// eviction does) and checks that it stays Running and Ready until it goes,
// and that it goes within the case's bounds.
func checkStop(ctx context.Context, t *testing.T, c client.Client, p *corev1.Pod, sc stopCase) {
	start := time.Now()
	if err := c.Delete(ctx, p); err != nil {
		t.Errorf("%s: delete: %v", sc.name, err)
		return
	}
	for {
		got := &corev1.Pod{}
		err := c.Get(ctx, client.ObjectKeyFromObject(p), got)
		took := time.Since(start)
		switch {
		case apierrors.IsNotFound(err):
			if took < sc.min || took > sc.max {
				t.Errorf("%s: gone %v after the delete, want between %v and %v", sc.name, took.Round(100*time.Millisecond), sc.min, sc.max)
			}
			return
		case err != nil:
			t.Errorf("%s: %v", sc.name, err)
			return
		case !PodReady(got):
			t.Errorf("%s: terminating pod no longer Running and Ready %v after the delete: %+v", sc.name, took.Round(100*time.Millisecond), got.Status)
			return
		case took > sc.max:
			t.Errorf("%s: still there %v after the delete, want gone by %v", sc.name, took.Round(100*time.Millisecond), sc.max)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
