package identity_test

import (
	"context"
	"testing"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/simapi"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
)

const zone = scw.Zone("fr-par-2")

// order creates a server tagged with tags in the simulator.
func order(t *testing.T, api *scaleway.Client, sim interface {
	OfferID(zone, name, billing string) (string, bool)
}, name string, tags ...string) *baremetal.Server {
	t.Helper()
	offerID, ok := sim.OfferID(string(zone), "EM-A215R-HDD", "hourly")
	if !ok {
		t.Fatal("no hourly EM-A215R-HDD offer in the simulator")
	}
	tags = append(tags, scaleway.Tag(scaleway.TagNodeClaim, name))
	srv, _, err := api.CreateServer(context.Background(), scaleway.CreateServerRequest{Zone: zone, OfferID: offerID, Name: name,
		Tags: tags, IdempotencyTag: scaleway.Tag(scaleway.TagNodeClaim, name)})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// Issue 31 item 8: renaming the cluster (clusterName in the chart's values)
// used to make every server it ordered another cluster's: Get answered
// NotFound for every NodeClaim, Karpenter deleted them and ordered
// replacements, and the servers stayed billed, untouched. The identity is
// what makes a server the cluster's: a renamed cluster keeps its servers
// and retags them with the new name on first sight (a read by ID: Get, a
// release) and at start (TestRenamedClusterRetagsItsServersAtStart).
func TestRenamedClusterKeepsItsServersOnFirstSight(t *testing.T) {
	ctx := context.Background()
	sim, api := simapi.Start(t, zone)
	old := identity.Identity{Name: "prod", ID: "uid-1"}
	seen := order(t, api, sim, "a", old.Tags()...)

	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()
	renamed := &identity.Owner{Identity: identity.Identity{Name: "prod-eu", ID: "uid-1"}, API: api, Kube: kube, Log: testlog.New(t)}

	// First sight: a read by ID (Get, a release) keeps it and retags it.
	srv, err := api.GetServer(ctx, zone, seen.ID)
	if err != nil {
		t.Fatal(err)
	}
	got, mine, err := renamed.Check(ctx, srv)
	if err != nil || !mine {
		t.Fatalf("Check of a server ordered before the rename: mine=%v, %v; want this cluster's", mine, err)
	}
	if !scaleway.HasTags(got.Tags, scaleway.Tag(scaleway.TagManagedBy, "prod-eu")) || scaleway.HasTags(got.Tags, scaleway.Tag(scaleway.TagManagedBy, "prod")) {
		t.Fatalf("tags after first sight %v, want the new name instead of the old", got.Tags)
	}
}
