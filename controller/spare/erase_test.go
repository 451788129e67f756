package spare_test

import (
	"context"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
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
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()
	c1 := identity.Identity{Name: "c1", ID: "uid-c1"}
	owner := &identity.Owner{Identity: c1, API: api, Kube: kube, Log: testlog.New(t)}
	k := &spare.Keeper{API: api, Offers: simOffers{sim}, Rescue: &rescue.Dialer{}, Owner: owner, Nodes: kube, Log: testlog.New(t)}
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	nc.Name = "nc"
	offerID, ok := sim.OfferID(string(zone), "EM-A215R-HDD", "monthly")
	if !ok {
		t.Fatal("no monthly EM-A215R-HDD offer in the simulator")
	}
	tags := append(c1.Tags(), scaleway.Tag(scaleway.TagNodeClass, "nc"), scaleway.Tag(scaleway.TagNodeClaim, "a"))
	tags = install.SetPhaseIn(tags, install.PhaseJoined, time.Now())
	srv, _, err := api.CreateServer(ctx, scaleway.CreateServerRequest{Zone: zone, OfferID: offerID, Name: "a",
		Tags: tags, IdempotencyTag: scaleway.Tag(scaleway.TagNodeClaim, "a")})
	if err != nil {
		t.Fatal(err)
	}
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
