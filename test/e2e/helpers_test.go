package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

const (
	namespace = "default"
	// waitLong bounds one convergence in the "test" delay profile: orders,
	// reboots and imaging take milliseconds, Karpenter's batching and
	// disruption loops take seconds.
	waitLong = 4 * time.Minute
)

// env is one test's world with a running controller.
type env struct {
	t     testing.TB
	ctx   context.Context
	w     *world.World
	c     *world.Controller
	track *world.Tracker
}

type setup struct {
	world      world.Options
	controller world.ControllerOptions
	zones      []string
	reqs       []corev1.NodeSelectorRequirement
	// noNodePool: the test applies its own.
	noNodePool bool
}

// start builds a world, starts the controller and applies a NodeClass
// "default" and a NodePool "default" on it.
func start(t testing.TB, s setup) *env {
	t.Helper()
	// Binaries first, so a missing one fails with its make target at once.
	if _, err := world.FindBinary(world.BinController); err != nil {
		t.Fatalf("%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	w := world.Start(t, s.world)
	e := &env{t: t, ctx: ctx, w: w}
	e.c = world.StartController(t, w, s.controller)
	hctx, hcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer hcancel()
	if err := e.c.WaitHealthy(hctx); err != nil {
		t.Fatalf("%v", err)
	}
	e.track = w.Track(100*time.Millisecond, nil)
	t.Cleanup(func() {
		e.track.Stop()
		if t.Failed() {
			t.Logf("servers seen:\n%s", e.describeServers())
		}
	})
	nc := w.NodeClass("default", s.zones...)
	if err := w.Apply(ctx, nc); err != nil {
		t.Fatal(err)
	}
	e.waitNodeClassReady("default")
	if !s.noNodePool {
		if err := w.Apply(ctx, w.NodePool("default", "default", s.reqs...)); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// eventually polls cond until it holds or timeout passes (world.Eventually).
func (e *env) eventually(what string, timeout time.Duration, cond func() (bool, string)) {
	e.t.Helper()
	world.Eventually(e.ctx, e.t, what, timeout, cond)
}

func (e *env) waitNodeClassReady(name string) {
	e.t.Helper()
	e.eventually("NodeClass "+name+" Ready", waitLong, func() (bool, string) {
		nc := e.w.NodeClass(name)
		if err := e.w.Kube.Client.Get(e.ctx, types.NamespacedName{Name: name}, nc); err != nil {
			return false, err.Error()
		}
		for _, c := range nc.Status.Conditions {
			if c.Type == "Ready" {
				return c.Status == metav1.ConditionTrue, fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)
			}
		}
		return false, "no Ready condition"
	})
}

func (e *env) pods(app string) []corev1.Pod {
	l, err := e.w.Clientset.CoreV1().Pods(namespace).List(e.ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		e.t.Fatalf("list pods: %v", err)
	}
	return l.Items
}

// waitBound waits until n pods of app are bound to nodes.
func (e *env) waitBound(app string, n int, timeout time.Duration) {
	e.t.Helper()
	e.eventually(fmt.Sprintf("%d pods of %s bound", n, app), timeout, func() (bool, string) {
		bound := 0
		pods := e.pods(app)
		for _, p := range pods {
			if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
				bound++
			}
		}
		return bound >= n, fmt.Sprintf("%d/%d bound (%d pods); %s", bound, n, len(pods), e.summary())
	})
}

func (e *env) nodes() []corev1.Node {
	l, err := e.w.Clientset.CoreV1().Nodes().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatalf("list nodes: %v", err)
	}
	return l.Items
}

func (e *env) nodeClaims() []karpv1.NodeClaim {
	var l karpv1.NodeClaimList
	if err := e.w.Kube.Client.List(e.ctx, &l); err != nil {
		e.t.Fatalf("list nodeclaims: %v", err)
	}
	return l.Items
}

// summary is a one-line state of the world for failure messages.
func (e *env) summary() string {
	var ncs []string
	for _, nc := range e.nodeClaims() {
		var conds []string
		for _, c := range nc.Status.Conditions {
			if c.Status != metav1.ConditionTrue {
				conds = append(conds, fmt.Sprintf("%s=%s(%s: %.80s)", c.Type, c.Status, c.Reason, c.Message))
			}
		}
		ncs = append(ncs, fmt.Sprintf("%s[%s]", nc.Name, strings.Join(conds, ",")))
	}
	var srv []string
	for _, s := range e.w.Sim.Servers() {
		srv = append(srv, fmt.Sprintf("%s/%s/%s/%s", s.OfferName, s.Zone, s.Status, world.TagValue(s.Tags, world.TagPhase)))
	}
	return fmt.Sprintf("nodeclaims %v; servers %v; nodes %d", ncs, srv, len(e.nodes()))
}

func (e *env) describeServers() string {
	var b strings.Builder
	for _, tl := range e.track.Timelines() {
		var st, ph []string
		for _, s := range tl.Statuses {
			st = append(st, s.Value)
		}
		for _, p := range tl.Phases {
			ph = append(ph, p.Value)
		}
		fmt.Fprintf(&b, "  %s %s %s nodeclaim=%s statuses=%v phases=%v node=%s gone=%v\n", tl.ID, tl.Offer, tl.Zone,
			tl.NodeClaim, st, ph, tl.Node, !tl.Gone.IsZero())
	}
	return b.String()
}

// run keeps n pods of app (see world.Workload) until the test ends.
func (e *env) run(app string, n int, cpu, memory string, spread bool) *workload {
	wl := e.w.RunWorkload(namespace, app, n, cpu, memory, spread)
	e.t.Cleanup(wl.Stop)
	return &workload{Workload: wl, e: e}
}

type workload struct {
	*world.Workload
	e *env
}

func (wl *workload) scale(n int) {
	wl.e.t.Helper()
	if err := wl.Scale(wl.e.ctx, n); err != nil {
		wl.e.t.Fatal(err)
	}
}

// assertNoDuplicateOrders fails if any NodeClaim got more than one server.
func (e *env) assertNoDuplicateOrders() {
	e.t.Helper()
	for nc, n := range e.w.Sim.CreatesByTag(world.TagNodeClaim) {
		if n > 1 {
			e.t.Errorf("NodeClaim %s: %d servers ordered (CreateServer calls with its tag), want 1", nc, n)
		}
	}
}

// assertCallsPerServer fails if a server was the subject of more API calls
// than max (polling must be batched and bounded, not per-second per node).
func (e *env) assertCallsPerServer(max int) {
	e.t.Helper()
	var worst []string
	for _, tl := range e.track.Timelines() {
		n := len(e.w.Sim.CallsForServer(tl.ID))
		worst = append(worst, fmt.Sprintf("%s:%d", tl.ID[:8], n))
		if n > max {
			e.t.Errorf("server %s (%s): %d API calls about it, want at most %d", tl.ID, tl.Offer, n, max)
		}
	}
	sort.Strings(worst)
	e.t.Logf("API calls per server: %v; all calls: %d", worst, len(e.w.Sim.Calls()))
}

// assertNothingLeaked: every server still in the API backs a live NodeClaim.
func (e *env) assertNothingLeaked() {
	e.t.Helper()
	live := map[string]bool{}
	for _, nc := range e.nodeClaims() {
		live[nc.Name] = true
	}
	for _, s := range e.w.Sim.Servers() {
		if nc := world.TagValue(s.Tags, world.TagNodeClaim); !live[nc] {
			e.t.Errorf("server %s (%s, %s) leaked: its NodeClaim %q is gone", s.ID, s.OfferName, s.Status, nc)
		}
	}
}

// waitServersGone waits until no server is left in the API and every
// machine released its disks.
func (e *env) waitServersGone(timeout time.Duration) {
	e.t.Helper()
	e.eventually("every server deleted", timeout, func() (bool, string) {
		return len(e.w.Sim.Servers()) == 0 && len(e.w.Machines.Alive()) == 0 && len(e.nodeClaims()) == 0, e.summary()
	})
}

func offerOf(s scwsim.ServerState) string { return s.OfferName + "/" + s.Zone }
