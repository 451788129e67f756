package spare_test

import (
	"context"
	"testing"
	"time"

	"github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/billing"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/invariants"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/simapi"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
)

const (
	lagZone  = scw.Zone("fr-par-2")
	lagOffer = "EM-B112X-SSD"
	// lag is how far the simulator's reads trail its writes: long enough
	// for the restarted process's take to fall inside it on a slow machine.
	lag = 3 * time.Second
)

// keeperOn is a Keeper of cluster c1 on its own client (a process of its own).
func keeperOn(t *testing.T, api *scaleway.Client) *spare.Keeper {
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()
	owner := &identity.Owner{Identity: identity.Identity{Name: "c1", ID: "uid-c1"}, API: api, Kube: kube, Log: testlog.New(t)}
	cat := catalog.New(catalog.Options{Client: api.SDK(), Zones: []scw.Zone{lagZone}})
	if err := cat.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &spare.Keeper{API: api, Offers: cat, Rescue: &rescue.Dialer{}, Owner: owner, Log: testlog.New(t)}
}

// listedSpare creates a monthly spare of nc for k's cluster and waits until
// the lagging listings show it.
func listedSpare(t *testing.T, k *spare.Keeper, api *scaleway.Client, nc *v1alpha1.ScalewayElasticMetalNodeClass) *baremetal.Server {
	t.Helper()
	return listedSpareWith(t, k, api, nc)
}

// listedSpareWith is listedSpare with extra tags.
func listedSpareWith(t *testing.T, k *spare.Keeper, api *scaleway.Client, nc *v1alpha1.ScalewayElasticMetalNodeClass, extra ...string) *baremetal.Server {
	t.Helper()
	offer, ok := k.Offers.Offer(string(lagZone), lagOffer, catalog.BillingMonthly)
	if !ok {
		t.Fatalf("no monthly %s", lagOffer)
	}
	tags := append(k.Owner.Tags(), scaleway.Tag(scaleway.TagNodeClass, nc.Name), scaleway.Tag(scaleway.TagPhase, "spare"))
	tags = append(tags, billing.Tags(catalog.BillingMonthly, time.Now())...)
	tags = append(tags, extra...)
	srv, _, err := api.CreateServer(context.Background(), scaleway.CreateServerRequest{Zone: lagZone, OfferID: offer.ID, Name: "spare",
		Tags: append(tags, "test/spare=1"), IdempotencyTag: "test/spare=1"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(lag + 500*time.Millisecond) // listed as a spare
	return srv
}

// Path 14 of issue 31: a take right after a restart decided from a listing
// that lags. The previous process took spare S for N1 and died; the new
// one lists S still as a spare (the listing shows it as it was) and, with
// no state of its own to go below, wrote nodeclaim=N2 over N1's claim: two
// NodeClaims on one server, N1's install writing on a server tagged for N2.
// The take must decide on the server as read by ID, and refuse it when the
// read says it is no longer a spare. With StaleReadsByID the read by ID
// lags too, and the client waits out Config.ReadLag before its first read
// that a write is based on.
func TestTakeAfterRestartDoesNotOverwriteAFresherClaimFromALaggingListing(t *testing.T) {
	for _, tc := range []struct {
		name string
		byID bool
	}{{"listing lags", false}, {"reads by ID lag too", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			sim, api1, url := simapi.StartURL(t, lagZone, func(o *scwsim.Options) { o.StaleLag, o.StaleReadsByID = lag, tc.byID })
			readLag := func(c *scaleway.Config) {
				if tc.byID {
					c.ReadLag = lag
				}
			}
			k1 := keeperOn(t, api1)
			nc := &v1alpha1.ScalewayElasticMetalNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "nc"}}
			srv := listedSpare(t, k1, api1, nc)

			// The first process takes it for n1 and dies (nothing released).
			taken, err := k1.Take(ctx, lagZone, lagOffer, catalog.BillingMonthly, nc, "n1", "default")
			if err != nil || taken == nil || taken.ID != srv.ID {
				t.Fatalf("first take: %v %v", taken, err)
			}
			claims := map[string]invariants.Claim{"n1": {Name: "n1", Created: time.Now().Add(-time.Minute)}}

			// The restarted process takes a spare for n2 within the lag.
			api2 := simapi.NewClient(t, sim, url, lagZone, readLag)
			k2 := keeperOn(t, api2)
			claims["n2"] = invariants.Claim{Name: "n2", Created: time.Now()}
			again, err := k2.Take(ctx, lagZone, lagOffer, catalog.BillingMonthly, nc, "n2", "default")
			if err != nil {
				t.Fatal(err)
			}
			if again != nil {
				t.Errorf("the restarted process took server %s for n2 (tags %v)", again.ID, again.Tags)
			}
			if st, _ := sim.Server(srv.ID); scwsim.TagValue(st.Tags, scaleway.TagNodeClaim) != "n1" {
				t.Errorf("server %s tagged %v, want n1's still", srv.ID, st.Tags)
			}
			ledger := sim.Ledger()
			facts := invariants.Facts{Cluster: "c1", Claims: claims, End: time.Now()}
			if vs := append(invariants.I1(ledger, facts), invariants.I2(ledger, facts)...); len(vs) > 0 {
				t.Errorf("money invariants broken:\n%s", invariants.Report(vs))
			}
		})
	}
}

// A take decides on the server's status as read by ID, not as a lagging
// listing shows it: a spare deleted or broken since the listing (by its
// period's end, another process, Scaleway) is not handed to a NodeClaim,
// whose install would fail on it after its timeouts.
func TestTakeRefusesASpareWhoseReadByIDIsNoLongerTakeable(t *testing.T) {
	for _, status := range []string{"deleting", "error", "locked"} {
		t.Run(status, func(t *testing.T) {
			ctx := context.Background()
			sim, api, _ := simapi.StartURL(t, lagZone, func(o *scwsim.Options) { o.StaleLag = lag })
			k := keeperOn(t, api)
			nc := &v1alpha1.ScalewayElasticMetalNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "nc"}}
			srv := listedSpare(t, k, api, nc)
			if err := sim.ForceStatus(srv.ID, status); err != nil {
				t.Fatal(err)
			}
			got, err := k.Take(ctx, lagZone, lagOffer, catalog.BillingMonthly, nc, "n1", "default")
			if err != nil {
				t.Fatal(err)
			}
			if got != nil {
				t.Errorf("took server %s (%s by ID) for n1", got.ID, status)
			}
			if st, _ := sim.Server(srv.ID); scwsim.TagValue(st.Tags, scaleway.TagNodeClaim) != "" {
				t.Errorf("server %s tagged %v, want no NodeClaim", srv.ID, st.Tags)
			}
		})
	}
}

// A spare erased (or back in rescue) a moment ago still shows as
// erase-pending (rescue-pending) in a lagging listing. The take reads such a
// spare by ID rather than skip it: skipping it orders a new server, a month
// of money for a monthly offer, while the spare sits idle.
func TestTakeReadsASpareWhoseListingMayShowAPendingStepAlreadyDone(t *testing.T) {
	for _, pending := range []string{install.TagErasePending, spare.TagRescuePending} {
		t.Run(pending, func(t *testing.T) {
			ctx := context.Background()
			sim, api, _ := simapi.StartURL(t, lagZone, func(o *scwsim.Options) { o.StaleLag = lag })
			k := keeperOn(t, api)
			nc := &v1alpha1.ScalewayElasticMetalNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "nc"}}
			srv := listedSpareWith(t, k, api, nc, scaleway.Tag(pending, "1"))
			if _, err := api.EditTags(ctx, lagZone, srv.ID, func(tags []string) ([]string, bool) {
				tags, _ = scaleway.RemoveTagIn(tags, pending)
				return tags, true
			}); err != nil {
				t.Fatal(err)
			}
			got, err := k.Take(ctx, lagZone, lagOffer, catalog.BillingMonthly, nc, "n1", "default")
			if err != nil {
				t.Fatal(err)
			}
			if got == nil || got.ID != srv.ID {
				t.Fatalf("took %v, want spare %s (no longer %s by ID)", got, srv.ID, pending)
			}
			if st, _ := sim.Server(srv.ID); scwsim.TagValue(st.Tags, scaleway.TagNodeClaim) != "n1" {
				t.Errorf("server %s tagged %v, want n1", srv.ID, st.Tags)
			}
		})
	}
}
