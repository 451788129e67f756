package preimage

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/imagesource"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/simapi"
)

type fixedImages struct{ sha string }

func (f fixedImages) Resolve(context.Context, imagesource.Settings) (*imagesource.Image, error) {
	return &imagesource.Image{URL: "https://images.example/raw.zst", Format: "zstd", RawSHA256: f.sha}, nil
}

// imager stands for the install's pre-imaging: it fails with err, or
// passes, telling erased first when the spare's erase was pending.
type imager struct{ err error }

func (i *imager) PreImage(_ context.Context, srv *baremetal.Server, _ install.Image, erased func(*baremetal.Server)) (*baremetal.Server, error) {
	if i.err == nil && install.ErasePending(srv) && erased != nil {
		erased(srv)
	}
	return srv, i.err
}

// A pre-imaging is the health check of a quarantined spare: one that fails
// leaves the quarantine (the spare is still neither taken nor offered), one
// that passes lifts it.
func TestPassedPreImagingLiftsTheQuarantine(t *testing.T) {
	ctx := context.Background()
	const zone = scw.Zone("fr-par-2")
	sim, api, kube, c1, keeper, sha := preimageEnv(t)
	im := &imager{err: errors.New("rescue SSH did not happen in time")}
	c := &Controller{Kube: kube, API: api, Spares: keeper, Imager: im, Images: fixedImages{sha}, Log: testlog.New(t)}

	srv := readySpare(t, sim, api, c1, scaleway.Tag(spare.TagQuarantine, "rescue"))
	quarantine := func() string {
		t.Helper()
		got, err := api.GetServer(ctx, zone, srv.ID)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := spare.Quarantined(got)
		return r
	}

	if _, err := c.ImageSpare(ctx, srv); err == nil {
		t.Fatal("the failing pre-imaging reported no error")
	}
	if got := quarantine(); got != "rescue" {
		t.Fatalf("after a failed pre-imaging the quarantine is %q, want still rescue", got)
	}
	im.err = nil
	if wrote, err := c.ImageSpare(ctx, srv); err != nil || !wrote {
		t.Fatalf("pre-imaging: %v, %v", wrote, err)
	}
	if got := quarantine(); got != "" {
		t.Fatalf("after a passed pre-imaging the quarantine is %q, want lifted", got)
	}
}

// readySpare creates a ready monthly EM-A215R-HDD spare of c1 in NodeClass
// "nc", with the tag extra.
func readySpare(t *testing.T, sim *scwsim.Sim, api *scaleway.Client, c1 identity.Identity, extra string) *baremetal.Server {
	t.Helper()
	const zone = scw.Zone("fr-par-2")
	offerID, _ := sim.OfferID(string(zone), "EM-A215R-HDD", "monthly")
	tags := append(c1.Tags(), scaleway.Tag(scaleway.TagNodeClass, "nc"), extra)
	tags = install.SetPhaseIn(tags, install.PhaseSpare, time.Now())
	srv, _, err := api.CreateServer(context.Background(), scaleway.CreateServerRequest{Zone: zone, OfferID: offerID, Name: "s", Tags: tags, IdempotencyTag: tags[0]})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.ForceStatus(srv.ID, "ready"); err != nil {
		t.Fatal(err)
	}
	return srv
}

// preimageEnv is the simulated API, a fake API server holding NodeClass "nc"
// with a resolved image (digest sha), and a Keeper of cluster c1.
func preimageEnv(t *testing.T) (*scwsim.Sim, *scaleway.Client, client.Client, identity.Identity, *spare.Keeper, string) {
	t.Helper()
	sha := strings.Repeat("ab", 32)
	sim, api := simapi.Start(t, scw.Zone("fr-par-2"))
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	nc.Name = "nc"
	nc.Spec.Talos.ConfigDelivery = v1alpha1.ConfigDeliveryMaintenanceAPI
	nc.Status.Image = &v1alpha1.ResolvedImage{RawSHA256: sha}
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nc).WithStatusSubresource(nc).Build()
	c1 := identity.Identity{Name: "c1", ID: "uid-c1"}
	owner := &identity.Owner{Identity: c1, API: api, Kube: kube, Log: testlog.New(t)}
	return sim, api, kube, c1, &spare.Keeper{API: api, Rescue: &rescue.Dialer{}, Owner: owner, Log: testlog.New(t)}, sha
}
