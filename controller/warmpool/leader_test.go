package warmpool

import (
	"context"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/simapi"
)

// poolOrders counts, over the simulator's ledger, the warm-pool servers
// ordered for NodeClass nc and how many times each slot was ordered.
func poolOrders(sim *scwsim.Sim, nc string) (int, map[string]int) {
	n, bySlot := 0, map[string]int{}
	for _, e := range sim.Ledger() {
		if e.Kind != scwsim.LedgerOrder || !scaleway.HasTags(e.Tags, scaleway.Tag(scaleway.TagWarmPool, "true"), scaleway.Tag(scaleway.TagNodeClass, nc)) {
			continue
		}
		n++
		slot, _ := scaleway.TagValue(e.Tags, scaleway.TagWarmPoolSlot)
		bySlot[slot]++
	}
	return n, bySlot
}

// Issue 31 (a leader change): the leader orders the pool's servers and
// dies before any listing shows them (listings serve the servers as they
// were an hour ago). The next leader remembers nothing of those orders:
// it must find them recorded in the API server and wait for them, not
// order the same slots again (the pool would hold twice its size: hourly
// servers billed for nothing, monthly ones a month each). Checked over the
// simulator's ledger.
func TestNextLeaderDoesNotOrderThePoolSlotsOfTheOneThatDied(t *testing.T) {
	const size = 2
	f := setup(t, readyNodeClass(v1alpha1.WarmPoolEntry{Offer: "EM-A116X-SSD", Servers: size}),
		func(o *scwsim.Options) { o.StaleLag = time.Hour })
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if n, _ := poolOrders(f.sim, "nc"); n != size {
		t.Fatalf("the leader ordered %d pool servers, want %d", n, size)
	}
	// The leader dies; the next one starts from what the API and the cluster hold.
	f.c = f.controller(t, simapi.NewClient(t, f.sim, f.url, zone))
	for range 2 {
		if err := f.reconcile(t); err != nil {
			t.Fatal(err)
		}
	}
	n, bySlot := poolOrders(f.sim, "nc")
	for slot, k := range bySlot {
		if k != 1 {
			t.Errorf("slot %s ordered %d times", slot, k)
		}
	}
	if n > size {
		t.Fatalf("%d pool servers ordered for a pool of %d across a leader change", n, size)
	}
	// The same records count against the spend limits of the next leader
	// (spendlimit.Limiter.Records) while no listing shows the slots.
	recs, err := f.c.Records(context.Background(), "nc")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != size {
		t.Errorf("%d recorded warm-pool orders for the spend limits, want the %d of the leader that died: %+v", len(recs), size, recs)
	}
}
