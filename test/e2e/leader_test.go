package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/e2e/harness"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// Two replicas of the controller with leader election, as the chart
// deploys them. The leader is killed (SIGKILL: the Lease is not released)
// while installs are in flight; the standby takes over within the lease
// duration and finishes them. Then the old leader comes back as the
// standby, the workload shrinks (Karpenter deletes nodes, the collector
// sweeps) and the new leader is killed right after it listed the servers,
// inside a sweep. Every pod gets a node, the ledger shows no second server
// for any NodeClaim (I1) and no server deleted, untagged or rebooted under
// a live NodeClaim (I2), nothing is left without an owner, and neither
// replica wrote anything to Scaleway before it led. About 2 minutes (fast
// profile; each takeover waits out the 15s lease).
func TestLeaderChangeDuringInstallsAndSweeps(t *testing.T) {
	e, a, b := startReplicas(t, world.Options{Profile: "fast"})
	claims := e.WatchClaims(100 * time.Millisecond)

	// 1. The leader dies in the middle of the installs.
	app := e.Run("app", 3, "1", "1Gi", true)
	e.Eventually("installs in flight", harness.WaitLong, func() (bool, string) {
		inFlight := 0
		for _, s := range e.W.Sim.Servers() {
			switch world.TagValue(s.Tags, world.TagPhase) {
			case "rescue", "imaging":
				inFlight++
			}
		}
		return inFlight > 0 && len(e.Nodes()) < 3, e.Summary()
	})
	if _, leads := b.Leading(); leads {
		t.Fatalf("both replicas lead")
	}
	killed := time.Now()
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed the leader (replica-1) with installs in flight: %s", e.Summary())
	bLeads, err := b.WaitLeading(e.Ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replica-2 leads %s after the kill", bLeads.Sub(killed).Round(100*time.Millisecond))
	assertStandbyWroteNothing(t, "replica-2", b, 1, bLeads)
	e.WaitBound("app", 3, harness.WaitLong)

	// 2. The old leader returns as the standby; the new leader dies inside
	// a sweep, while Karpenter removes the nodes the workload no longer
	// needs.
	if err := a.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := a.WaitHealthy(e.Ctx); err != nil {
		t.Fatal(err)
	}
	app.ScaleTo(1)
	e.Eventually("a node being removed", harness.WaitLong, func() (bool, string) {
		for _, nc := range e.NodeClaims() {
			if nc.DeletionTimestamp != nil {
				return true, ""
			}
		}
		return false, e.Summary()
	})
	listings := countListings(b)
	e.Eventually("the leader's next listing of the servers", time.Minute, func() (bool, string) {
		return countListings(b) > listings, fmt.Sprintf("%d listings", countListings(b))
	})
	killed = time.Now()
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed the leader (replica-2) inside a sweep: %s", e.Summary())
	aLeads, err := a.WaitLeading(e.Ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replica-1 leads again %s after the kill", aLeads.Sub(killed).Round(100*time.Millisecond))
	assertStandbyWroteNothing(t, "replica-1", a, 2, aLeads)

	e.WaitBound("app", 1, harness.WaitLong)
	e.Eventually("one node and one server left", harness.WaitLong, func() (bool, string) {
		return len(e.NodeClaims()) == 1 && len(e.W.Sim.Servers()) == 1 && len(e.Nodes()) == 1, e.Summary()
	})
	claims.Stop()
	e.AssertNoDuplicateOrders()
	e.AssertNoServerTakenFromALiveClaim(claims)
	e.AssertNothingLeaked()
}

// countListings is how many server listings (GET .../servers) c sent.
func countListings(c *world.Controller) int {
	n := 0
	for _, call := range c.APICalls() {
		if call.Method == "GET" && strings.HasSuffix(call.Path, "/servers") {
			n++
		}
	}
	return n
}

// assertStandbyWroteNothing fails if start #start of c sent the Scaleway
// API anything but reads before it led; the reads are logged by kind.
func assertStandbyWroteNothing(t *testing.T, name string, c *world.Controller, start int, leads time.Time) {
	t.Helper()
	reads := map[string]int{}
	for _, call := range c.APICalls() {
		if call.Start != start || !call.At.Before(leads) {
			continue
		}
		if call.Write() {
			t.Errorf("%s wrote to Scaleway before it led: %s", name, call)
			continue
		}
		reads[harness.CallKind(call.Path)]++
	}
	var kinds []string
	for k, n := range reads {
		kinds = append(kinds, fmt.Sprintf("%s:%d", k, n))
	}
	sort.Strings(kinds)
	t.Logf("%s as the standby: reads %v", name, kinds)
}

// The leader dies after its order was taken but before the answer reached
// it: the NodeClaim has no providerID yet, and the new server is not in
// the listings yet (they lag behind orders by longer than a takeover). The
// new leader must find that order before ordering again: the NodeClaim
// gets one server (I1) and its node. About 1 minute.
func TestLeaderKilledBetweenOrderAndAnswerOrdersOnce(t *testing.T) {
	lag := func(o *scwsim.Options) { o.ListLag = 45 * time.Second }
	e, a, b := startReplicas(t, world.Options{Profile: "fast", Sim: lag})
	held := a.HoldAnswers(func(c world.APICall) bool { return c.Method == "POST" && strings.HasSuffix(c.Path, "/servers") })
	e.Run("app", 1, "1", "1Gi", false)
	select {
	case call := <-held:
		t.Logf("the order was taken, its answer held: %s", call)
	case <-time.After(harness.WaitLong):
		t.Fatalf("no order: %s", e.Summary())
	}
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WaitLeading(e.Ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	e.WaitBound("app", 1, harness.WaitLong)
	e.AssertNoDuplicateOrders()
	if n := orders(e); n != 1 {
		t.Errorf("%d orders for one NodeClaim, want 1: %s", n, e.DescribeServers())
	}
}

// The leader freezes (SIGSTOP: a stopped container, a paused host) with
// installs in flight, longer than its Lease; the standby takes over and
// goes on with them. The old leader then wakes up holding its stale state:
// it must notice it may have lost the Lease and stop, writing nothing more
// to Scaleway (controller-runtime alone lets it act as the leader until its
// renew deadline, rebooting and retagging the new leader's servers).
// Every pod gets a node, no NodeClaim has two servers (I1), no server is
// taken from a live NodeClaim (I2), nothing leaks. About 1.5 minutes.
func TestFrozenLeaderWakesUpAfterTheTakeover(t *testing.T) {
	e, a, b := startReplicas(t, world.Options{Profile: "fast"})
	claims := e.WatchClaims(100 * time.Millisecond)
	e.Run("app", 3, "1", "1Gi", true)
	e.Eventually("installs in flight", harness.WaitLong, func() (bool, string) {
		for _, s := range e.W.Sim.Servers() {
			if p := world.TagValue(s.Tags, world.TagPhase); p == "rescue" || p == "imaging" {
				return true, ""
			}
		}
		return false, e.Summary()
	})
	if err := a.Pause(); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	if _, err := b.WaitLeading(e.Ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	// The new leader works a while before the old one wakes up.
	time.Sleep(5 * time.Second)
	t.Logf("waking the old leader after %s: %s", time.Since(frozen).Round(time.Second), e.Summary())
	woke := time.Now()
	if err := a.Resume(); err != nil {
		t.Fatal(err)
	}
	e.Eventually("the old leader stops", time.Minute, func() (bool, string) { return !a.Running(), "still running" })
	var after []string
	for _, call := range a.APICalls() {
		if call.Write() && call.At.After(woke) {
			after = append(after, call.String())
		}
	}
	if len(after) > 0 {
		t.Errorf("the old leader wrote to Scaleway after waking up, beside the new leader:\n%s", strings.Join(after, "\n"))
	}
	t.Logf("the old leader ended: %v", a.ExitErr())
	e.WaitBound("app", 3, harness.WaitLong)
	claims.Stop()
	e.AssertNoDuplicateOrders()
	e.AssertNoServerTakenFromALiveClaim(claims)
	e.AssertNothingLeaked()
}

// startReplicas starts a world and two controller replicas with leader
// election, each behind its own recording proxy: a, leading, and b, healthy.
func startReplicas(t *testing.T, wopts world.Options) (e *harness.Env, a, b *world.Controller) {
	t.Helper()
	replica := func(name string) world.ControllerOptions {
		return world.ControllerOptions{LeaderElection: true, RecordAPICalls: true, LogName: name}
	}
	e = harness.Start(t, harness.Setup{World: wopts, Controller: replica("replica-1.log"), Timeout: 6 * time.Minute})
	a = e.C
	if _, err := a.WaitLeading(e.Ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	b = world.StartController(t, e.W, replica("replica-2.log"))
	if err := b.WaitHealthy(e.Ctx); err != nil {
		t.Fatal(err)
	}
	return e, a, b
}
