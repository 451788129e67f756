package spare_test

import (
	"context"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/simapi"
)

// A monthly server that ran a node is kept as a spare with its disks
// unerased (the node's config, its kubelet's key): it is neither taken nor
// offered (Takeable) until the pre-imager's erase removed the pending tag,
// also once it is back in rescue. A server kept while still being
// delivered ran nothing and needs no erase.
func TestEraseKeptSpareIsNotTakenUntilErased(t *testing.T) {
	ctx := context.Background()
	sim, api := simapi.Start(t, zone)
	f := newKeeperFixture(t, sim, api)
	k, nc := f.k, f.nc
	srv := f.claimed(t, install.PhaseJoined)
	if err := sim.ForceStatus(srv.ID, "ready"); err != nil {
		t.Fatal(err)
	}
	if out, d, err := k.Release(ctx, zone, srv.ID, "a", nc); err != nil || out != spare.Kept {
		t.Fatalf("Release: %s (%s), %v; want kept", out, d.Reason, err)
	}
	// Back in rescue, its stale Node gone: only the erase is missing.
	if _, err := api.EditTags(ctx, zone, srv.ID, func(tags []string) ([]string, bool) {
		return scaleway.RemoveTagIn(tags, spare.TagRescuePending)
	}); err != nil {
		t.Fatal(err)
	}
	got, err := api.GetServer(ctx, zone, srv.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !spare.ErasePending(got) || spare.Takeable(got) {
		t.Fatalf("kept spare that ran a node: erase pending %v, takeable %v (tags %v)", spare.ErasePending(got), spare.Takeable(got), got.Tags)
	}
	if s, err := k.Take(ctx, zone, got.OfferName, catalog.BillingMonthly, nc, "b", "pool"); err != nil || s != nil {
		t.Fatalf("took an unerased spare: %v, %v", s, err)
	}
	// The pre-imager's erase passed.
	if _, err := api.EditTags(ctx, zone, srv.ID, func(tags []string) ([]string, bool) {
		tags, _ = scaleway.RemoveTagIn(tags, install.TagErasePending)
		return scaleway.SetTagIn(tags, install.TagErased, "1700000000")
	}); err != nil {
		t.Fatal(err)
	}
	if s, err := k.Take(ctx, zone, got.OfferName, catalog.BillingMonthly, nc, "b", "pool"); err != nil || s == nil || s.ID != srv.ID {
		t.Fatalf("the erased spare was not taken: %v, %v", s, err)
	}
}
