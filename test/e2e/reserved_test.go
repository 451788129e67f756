package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/e2e/harness"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// monthlySetup: a NodeClass and NodePool that order monthly servers only,
// kept as spares for at least an hour (in practice: their paid month).
func monthlySetup() harness.Setup {
	return harness.Setup{
		NodeClass: func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
			nc.Spec.Billing = v1alpha1.BillingSpec{Periods: []string{"monthly"}, MinimumLifetime: &metav1.Duration{Duration: time.Hour}}
		},
		Reqs: []corev1.NodeSelectorRequirement{{Key: catalog.LabelBillingPeriod, Operator: corev1.NodeSelectorOpIn, Values: []string{"monthly"}}},
	}
}

// spares are the servers kept as spares and back in rescue without their
// old Node (no rescue-pending tag), erased and not quarantined: what is
// offered as reserved capacity (spare.Takeable).
func spares(e *harness.Env) []string {
	var out []string
	for _, s := range e.W.Sim.Servers() {
		// spare.Takeable, as the reserved offerings count: back in rescue,
		// erased (no secret of the node it ran) and out of quarantine (a
		// NodeClaim deleted during its install quarantines its server until
		// a pre-imaging passes, which lifts it after the erase and the
		// image write).
		if world.TagValue(s.Tags, world.TagPhase) == "spare" &&
			spare.Takeable(&baremetal.Server{Tags: s.Tags, Status: baremetal.ServerStatus(s.Status)}) {
			out = append(out, s.ID)
		}
	}
	return out
}

// reservedClaims are the NodeClaims Karpenter scheduled on reserved capacity
// (the spares), with the reservation they name.
func reservedClaims(e *harness.Env) map[string]string {
	out := map[string]string{}
	for _, nc := range e.NodeClaims() {
		if nc.Labels[karpv1.CapacityTypeLabelKey] == karpv1.CapacityTypeReserved {
			out[nc.Name] = nc.Labels[catalog.LabelReservationID]
		}
	}
	return out
}

// The monthly story with Karpenter core: a monthly NodePool scales up;
// its nodes are consolidated away and the servers kept as spares; the next
// pods are scheduled onto the spares as reserved capacity (NodeClaims and
// Nodes labelled reserved with the reservation's ID) with no new order; when
// the spares' paid month ends the garbage collector releases them. About 3
// minutes.
func TestMonthlyNodePoolReusesSparesAsReservedCapacity(t *testing.T) {
	e := harness.Start(t, monthlySetup())
	app := e.Run("app", 2, "3", "1Gi", true)
	e.WaitBound("app", 2, harness.WaitLong)
	ordered := orders(e)
	if ordered != 2 {
		t.Fatalf("%d orders for 2 pods one per node, want 2", ordered)
	}
	if r := reservedClaims(e); len(r) != 0 {
		t.Fatalf("reserved nodeclaims %v before any spare existed", r)
	}

	app.ScaleTo(0)
	e.Eventually("both monthly servers kept as spares once their nodes are consolidated", harness.WaitLong, func() (bool, string) {
		return len(spares(e)) == 2 && len(e.NodeClaims()) == 0, fmt.Sprintf("spares %v; %s", spares(e), e.Summary())
	})

	// The second wave lands on the spares: Karpenter chose their reserved
	// offerings (near-zero price) over ordering.
	app.ScaleTo(2)
	e.WaitBound("app", 2, harness.WaitLong)
	if n := orders(e); n != ordered {
		t.Fatalf("%d new orders for the second wave, want 0 (two spares were there)", n-ordered)
	}
	reserved := reservedClaims(e)
	if len(reserved) != 2 {
		t.Fatalf("reserved nodeclaims %v, want both: %s", reserved, e.Summary())
	}
	for claim, id := range reserved {
		if !strings.HasPrefix(id, "default.fr-par-2.") || !strings.HasSuffix(id, ".monthly") {
			t.Errorf("nodeclaim %s: reservation %q, want default.fr-par-2.<offer>.monthly", claim, id)
		}
	}
	e.Eventually("the nodes labelled reserved", harness.WaitLong, func() (bool, string) {
		n := 0
		for _, node := range e.Nodes() {
			if node.Labels[karpv1.CapacityTypeLabelKey] == karpv1.CapacityTypeReserved && node.Labels[catalog.LabelReservationID] != "" {
				n++
			}
		}
		return n == 2, fmt.Sprintf("%d of %d nodes labelled reserved", n, len(e.Nodes()))
	})
	e.AssertNoDuplicateOrders()

	// Back to spares; the NodeClass stops keeping them (minimumLifetime 0s;
	// their paid month ends only at the end of the calendar month, which
	// the test cannot wait for): the garbage collector releases them.
	app.ScaleTo(0)
	e.Eventually("both servers spares again", harness.WaitLong, func() (bool, string) {
		return len(spares(e)) == 2 && len(e.NodeClaims()) == 0, fmt.Sprintf("spares %v; %s", spares(e), e.Summary())
	})
	// The controller writes the NodeClass's status meanwhile: retried on a conflict.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		nc := e.W.NodeClass("default")
		if err := e.W.Kube.Client.Get(e.Ctx, types.NamespacedName{Name: "default"}, nc); err != nil {
			return err
		}
		nc.Spec.Billing.MinimumLifetime = &metav1.Duration{}
		return e.W.Kube.Client.Update(e.Ctx, nc)
	}); err != nil {
		t.Fatal(err)
	}
	// Gone, not only deleting: a deleting server still shows in the API
	// (and to AssertNothingLeaked below) until the deletion completes.
	e.Eventually("the spares released once no longer kept", harness.WaitLong, func() (bool, string) {
		return len(e.W.Sim.Servers()) == 0, e.DescribeServers()
	})
	if n := orders(e); n != ordered {
		t.Fatalf("%d orders in all, want %d", n, ordered)
	}
	e.AssertNothingLeaked()
}

// Two pods need two nodes while the controller's reserved offering still
// counts two spares of which only one is left (the other was deleted in
// the console behind its back, within the cache's minute): Karpenter launches two reserved NodeClaims;
// one takes the spare, the other's Create finds none, marks the reservation
// exhausted and returns InsufficientCapacity; core deletes that NodeClaim
// and schedules the pod again, on a new order. No spare is taken twice and
// core's ReservationManager does not panic (the controller keeps running).
// About 2 minutes.
func TestTwoReservedClaimsRaceForOneSpare(t *testing.T) {
	e := harness.Start(t, monthlySetup())
	app := e.Run("app", 2, "3", "1Gi", true)
	e.WaitBound("app", 2, harness.WaitLong)
	ordered := orders(e)
	app.ScaleTo(0)
	e.Eventually("both monthly servers kept as spares", harness.WaitLong, func() (bool, string) {
		return len(spares(e)) == 2 && len(e.NodeClaims()) == 0, fmt.Sprintf("spares %v; %s", spares(e), e.Summary())
	})
	// Wait for the reserved offerings' cache to list both spares (its own
	// debug line, not any listing of spares: the keeper and the pre-imager
	// list with the same tags). The cache then holds for a minute, so the
	// deletion below stays unseen while Karpenter schedules on a count of 2.
	seen := time.Now()
	e.Eventually("the reserved offerings counted both spares", harness.WaitLong, func() (bool, string) {
		if reservedListedSince(t, e.C.LogPath, seen) >= 2 {
			return true, ""
		}
		return false, "no listing of two spares by the reserved offerings' cache yet"
	})
	gone := spares(e)[0]
	if err := e.W.Sim.ForceStatus(gone, string(baremetal.ServerStatusDeleting)); err != nil {
		t.Fatal(err)
	}
	app.ScaleTo(2)
	e.WaitBound("app", 2, harness.WaitLong)
	if !e.C.Running() {
		t.Fatalf("the controller stopped: %v\n%s", e.C.ExitErr(), e.C.LogTail(50))
	}
	taken := map[string]int{}
	for _, s := range e.W.Sim.Servers() {
		if c := world.TagValue(s.Tags, "karpenter.sh/nodeclaim"); c != "" && s.Status != string(baremetal.ServerStatusDeleting) {
			taken[c]++
		}
	}
	for c, n := range taken {
		if n > 1 {
			t.Errorf("nodeclaim %s has %d servers", c, n)
		}
	}
	if r := reservedClaims(e); len(r) != 1 {
		t.Errorf("reserved nodeclaims %v, want exactly one (one spare left)", r)
	}
	if n := orders(e) - ordered; n != 1 {
		t.Errorf("%d new orders, want 1 (the pod the spare could not take)", n)
	}
	e.AssertNoDuplicateOrders()
	// The race itself: a reserved claim found no spare left, either by
	// taking none (reservation exhausted) or by a fresh listing after the
	// other's take that offered it nothing (InsufficientCapacity at once).
	log, err := os.ReadFile(e.C.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "reservation exhausted") && !launchFailedForCapacity(string(log)) {
		t.Errorf("no reserved claim found the reservation exhausted or failed for capacity: the race did not happen")
	}
}

// reservedListedSince is the largest count of spares the reserved
// offerings' cache logged listing after since (0 when none).
func reservedListedSince(t *testing.T, logPath string, since time.Time) int {
	t.Helper()
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	most := 0
	for _, line := range strings.Split(string(data), "\n") {
		var rec struct {
			Message string    `json:"message"`
			Time    time.Time `json:"time"`
			Spares  int       `json:"spares"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Message != "listed the spares offered as reserved capacity" {
			continue
		}
		if rec.Time.After(since) && rec.Spares > most {
			most = rec.Spares
		}
	}
	return most
}

// launchFailedForCapacity: Karpenter core logged a NodeClaim launch that
// failed with an InsufficientCapacityError.
func launchFailedForCapacity(log string) bool {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "failed launching nodeclaim") && strings.Contains(line, "insufficient capacity") {
			return true
		}
	}
	return false
}
