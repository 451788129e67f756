package cloudprovider_test

import (
	"slices"
	"testing"

	"github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// A namesake cluster (same name, another identity) already has a server
// tagged with the NodeClaim's name: Create orders our own server beside it
// and never takes or touches the namesake's.
func TestCreateNeverTakesANamesakesServerForTheClaim(t *testing.T) {
	e := startEnv(t, nil)
	claim := e.nodeClaim()
	client, err := e.w.SDKClient()
	if err != nil {
		t.Fatal(err)
	}
	offerID, ok := e.w.Sim.OfferID("fr-par-2", "EM-A116X-SSD", "hourly")
	if !ok {
		t.Fatal("no EM-A116X-SSD hourly offer in fr-par-2")
	}
	tags := []string{world.TagManagedBy + "=" + e.w.ClusterName, world.TagClusterID + "=another-cluster",
		world.TagNodeClaim + "=" + claim.Name, world.TagNodePool + "=default"}
	namesake, err := baremetal.NewAPI(client).CreateServer(&baremetal.CreateServerRequest{
		Zone: scw.ZoneFrPar2, OfferID: offerID, Name: claim.Name, Description: "the namesake cluster's node", Tags: tags,
	})
	if err != nil {
		t.Fatal(err)
	}
	got := e.launch(claim)
	if got.Status.ProviderID == scaleway.ProviderID(scw.ZoneFrPar2, namesake.ID) {
		t.Fatalf("Create took the namesake cluster's server %s for %s", namesake.ID, claim.Name)
	}
	if n := e.creates(claim.Name); n != 2 {
		t.Fatalf("%d orders tagged for %s, want the namesake's and ours", n, claim.Name)
	}
	e.waitReadyNode(got.Status.ProviderID)
	s, ok := e.w.Sim.Server(namesake.ID)
	if !ok {
		t.Fatal("the namesake's server was released")
	}
	if !slices.Equal(s.Tags, tags) {
		t.Fatalf("the namesake's server was retagged: %v, ordered with %v", s.Tags, tags)
	}
}
