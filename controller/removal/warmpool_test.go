package removal

import (
	"context"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// Deleting a NodeClass releases its hourly warm pool even when its spares
// are handed over (sparesOnDeletion: Keep): an hourly server handed over
// would bill by the hour for nothing; the monthly spare is handed over.
func TestDeletionReleasesTheHourlyWarmPoolEvenWithKeep(t *testing.T) {
	nc := nodeClass("gp", v1alpha1.SparesKeep)
	nc.Spec.WarmPool = []v1alpha1.WarmPoolEntry{{Offer: "EM-A116X-SSD", Servers: 1}}
	f := setup(t, nc)
	monthly := f.order(t, "gp", "")
	offerID, ok := f.sim.OfferID(string(zone), "EM-A116X-SSD", "hourly")
	if !ok {
		t.Fatal("no hourly offer")
	}
	slot := scaleway.Tag(scaleway.TagWarmPoolSlot, "gp/fr-par-2/EM-A116X-SSD/hourly/0")
	tags := install.SetPhaseIn(append(c1.Tags(), scaleway.Tag(scaleway.TagNodeClass, "gp"), scaleway.Tag(scaleway.TagWarmPool, "true"), slot),
		install.PhaseSpare, time.Now())
	pool, _, err := f.api.CreateServer(context.Background(), scaleway.CreateServerRequest{
		Zone: zone, OfferID: offerID, Name: "pool", Tags: tags, IdempotencyTag: slot})
	if err != nil {
		t.Fatal(err)
	}

	f.delete(t, nc)
	if _, err := f.reconcile(t, "gp"); err != nil {
		t.Fatal(err)
	}
	if f.exists(t, "gp") {
		t.Fatal("nodeclass kept")
	}
	if s := f.server(t, pool.ID); s.Status != string(baremetal.ServerStatusDeleting) {
		t.Fatalf("hourly warm-pool server %s not released (status %s, tags %v)", pool.ID, s.Status, s.Tags)
	}
	if s := f.server(t, monthly.ID); s.Status == string(baremetal.ServerStatusDeleting) || !scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagHandedOverBy, "c1")) {
		t.Fatalf("monthly spare not handed over: %s %v", s.Status, s.Tags)
	}
}
