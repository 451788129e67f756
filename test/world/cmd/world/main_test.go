package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// TestWorldRunsADeploymentOnAProviderNode runs the world's entry point as
// `make world` does (test profile: the simulator's delays in milliseconds),
// applies a Deployment through the kubeconfig it prints and waits until its
// pods are Running and Ready on a node the provider made (KWOK playing them
// on a node the simulated Talos registered, the ReplicaSet made by
// kube-controller-manager); then stops the world and checks that no process
// it started is left.
func TestWorldRunsADeploymentOnAProviderNode(t *testing.T) {
	dir := t.TempDir()
	ctx, stop := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	code := make(chan int, 1)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		code <- run(ctx, []string{"-dir", dir, "-profile", "test"}, pw, pw)
		pw.Close()
	}()
	// However the test ends (a Fatal included), the world stops before the
	// test binary exits: etcd, started by envtest, would outlive it.
	t.Cleanup(func() {
		stop()
		select {
		case <-exited:
		case <-time.After(2 * time.Minute):
			t.Error("world still running 2 minutes after the test ended")
		}
	})
	kubeconfig := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			t.Log(line)
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "export KUBECONFIG="); ok {
				kubeconfig <- v
			}
		}
	}()
	var path string
	select {
	case path = <-kubeconfig:
	case c := <-code:
		t.Fatalf("world exited with %d before it printed a kubeconfig", c)
	case <-time.After(5 * time.Minute):
		t.Fatal("no kubeconfig printed after 5 minutes")
	}
	if filepath.Dir(path) != dir {
		t.Errorf("kubeconfig %s is not in -dir %s", path, dir)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const replicas = 2
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, world.Deployment("default", "app", replicas, "1", "1Gi", false), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	ready := waitReadyPods(ctx, t, cs, replicas, 4*time.Minute)
	t.Logf("%d pods Ready %s after the Deployment was applied", replicas, time.Since(t0).Round(100*time.Millisecond))
	for _, p := range ready {
		n, err := cs.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The simulated Talos owns the Node (docs/world.md): KWOK never writes it.
		for _, mf := range n.ManagedFields {
			if strings.Contains(strings.ToLower(mf.Manager), "kwok") {
				t.Errorf("node %s was written by %s (%s %s): KWOK must only play pods", n.Name, mf.Manager, mf.Operation, mf.Subresource)
			}
		}
		if !strings.HasPrefix(n.Spec.ProviderID, "scaleway-em://") {
			t.Errorf("pod %s runs on node %s with providerID %q, not a provider-made node", p.Name, n.Name, n.Spec.ProviderID)
		}
		if !slices.ContainsFunc(p.ManagedFields, func(mf metav1.ManagedFieldsEntry) bool { return strings.Contains(strings.ToLower(mf.Manager), "kwok") }) {
			t.Errorf("pod %s is Ready but KWOK never wrote it: managers %v", p.Name, p.ManagedFields)
		}
		if p.Status.PodIP == "" || p.Status.HostIP == "" {
			t.Errorf("pod %s is Ready without a pod IP (%q) or a host IP (%q)", p.Name, p.Status.PodIP, p.Status.HostIP)
		}
	}

	stop()
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("world exited with %d after SIGINT's equivalent, want 0", c)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("world still running 2 minutes after it was told to stop")
	}
	if left := children(t); len(left) > 0 {
		t.Errorf("processes left after the world stopped: %v", left)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("kubeconfig %s still there after the stop (err %v): it points at a stopped API server", path, err)
	}
	// The world checked the money invariants over its ledger at the stop.
	money, err := os.ReadFile(filepath.Join(dir, moneyFile))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`over (\d+) servers ordered and (\d+) NodeClaims: 0 broken`).FindSubmatch(money)
	if m == nil || string(m[1]) == "0" || string(m[2]) == "0" {
		t.Errorf("%s: %s; want 0 broken over the servers and NodeClaims of the Deployment", moneyFile, money)
	}
	if m := regexp.MustCompile(`\((\d+) listings of the NodeClaims and Nodes, the slowest `).FindSubmatch(money); m == nil || string(m[1]) == "0" {
		t.Errorf("%s: %s; want the number of listings the check rests on", moneyFile, money)
	}
}

// waitReadyPods waits until n pods in default are Running and Ready.
func waitReadyPods(ctx context.Context, t *testing.T, cs kubernetes.Interface, n int, timeout time.Duration) []corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var ready []corev1.Pod
		for _, p := range pods.Items {
			if testenv.PodReady(&p) {
				ready = append(ready, p)
			}
		}
		if len(ready) >= n {
			return ready
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pods Ready after %s: %d pods in all", len(ready), n, timeout, len(pods.Items))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// children lists the processes whose parent is this test process ("pid
// name"): every process the world starts is one.
func children(t *testing.T) []string {
	t.Helper()
	me := strconv.Itoa(os.Getpid())
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut at the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == me {
			out = append(out, e.Name()+" "+s[strings.IndexByte(s, '(')+1:i])
		}
	}
	return out
}
