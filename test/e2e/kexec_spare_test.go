package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/e2e/harness"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// nodesOf lists the Nodes registered with providerID.
func nodesOf(e *harness.Env, providerID string) []string {
	var out []string
	for _, n := range e.Nodes() {
		if n.Spec.ProviderID == providerID {
			out = append(out, n.Name)
		}
	}
	return out
}

// A monthly NodeClaim deleted while Talos boots from the kexec jump (after
// the jump, before its Node is Ready; a long KexecBoot holds it there): the
// server is kept as a spare (it is paid for its month), rebooted back into
// rescue through the API (Scaleway's boot type was still rescue, the keep
// reboots anyway), no Node is left registered with its providerID, and the
// next NodeClaim takes the spare, installs and becomes Ready on it without a
// new order. The ledger's I1 and I2 hold.
func TestKexecClaimDeletedWhileTalosBootsFromTheJumpKeepsTheSpare(t *testing.T) {
	s := monthlySetup()
	s.World = world.Options{Sim: func(o *scwsim.Options) { o.Delays.KexecBoot = 8 * time.Second }}
	e := harness.Start(t, s)
	cw := e.WatchClaims(200 * time.Millisecond)
	app := e.Run("jump", 1, "1", "1Gi", false)
	var id string
	e.Eventually("a kexec jump", harness.WaitLong, func() (bool, string) {
		for _, ev := range e.W.Machines.Events() {
			if ev.What == "kexec" {
				id = ev.ServerID
				return true, ""
			}
		}
		return false, e.Summary()
	})
	srv, _ := e.W.Sim.Server(id)
	pid := "scaleway-em://" + srv.Zone + "/" + id
	// The pod goes first, so that no NodeClaim comes back before the spare
	// is ready to be taken; then the NodeClaim is deleted.
	app.ScaleTo(0)
	if st := nodeReadyStatus(e, pid); st == corev1.ConditionTrue {
		t.Fatalf("the node was Ready before the deletion (KexecBoot too short for this machine)")
	}
	for _, nc := range e.NodeClaims() {
		if err := e.W.Kube.Client.Delete(e.Ctx, &nc); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	t.Logf("nodeclaim deleted while server %s boots Talos from the kexec jump", id)
	e.Eventually("the server kept as a spare, back in rescue, without a Node", harness.WaitLong, func() (bool, string) {
		sp := spares(e)
		return len(sp) == 1 && sp[0] == id && len(nodesOf(e, pid)) == 0 && len(e.NodeClaims()) == 0,
			strings.Join(reboots(e.W.Sim, id), ",") + " nodes " + strings.Join(nodesOf(e, pid), ",") + " " + e.DescribeServers()
	})
	// The install's reboot into rescue, the keep's (keyless: Talos stops)
	// and the erase's or pre-imaging's keyed one; never one into normal.
	if got := strings.Join(reboots(e.W.Sim, id), ","); !strings.HasPrefix(got, "rescue,rescue") || strings.Contains(got, "normal") {
		t.Errorf("reboots %s, want the install's into rescue, then the keep's into rescue, and none into normal", got)
	}
	ordered := orders(e)

	app.ScaleTo(1)
	e.WaitBound("jump", 1, harness.WaitLong)
	if n := orders(e); n != ordered || n != 1 {
		t.Fatalf("%d orders in all, want 1: the second NodeClaim takes the spare", n)
	}
	if s := onlyServer(t, e); s.ID != id {
		t.Fatalf("the node runs on %s, the spare was %s", s.ID, id)
	}
	e.Eventually("the spare's node Ready", harness.WaitLong, func() (bool, string) {
		return nodeReadyStatus(e, pid) == corev1.ConditionTrue, e.Summary()
	})
	if n := len(nodesOf(e, pid)); n != 1 {
		t.Errorf("%d Nodes with providerID %s, want 1", n, pid)
	}
	e.AssertNoServerTakenFromALiveClaim(cw)
	e.AssertNoDuplicateOrders()
}
