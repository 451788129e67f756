package spare_test

import (
	"context"
	"testing"
	"time"

	"github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
)

// keeperFixture is a Keeper of cluster c1 on the simulated API, its
// NodeClass "nc" and a fake API server for Nodes.
type keeperFixture struct {
	sim  *scwsim.Sim
	api  *scaleway.Client
	kube client.Client
	c1   identity.Identity
	k    *spare.Keeper
	nc   *v1alpha1.ScalewayElasticMetalNodeClass
}

func newKeeperFixture(t *testing.T, sim *scwsim.Sim, api *scaleway.Client) *keeperFixture {
	t.Helper()
	f := &keeperFixture{sim: sim, api: api, c1: identity.Identity{Name: "c1", ID: "uid-c1"},
		kube: fake.NewClientBuilder().WithScheme(scheme.Scheme).Build(), nc: &v1alpha1.ScalewayElasticMetalNodeClass{}}
	f.nc.Name = "nc"
	owner := &identity.Owner{Identity: f.c1, API: api, Kube: f.kube, Log: testlog.New(t)}
	f.k = &spare.Keeper{API: api, Offers: simOffers{sim}, Rescue: &rescue.Dialer{}, Owner: owner, Nodes: f.kube, Log: testlog.New(t)}
	return f
}

// claimed creates a monthly EM-A215R-HDD server of c1 in NodeClass nc,
// tagged for NodeClaim "a" in phase.
func (f *keeperFixture) claimed(t *testing.T, phase install.Phase) *baremetal.Server {
	t.Helper()
	offerID, ok := f.sim.OfferID(string(zone), "EM-A215R-HDD", "monthly")
	if !ok {
		t.Fatal("no monthly EM-A215R-HDD offer in the simulator")
	}
	tags := append(f.c1.Tags(), scaleway.Tag(scaleway.TagNodeClass, "nc"), scaleway.Tag(scaleway.TagNodeClaim, "a"))
	tags = install.SetPhaseIn(tags, phase, time.Now())
	srv, _, err := f.api.CreateServer(context.Background(), scaleway.CreateServerRequest{Zone: zone, OfferID: offerID, Name: "a",
		Tags: tags, IdempotencyTag: scaleway.Tag(scaleway.TagNodeClaim, "a")})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}
