package garbagecollection

import (
	"context"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/inventory"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/simapi"
)

const zone = scw.Zone("fr-par-2")

var c1 = identity.Identity{Name: "c1", ID: "uid-c1"}

type fixture struct {
	owner *identity.Owner
	inv   *inventory.Inventory
	api   *scaleway.Client
	sim   *scwsim.Sim
	gc    *Controller
	clk   *clocktesting.FakeClock
}

func setup(t *testing.T, objs ...client.Object) *fixture {
	sim, api := simapi.Start(t, zone)
	// Karpenter's and our types register with client-go's scheme.
	_ = v1alpha1.SchemeGroupVersion
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).Build()
	clk := clocktesting.NewFakeClock(time.Now())
	owner := &identity.Owner{Identity: c1, API: api, Kube: kube, Log: testlog.New(t)}
	inv := &inventory.Inventory{API: api, Kube: kube, Owner: owner, DefaultZone: string(zone), Log: testlog.New(t)}
	cat := catalog.New(catalog.Options{Client: api.SDK(), Zones: []scw.Zone{zone}})
	if err := cat.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	keeper := &spare.Keeper{API: api, Offers: cat, Rescue: &rescue.Dialer{}, Owner: owner, Clock: clk, Log: testlog.New(t)}
	return &fixture{owner: owner, inv: inv, api: api, sim: sim, clk: clk, gc: &Controller{
		Kube: kube, Servers: inv.List, Spares: keeper, GracePeriod: 10 * time.Minute, Clock: clk, Log: testlog.New(t),
		Collected: NewCollectedCounter(prometheus.NewRegistry()),
	}}
}

func (f *fixture) order(t *testing.T, tags ...string) *baremetal.Server {
	t.Helper()
	offerID, ok := f.sim.OfferID(string(zone), "EM-A116X-SSD", "hourly")
	if !ok {
		t.Fatal("no EM-A116X-SSD offer in the simulator")
	}
	tags = append(c1.Tags(), tags...)
	srv, _, err := f.api.CreateServer(context.Background(), scaleway.CreateServerRequest{
		Zone: zone, OfferID: offerID, Name: "n", Tags: tags, IdempotencyTag: tags[len(tags)-1]})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func (f *fixture) live(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, s := range f.sim.Servers() {
		if s.Status != string(baremetal.ServerStatusDeleting) {
			out[s.ID] = true
		}
	}
	return out
}

func claim(name, providerID string) *karpv1.NodeClaim {
	return &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: karpv1.NodeClaimStatus{ProviderID: providerID}}
}

func TestCollectsOnlyWhatNoNodeClaimUses(t *testing.T) {
	kept := claim("kept", "")
	f := setup(t, kept)
	keptSrv := f.order(t, scaleway.Tag(scaleway.TagNodeClaim, "kept"))
	orphan := f.order(t, scaleway.Tag(scaleway.TagNodeClaim, "gone"))
	untagged := f.order(t, "owner=someone")
	foreign, _, err := f.api.CreateServer(context.Background(), scaleway.CreateServerRequest{Zone: zone,
		OfferID: keptSrv.OfferID, Name: "other", Tags: []string{scaleway.Tag(scaleway.TagManagedBy, "other-cluster"), "x=1"}, IdempotencyTag: "x=1"})
	if err != nil {
		t.Fatal(err)
	}

	// Within the grace period nothing is touched: an order may be in flight.
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if live := f.live(t); len(live) != 4 {
		t.Fatalf("collected within the grace period: %v", live)
	}

	f.clk.Step(11 * time.Minute)
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	live := f.live(t)
	if !live[keptSrv.ID] || !live[foreign.ID] {
		t.Fatalf("collected a server in use or of another cluster: %v", live)
	}
	if live[orphan.ID] || live[untagged.ID] {
		t.Fatalf("leaked servers still live: %v", live)
	}
	if got := testutil.ToFloat64(f.gc.Collected.WithLabelValues(ReasonNoNodeClaim)); got != 1 {
		t.Errorf("no_nodeclaim collected = %v", got)
	}
	if got := testutil.ToFloat64(f.gc.Collected.WithLabelValues(ReasonUntagged)); got != 1 {
		t.Errorf("no_nodeclaim_tag collected = %v", got)
	}
}

func TestDuplicateKeepsTheServerTheNodeClaimUses(t *testing.T) {
	f := setup(t)
	first := f.order(t, scaleway.Tag(scaleway.TagNodeClaim, "dup"), "order=1")
	second := f.order(t, scaleway.Tag(scaleway.TagNodeClaim, "dup"), "order=2")
	// The NodeClaim points at the second (newer) server: the first goes.
	if err := f.gc.Kube.Create(context.Background(), claim("dup", scaleway.ProviderID(zone, second.ID))); err != nil {
		t.Fatal(err)
	}
	f.clk.Step(11 * time.Minute)
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	live := f.live(t)
	if !live[second.ID] || live[first.ID] {
		t.Fatalf("kept %v, want only %s", live, second.ID)
	}
}

// A failing list must stop the sweep: acting on a partial view deletes nodes.
func TestListFailureCollectsNothing(t *testing.T) {
	f := setup(t)
	orphan := f.order(t, scaleway.Tag(scaleway.TagNodeClaim, "gone"))
	f.clk.Step(11 * time.Minute)
	f.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Method: "GET", Path: `/servers$`, Status: 500, Times: 100})
	if _, err := f.gc.Reconcile(context.Background()); err == nil {
		t.Fatal("sweep succeeded with the API failing")
	}
	if !f.live(t)[orphan.ID] {
		t.Fatal("collected while the list failed")
	}
}

func (f *fixture) orderIn(t *testing.T, z scw.Zone, period string, tags ...string) *baremetal.Server {
	t.Helper()
	name := "EM-A116X-SSD"
	if period == "monthly" {
		name = "EM-A115X-SSD" // the cheapest offer sold monthly
	}
	offerID, ok := f.sim.OfferID(string(z), name, period)
	if !ok {
		t.Fatalf("no %s %s offer in %s", name, period, z)
	}
	// Bought as period, as an order tags it.
	tags = append(append(c1.Tags(), "karpenter-scaleway-em/billing="+period), tags...)
	srv, _, err := f.api.CreateServer(context.Background(), scaleway.CreateServerRequest{
		Zone: z, OfferID: offerID, Name: "n", Tags: tags, IdempotencyTag: tags[len(tags)-1]})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func nodeClassNamed(name string, zones ...string) *v1alpha1.ScalewayElasticMetalNodeClass {
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
	nc.Spec.Zones = zones
	return nc
}

// A monthly server no NodeClaim uses is paid for the month: the collector
// keeps it as a spare, and releases it only when its paid time runs out.
func TestMonthlyServerWithoutNodeClaimIsKeptAsSpareUntilItsMonthEnds(t *testing.T) {
	f := setup(t, nodeClassNamed("nc"))
	srv := f.orderIn(t, zone, "monthly", scaleway.Tag(scaleway.TagNodeClass, "nc"), scaleway.Tag(scaleway.TagNodeClaim, "gone"))
	f.clk.SetTime(earlyNextMonth(f.clk.Now()))
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, ok := f.sim.Server(srv.ID)
	if !ok || got.Status == string(baremetal.ServerStatusDeleting) {
		t.Fatal("a monthly server paid for the month was released")
	}
	if !scaleway.HasTags(got.Tags, scaleway.Tag(scaleway.TagPhase, "spare")) || scaleway.ParseTags(got.Tags)[scaleway.TagNodeClaim] != "" {
		t.Fatalf("the monthly server was not kept as a spare: %v", got.Tags)
	}
	// Later sweeps in the same month leave the spare alone...
	f.clk.Step(24 * time.Hour)
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !f.live(t)[srv.ID] {
		t.Fatal("a spare was released in the month it is paid for")
	}
	// ...and release it before the subscription renews (sweeps come every
	// few minutes; the last one in the renewal margin releases it).
	f.clk.SetTime(inRenewalMargin(f.clk.Now()))
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.live(t)[srv.ID] {
		t.Fatal("a spare was kept into a new paid month")
	}
	if got := testutil.ToFloat64(f.gc.Collected.WithLabelValues(ReasonSpareExpired)); got != 1 {
		t.Errorf("spare_expired collected = %v", got)
	}
}

// A server in a zone no NodeClass names any more (and not the default one)
// is still found, by the sweep over every zone, and collected.
func TestServersInARemovedZoneAreCollected(t *testing.T) {
	f := setup(t, nodeClassNamed("nc", string(zone)))
	orphan := f.orderIn(t, "fr-par-1", "hourly", scaleway.Tag(scaleway.TagNodeClass, "nc"), scaleway.Tag(scaleway.TagNodeClaim, "gone"))
	f.clk.Step(11 * time.Minute)
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !f.live(t)[orphan.ID] {
		t.Fatal("the test needs the server to be invisible without the zone sweep")
	}
	f.inv.AllZones = []string{"fr-par-1", "fr-par-2", "nl-ams-1"}
	f.inv.Sweep(context.Background())
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.live(t)[orphan.ID] {
		t.Fatal("a server in a zone no nodeclass names was not collected")
	}
}

// A spare whose paid month ends is collected from a listing; a NodeClaim
// that takes it between that listing and the release (Karpenter schedules
// onto spares as reserved capacity) keeps it: the release reads it afresh
// and finds it tagged for that NodeClaim.
func TestASpareTakenAfterTheListingIsNotReleased(t *testing.T) {
	f := setup(t, nodeClassNamed("nc"))
	srv := f.orderIn(t, zone, "monthly", scaleway.Tag(scaleway.TagNodeClass, "nc"), scaleway.Tag(scaleway.TagPhase, "spare"))
	f.clk.SetTime(inRenewalMargin(earlyNextMonth(f.clk.Now()))) // its paid month ends: the collector releases it
	list := f.gc.Servers
	f.gc.Servers = func(ctx context.Context) (inventory.Listing, error) {
		srvs, err := list(ctx)
		// Taken right after the listing.
		if _, terr := f.api.EditTags(ctx, zone, srv.ID, func(tags []string) ([]string, bool) {
			tags, _ = scaleway.SetTagIn(tags, scaleway.TagNodeClaim, "taker")
			tags, _ = scaleway.SetTagIn(tags, scaleway.TagPhase, "ordered")
			return tags, true
		}); terr != nil {
			t.Fatal(terr)
		}
		return srvs, err
	}
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, ok := f.sim.Server(srv.ID)
	if !ok || got.Status == string(baremetal.ServerStatusDeleting) {
		t.Fatal("the collector released a spare a NodeClaim had just taken")
	}
	if scaleway.ParseTags(got.Tags)[scaleway.TagNodeClaim] != "taker" {
		t.Fatalf("the taken spare lost its NodeClaim: %v", got.Tags)
	}
	// Not taken, the same spare is released (the test can fail).
	f.gc.Servers = list
	if _, err := f.api.EditTags(context.Background(), zone, srv.ID, func(tags []string) ([]string, bool) {
		tags, _ = scaleway.RemoveTagIn(tags, scaleway.TagNodeClaim)
		tags, _ = scaleway.SetTagIn(tags, scaleway.TagPhase, "spare")
		return tags, true
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.live(t)[srv.ID] {
		t.Fatal("an expired spare no NodeClaim took was kept")
	}
}

// A NodeClaim created while the collector sweeps takes a weeks-old spare:
// the listing shows the spare tagged for it. The collector must not take it
// for a leaked server of a gone NodeClaim (it listed the NodeClaims first,
// from a map the new claim was missing from, and counted the grace from the
// server's creation) and untag it under the claim's install.
func TestASpareTakenDuringTheSweepStaysWithItsNodeClaim(t *testing.T) {
	f := setup(t, nodeClassNamed("nc"))
	srv := f.orderIn(t, zone, "monthly", scaleway.Tag(scaleway.TagNodeClass, "nc"), scaleway.Tag(scaleway.TagPhase, "spare"))
	f.clk.Step(14 * 24 * time.Hour) // weeks old, paid for the month
	nc := nodeClassNamed("nc")
	list := f.gc.Servers
	f.gc.Servers = func(ctx context.Context) (inventory.Listing, error) {
		// The claim appears and takes the spare while the sweep runs.
		if err := f.gc.Kube.Create(ctx, claim("taker", "")); err != nil {
			t.Fatal(err)
		}
		taken, err := f.gc.Spares.Take(ctx, zone, srv.OfferName, catalog.BillingMonthly, nc, "taker", "pool")
		if err != nil || taken == nil {
			t.Fatalf("the test could not take the spare: %v %v", taken, err)
		}
		return list(ctx)
	}
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, ok := f.sim.Server(srv.ID)
	if !ok || got.Status == string(baremetal.ServerStatusDeleting) {
		t.Fatal("the collector released a spare a NodeClaim had just taken")
	}
	tags := scaleway.ParseTags(got.Tags)
	if tags[scaleway.TagNodeClaim] != "taker" || tags[scaleway.TagPhase] != "ordered" {
		t.Fatalf("the collector took the spare back from its NodeClaim: %v", got.Tags)
	}
}

// The grace counts from the last change of hands: a spare taken a minute
// ago by a NodeClaim the API server does not show (yet) is left alone,
// however old the server; once the grace has passed it is collected.
func TestGraceCountsFromTheTakeNotTheServersCreation(t *testing.T) {
	f := setup(t, nodeClassNamed("nc"))
	srv := f.order(t, scaleway.Tag(scaleway.TagNodeClass, "nc"), scaleway.Tag(scaleway.TagPhase, "spare"), "order=1")
	f.clk.Step(30 * 24 * time.Hour)
	if _, err := f.api.EditTags(context.Background(), zone, srv.ID, func(tags []string) ([]string, bool) {
		tags, _ = scaleway.SetTagIn(tags, scaleway.TagNodeClaim, "new")
		return install.SetPhaseIn(tags, install.PhaseOrdered, f.clk.Now().Add(-time.Minute)), true
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !f.live(t)[srv.ID] {
		t.Fatal("a server taken a minute ago was collected: the grace counted from its creation")
	}
	f.clk.Step(10 * time.Minute)
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.live(t)[srv.ID] {
		t.Fatal("a server of a gone NodeClaim was kept after the grace (the test can fail)")
	}
}

// The listing may be stale: it shows a server of a gone NodeClaim as it was
// before a NodeClaim took it. The release reads the server afresh and
// finds that it changed hands since (its phase-since moved): left alone.
func TestAReleaseChecksTheFreshServerAgain(t *testing.T) {
	f := setup(t)
	srv := f.order(t, scaleway.Tag(scaleway.TagNodeClaim, "n2"), "order=1")
	f.clk.Step(time.Hour)
	list := f.gc.Servers
	f.gc.Servers = func(ctx context.Context) (inventory.Listing, error) {
		srvs, err := list(ctx)
		// The server changes hands right after the listing (the same name
		// keeps the tag check of Release from seeing it).
		if _, terr := f.api.EditTags(ctx, zone, srv.ID, func(tags []string) ([]string, bool) {
			return install.SetPhaseIn(tags, install.PhaseOrdered, f.clk.Now()), true
		}); terr != nil {
			t.Fatal(terr)
		}
		return srvs, err
	}
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !f.live(t)[srv.ID] {
		t.Fatal("released from a stale listing: the server changed hands since")
	}
}

// rescueKeys records whether the sweep removed the rescue key.
type rescueKeys struct{ calls int }

func (r *rescueKeys) UnregisterUnused(ctx context.Context, inUse func(context.Context) (bool, error)) (bool, error) {
	r.calls++
	used, err := inUse(ctx)
	return !used, err
}

// One zone that cannot be listed stops nothing elsewhere: a spare in a
// healthy zone still goes before its month renews, while the servers of
// the failed zone, unseen, are left alone, and so is the rescue key (a
// server of that zone may be logging into rescue). The zone is counted.
func TestOneUnlistableZoneStopsNoSpareExpiryElsewhere(t *testing.T) {
	f := setup(t, nodeClassNamed("nc", "fr-par-1", string(zone)))
	keys := &rescueKeys{}
	f.gc.RescueKeys = keys
	f.gc.Unlisted = NewUnlistedCounter(prometheus.NewRegistry())
	expiring := f.orderIn(t, zone, "monthly", scaleway.Tag(scaleway.TagNodeClass, "nc"), scaleway.Tag(scaleway.TagPhase, "spare"))
	unseen := f.orderIn(t, "fr-par-1", "hourly", scaleway.Tag(scaleway.TagNodeClass, "nc"), scaleway.Tag(scaleway.TagNodeClaim, "gone"))
	f.clk.SetTime(inRenewalMargin(f.clk.Now())) // the spare's paid month ends
	f.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Method: "GET", Path: `/zones/fr-par-1/servers$`, Status: 503, Times: 100})
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatalf("a sweep that listed a zone failed: %v", err)
	}
	live := f.live(t)
	if live[expiring.ID] {
		t.Fatal("a spare in a healthy zone was kept into a new month because another zone could not be listed")
	}
	if !live[unseen.ID] {
		t.Fatal("a server of the zone that could not be listed was released")
	}
	if keys.calls != 0 {
		t.Fatal("the rescue key was removed from a listing that missed a zone")
	}
	if got := testutil.ToFloat64(f.gc.Unlisted.WithLabelValues("fr-par-1")); got != 1 {
		t.Errorf("unlisted zones{fr-par-1} = %v, want 1", got)
	}
}

// Two servers for one NodeClaim whose own server is not in the listing (a
// zone failed): the one to keep may be the unseen one, so both listed
// servers wait for a complete listing.
func TestDuplicatesWaitForACompleteListing(t *testing.T) {
	f := setup(t, nodeClassNamed("nc", "fr-par-1", string(zone)))
	first := f.orderIn(t, zone, "hourly", scaleway.Tag(scaleway.TagNodeClaim, "dup"), "order=1")
	second := f.orderIn(t, zone, "hourly", scaleway.Tag(scaleway.TagNodeClaim, "dup"), "order=2")
	if err := f.gc.Kube.Create(context.Background(), claim("dup", "")); err != nil {
		t.Fatal(err)
	}
	f.clk.Step(11 * time.Minute)
	fault := f.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Method: "GET", Path: `/zones/fr-par-1/servers$`, Status: 503, Times: 100})
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if live := f.live(t); !live[first.ID] || !live[second.ID] {
		t.Fatalf("a duplicate was ended from a listing that missed a zone: %v", live)
	}
	f.sim.RemoveFault(fault)
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if live := f.live(t); !live[first.ID] || live[second.ID] {
		t.Fatalf("with every zone listed, the newer duplicate should go: %v", live)
	}
}
