package removal

import (
	"context"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/garbagecollection"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/inventory"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// A NodeClass deleted with sparesOnDeletion: Keep whose finalizer's listing
// missed its last spare (kept moments before: listings lag). The garbage
// collector later finds that spare without a NodeClass; the record the
// finalizer left makes it hand the spare over as the policy said, where it
// used to release it as orphaned.
func TestASpareTheFinalizerMissedIsHandedOverNotReleased(t *testing.T) {
	f := setup(t, nodeClass("gp", v1alpha1.SparesKeep))
	records := &Records{Kube: f.kube, Namespace: "karpenter"}
	f.c.Records = records
	listed := f.order(t, "gp", "")
	missed := f.spareTagged(t, "gp", "order=missed")
	servers := f.c.Servers
	f.c.Servers = func(ctx context.Context) ([]*baremetal.Server, error) {
		srvs, err := servers(ctx)
		var out []*baremetal.Server
		for _, s := range srvs {
			if s.ID != missed.ID { // not listed yet
				out = append(out, s)
			}
		}
		return out, err
	}
	f.delete(t, nodeClass("gp", ""))
	if _, err := f.reconcile(t, "gp"); err != nil {
		t.Fatal(err)
	}
	if f.exists(t, "gp") {
		t.Fatal("nodeclass still there")
	}
	if s := f.server(t, listed.ID); !scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagHandedOverBy, "c1")) {
		t.Fatalf("the listed spare was not handed over: %v", s.Tags)
	}

	// The garbage collector's next sweeps, past its grace.
	clk := clocktesting.NewFakeClock(time.Now().Add(time.Hour))
	inv := &inventory.Inventory{API: f.api, Kube: f.kube, Owner: f.c.Spares.Owner, DefaultZone: string(zone), Log: testlog.New(t)}
	gc := &garbagecollection.Controller{Kube: f.kube, Servers: inv.List, Spares: f.c.Spares, GracePeriod: 10 * time.Minute,
		Clock: clk, Log: testlog.New(t), KeptOnDeletion: records.Kept}
	for i := 0; i < 2; i++ {
		if _, err := gc.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	s := f.server(t, missed.ID)
	if s.Status == string(baremetal.ServerStatusDeleting) {
		t.Fatal("a spare of a nodeclass deleted with sparesOnDeletion: Keep was released as orphaned")
	}
	if !scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagHandedOverBy, "c1")) || scaleway.HasTags(s.Tags, c1.Tags()[0]) {
		t.Fatalf("the missed spare was not handed over: %v", s.Tags)
	}
}

// spareTagged orders a monthly spare of nodeClass with one more tag (its
// idempotency tag: f.order's would return the same server).
func (f *fixture) spareTagged(t *testing.T, nodeClass, tag string) *baremetal.Server {
	t.Helper()
	offerID, ok := f.sim.OfferID(string(zone), "EM-A115X-SSD", "monthly")
	if !ok {
		t.Fatal("no monthly offer")
	}
	tags := install.SetPhaseIn(append(c1.Tags(), scaleway.Tag(scaleway.TagNodeClass, nodeClass), tag), install.PhaseSpare, time.Now())
	srv, _, err := f.api.CreateServer(context.Background(), scaleway.CreateServerRequest{
		Zone: zone, OfferID: offerID, Name: "n", Tags: tags, IdempotencyTag: tag})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// Without a record (the NodeClass released its spares, or was created
// again under the same name), a spare of a gone NodeClass is released.
func TestARecreatedNodeClassForgetsItsRecord(t *testing.T) {
	f := setup(t, nodeClass("other", ""))
	records := &Records{Kube: f.kube, Namespace: "karpenter"}
	f.c.Records = records
	ctx := context.Background()
	if err := records.Keep(ctx, "gp", time.Now()); err != nil {
		t.Fatal(err)
	}
	if kept, err := records.Kept(ctx, "gp"); err != nil || !kept {
		t.Fatalf("Kept = %v, %v after Keep", kept, err)
	}
	if err := f.kube.Create(ctx, nodeClass("gp", "")); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t, "gp") // adds the finalizer, drops the record
	if kept, err := records.Kept(ctx, "gp"); err != nil || kept {
		t.Fatalf("Kept = %v, %v for a nodeclass created again", kept, err)
	}
}
