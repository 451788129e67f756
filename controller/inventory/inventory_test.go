package inventory

import (
	"context"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/simapi"
)

var c1 = identity.Identity{Name: "c1", ID: "uid-c1"}

func setup(t *testing.T) (*Inventory, *scaleway.Client, *scwsim.Sim) {
	t.Helper()
	sim, api := simapi.Start(t, "fr-par-2")
	_ = v1alpha1.SchemeGroupVersion
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	nc.Name, nc.Spec.Zones = "nc", []string{"fr-par-2"}
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nc).Build()
	// pl-waw-2 is an Elastic Metal zone the simulator does not serve: the sweep skips it.
	owner := &identity.Owner{Identity: c1, API: api, Kube: kube, Log: testlog.New(t)}
	inv := &Inventory{API: api, Kube: kube, Owner: owner, DefaultZone: "fr-par-2",
		AllZones: []string{"fr-par-1", "fr-par-2", "nl-ams-1", "pl-waw-2"}, Log: testlog.New(t)}
	return inv, api, sim
}

func order(t *testing.T, sim *scwsim.Sim, api *scaleway.Client, zone, claim string) string {
	t.Helper()
	offerID, ok := sim.OfferID(zone, "EM-A116X-SSD", "hourly")
	if !ok {
		t.Fatalf("no offer in %s", zone)
	}
	tag := scaleway.Tag(scaleway.TagNodeClaim, claim)
	srv, _, err := api.CreateServer(context.Background(), scaleway.CreateServerRequest{Zone: scw.Zone(zone), OfferID: offerID, Name: claim,
		Tags: append(c1.Tags(), tag), IdempotencyTag: tag})
	if err != nil {
		t.Fatal(err)
	}
	return srv.ID
}

// A server in a zone no NodeClass names is found through the first sweep;
// a zone that cannot be listed is skipped by the sweep but fails a lookup.
func TestServerOfFindsServersInEveryZoneTheClusterUses(t *testing.T) {
	inv, api, sim := setup(t)
	id := order(t, sim, api, "nl-ams-1", "far")
	srv, err := inv.ServerOf(context.Background(), "far")
	if err != nil || srv == nil || srv.ID != id {
		t.Fatalf("ServerOf = %v, %v; want %s", srv, err, id)
	}
	zones, err := inv.Zones(context.Background())
	if err != nil || len(zones) != 2 || zones[0] != "fr-par-2" || zones[1] != "nl-ams-1" {
		t.Fatalf("zones %v, %v: want the nodeclass's and the swept one", zones, err)
	}
	if srv, err := inv.ServerOf(context.Background(), "nobody"); err != nil || srv != nil {
		t.Fatalf("ServerOf a claim without a server = %v, %v", srv, err)
	}
	sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Method: "GET", Path: `/zones/nl-ams-1/servers$`, Status: 503})
	if srv, err := inv.ServerOf(context.Background(), "nobody"); err == nil {
		t.Fatalf("ServerOf with a zone failing = %v and no error: a caller would order blind", srv)
	}
	if _, err := inv.Servers(context.Background()); err == nil {
		t.Fatal("Servers with a zone failing returned a shorter list")
	}
}

// Issue 31 item 8: after the cluster is renamed, its servers (tagged with
// the old name) are found by the inventory's first sweep, in a zone no
// NodeClass names too, retagged with the new name and listed: Karpenter
// keeps their NodeClaims and nothing is ordered again.
func TestRenamedClusterServersAreListedAfterTheFirstSweep(t *testing.T) {
	inv, api, sim := setup(t)
	near := order(t, sim, api, "fr-par-2", "near")
	far := order(t, sim, api, "nl-ams-1", "far")
	inv.Owner.Name = "c1-renamed"
	srvs, err := inv.Servers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, s := range srvs {
		ids[s.ID] = true
		if !scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagManagedBy, "c1-renamed")) {
			t.Errorf("server %s listed with tags %v, want the new name", s.ID, s.Tags)
		}
	}
	if !ids[near] || !ids[far] || len(srvs) != 2 {
		t.Fatalf("servers after the rename: %v; want %s and %s", ids, near, far)
	}
	if srv, err := inv.ServerOf(context.Background(), "far"); err != nil || srv == nil || srv.ID != far {
		t.Fatalf("ServerOf after the rename = %v, %v; want %s", srv, err, far)
	}
}
