package reservation

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/simapi"
)

const zone = "fr-par-2"

var cluster = identity.Identity{Name: "c1", ID: "uid-c1"}

// simOffers is the simulator's catalogue as spare.Offers: the offer ID a
// server was ordered with says how it is paid.
type simOffers struct{ sim *scwsim.Sim }

func (o simOffers) Offer(zone, name string, b catalog.BillingPeriod) (*baremetal.Offer, bool) {
	id, ok := o.sim.OfferID(zone, name, string(b))
	return &baremetal.Offer{ID: id, Name: name}, ok
}

// Refreshed: the simulator's offers are the live ones.
func (o simOffers) Refreshed(string) bool { return true }

type fixture struct {
	t     *testing.T
	sim   *scwsim.Sim
	api   *scaleway.Client
	clock *clocktesting.FakeClock
	cache *Cache
}

func setup(t *testing.T) *fixture {
	t.Helper()
	// No retries: a fault is seen at once.
	sim, api := simapi.Start(t, zone, func(c *scaleway.Config) {
		c.Retry = scaleway.RetryPolicy{MaxAttempts: 1, ThrottleWait: time.Millisecond}
	})
	_ = v1alpha1.SchemeGroupVersion
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()
	owner := &identity.Owner{Identity: cluster, API: api, Kube: kube, Log: testlog.New(t)}
	clock := clocktesting.NewFakeClock(time.Now())
	return &fixture{t: t, sim: sim, api: api, clock: clock,
		cache: &Cache{API: api, Owner: owner, Offers: simOffers{sim}, ManagedBy: cluster.Name, Clock: clock, Log: testlog.New(t)}}
}

// server orders offer (billing period) tagged for nodeClass in phase.
func (f *fixture) server(nodeClass, offer, period string, phase install.Phase) string {
	f.t.Helper()
	id, ok := f.sim.OfferID(zone, offer, period)
	if !ok {
		f.t.Fatalf("no %s %s offer", period, offer)
	}
	name := fmt.Sprintf("%s-%d", nodeClass, len(f.sim.Servers()))
	order := scaleway.Tag("test/order", name)
	tags := append(cluster.Tags(), scaleway.Tag(scaleway.TagNodeClass, nodeClass), order)
	tags = install.SetPhaseIn(tags, phase, time.Now())
	srv, _, err := f.api.CreateServer(context.Background(), scaleway.CreateServerRequest{Zone: zone, OfferID: id, Name: name,
		Tags: tags, IdempotencyTag: order})
	if err != nil {
		f.t.Fatal(err)
	}
	return srv.ID
}

// lists counts the listings of spares (CreateServer lists by its own tag).
func (f *fixture) lists() int {
	n := 0
	for _, c := range f.sim.Calls() {
		if c.Method == "GET" && strings.HasSuffix(c.Path, "/servers") && strings.Contains(c.Query, "phase%3Dspare") {
			n++
		}
	}
	return n
}

func (f *fixture) groups(nodeClass string) string {
	var parts []string
	for _, g := range f.cache.Groups(context.Background(), nodeClass, []string{zone}) {
		parts = append(parts, fmt.Sprintf("%s/%s/%s=%d", g.Offer, g.Zone, g.Billing, g.Count))
	}
	return strings.Join(parts, " ")
}

// Every spare of the NodeClass that can be taken counts, grouped by offer
// and billing period; nodes, other NodeClasses' spares and spares being
// deleted, in error or never delivered do not.
func TestGroupsCountTheNodeClassSparesThatCanBeTaken(t *testing.T) {
	f := setup(t)
	f.server("a", "EM-A215R-HDD", "monthly", install.PhaseSpare)
	f.server("a", "EM-A215R-HDD", "monthly", install.PhaseSpare)
	f.server("a", "EM-A215R-HDD", "hourly", install.PhaseSpare) // a warm-pool hourly spare
	f.server("a", "EM-A215R-HDD", "monthly", install.PhaseOrdered)
	f.server("b", "EM-A215R-HDD", "monthly", install.PhaseSpare)
	for _, status := range []string{"deleting", "error", "out_of_stock"} {
		if err := f.sim.ForceStatus(f.server("a", "EM-A215R-HDD", "monthly", install.PhaseSpare), status); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := f.groups("a"), "EM-A215R-HDD/fr-par-2/hourly=1 EM-A215R-HDD/fr-par-2/monthly=2"; got != want {
		t.Fatalf("groups of a: %q, want %q", got, want)
	}
	if got, want := f.groups("b"), "EM-A215R-HDD/fr-par-2/monthly=1"; got != want {
		t.Fatalf("groups of b: %q, want %q", got, want)
	}
}

// A quarantined spare (its last install failed because of the server) is
// no reserved capacity: offered at a near-zero price it would be picked
// first by every scheduling pass and fail every NodeClaim that took it.
func TestQuarantinedSparesAreNotOffered(t *testing.T) {
	f := setup(t)
	f.server("a", "EM-A215R-HDD", "monthly", install.PhaseSpare)
	sick := f.server("a", "EM-A215R-HDD", "monthly", install.PhaseSpare)
	if _, err := f.api.EditTags(context.Background(), zone, sick, func(tags []string) ([]string, bool) {
		return scaleway.SetTagIn(tags, spare.TagQuarantine, "imaging.write_failed")
	}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.groups("a"), "EM-A215R-HDD/fr-par-2/monthly=1"; got != want {
		t.Fatalf("groups of a: %q, want %q (the quarantined spare left out)", got, want)
	}
}

// One listing per NodeClass and zone per TTL; Invalidate (a spare taken,
// kept or released here) lists again at the next call; Exhausted offers the
// group with no capacity until then.
func TestCacheListsOncePerTTLAndAfterAChange(t *testing.T) {
	f := setup(t)
	f.server("a", "EM-A215R-HDD", "monthly", install.PhaseSpare)
	before := f.lists()
	for range 5 {
		if got := f.groups("a"); got != "EM-A215R-HDD/fr-par-2/monthly=1" {
			t.Fatalf("groups %q", got)
		}
	}
	if n := f.lists() - before; n != 1 {
		t.Fatalf("5 calls listed %d times, want 1", n)
	}
	f.server("a", "EM-A215R-HDD", "monthly", install.PhaseSpare) // kept elsewhere: seen after the TTL
	if got := f.groups("a"); got != "EM-A215R-HDD/fr-par-2/monthly=1" {
		t.Fatalf("within the TTL: %q, want the cached count", got)
	}
	f.clock.Step(DefaultTTL)
	if got := f.groups("a"); got != "EM-A215R-HDD/fr-par-2/monthly=2" {
		t.Fatalf("after the TTL: %q, want 2", got)
	}
	f.cache.Exhausted("a", zone, "EM-A215R-HDD", catalog.BillingMonthly)
	if got := f.groups("a"); got != "EM-A215R-HDD/fr-par-2/monthly=0" {
		t.Fatalf("exhausted: %q, want 0 until the next listing", got)
	}
	f.cache.Invalidate("nl-ams-1")
	if got := f.groups("a"); got != "EM-A215R-HDD/fr-par-2/monthly=0" {
		t.Fatalf("another zone's change: %q, want still 0", got)
	}
	f.cache.Invalidate(zone)
	if got := f.groups("a"); got != "EM-A215R-HDD/fr-par-2/monthly=2" {
		t.Fatalf("after Invalidate: %q, want 2", got)
	}
	if n := f.lists() - before; n != 3 {
		t.Fatalf("%d listings, want 3 (first, after the TTL, after Invalidate)", n)
	}
}

// Listings lag behind writes: the first listing after this process kept a
// spare (Invalidate) may still show the server as it was. That count is
// kept ErrorTTL, not a whole TTL, for DefaultSettle after the change, so the
// spare is offered within seconds once listings show it; afterwards the TTL
// applies again.
func TestListingJustAfterAChangeIsKeptBriefly(t *testing.T) {
	f := setup(t)
	f.server("a", "EM-A215R-HDD", "monthly", install.PhaseSpare)
	id := f.server("a", "EM-A215R-HDD", "monthly", install.PhaseImaging)
	if got := f.groups("a"); got != "EM-A215R-HDD/fr-par-2/monthly=1" {
		t.Fatalf("groups %q", got)
	}
	// Kept here; the listing that follows does not show it yet.
	f.cache.Invalidate(zone)
	if got := f.groups("a"); got != "EM-A215R-HDD/fr-par-2/monthly=1" {
		t.Fatalf("the lagging listing: %q", got)
	}
	// The listings catch up.
	if _, err := f.api.EditTags(context.Background(), zone, id, func(tags []string) ([]string, bool) {
		return install.SetPhaseIn(tags, install.PhaseSpare, time.Now()), true
	}); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(DefaultErrorTTL)
	if got := f.groups("a"); got != "EM-A215R-HDD/fr-par-2/monthly=2" {
		t.Fatalf("%s after the change: %q, want the kept spare offered", DefaultErrorTTL, got)
	}
	// Settled: one listing per TTL again.
	f.clock.Step(DefaultSettle)
	_ = f.groups("a")
	before := f.lists()
	f.clock.Step(DefaultErrorTTL)
	_ = f.groups("a")
	if n := f.lists() - before; n != 0 {
		t.Fatalf("%d listings within the TTL once settled, want 0", n)
	}
}

// A listing that fails (5xx, 429) gives no reserved offering, never the
// last count; it is tried again after the error TTL.
func TestListingFaultsGiveNoReservedOfferings(t *testing.T) {
	for _, fault := range []scwsim.Fault{
		{Kind: scwsim.FaultStatus, Method: "GET", Path: `/servers$`, Status: 503},
		{Kind: scwsim.FaultRateLimit, Method: "GET", Path: `/servers$`},
	} {
		t.Run(string(fault.Kind), func(t *testing.T) {
			f := setup(t)
			f.server("a", "EM-A215R-HDD", "monthly", install.PhaseSpare)
			if got := f.groups("a"); got != "EM-A215R-HDD/fr-par-2/monthly=1" {
				t.Fatalf("groups %q", got)
			}
			f.clock.Step(DefaultTTL)
			id := f.sim.MustInject(fault)
			if got := f.groups("a"); got != "" {
				t.Fatalf("with the API failing: %q, want no groups", got)
			}
			if f.sim.FaultHits(id) == 0 {
				t.Fatal("the fault was never hit")
			}
			f.sim.RemoveFault(id)
			if got := f.groups("a"); got != "" {
				t.Fatalf("within the error TTL: %q, want still none", got)
			}
			f.clock.Step(DefaultErrorTTL)
			if got := f.groups("a"); got != "EM-A215R-HDD/fr-par-2/monthly=1" {
				t.Fatalf("after the error TTL: %q, want 1", got)
			}
		})
	}
}

func TestIDIsALabelValueSharedByNodePools(t *testing.T) {
	if got := ID("default", "fr-par-2", "EM-A215R-HDD", catalog.BillingMonthly); got != "default.fr-par-2.em-a215r-hdd.monthly" {
		t.Fatalf("ID %q", got)
	}
	long := ID(strings.Repeat("n", 60), "fr-par-2", "EM-A215R-HDD", catalog.BillingMonthly)
	if len(long) > 63 || long == ID(strings.Repeat("m", 60), "fr-par-2", "EM-A215R-HDD", catalog.BillingMonthly) {
		t.Fatalf("long IDs %q: want hashed, 63 characters at most, distinct", long)
	}
}

// Offerings adds one reserved offering per group on its offer's instance
// type, priced from the on-demand offering, and leaves the catalogue's
// instance types untouched.
func TestOfferingsFromGroups(t *testing.T) {
	cat := catalog.New(catalog.Options{})
	its, err := cat.InstanceTypes(context.Background(), catalog.Filter{Zones: []string{zone}, BillingPeriods: catalog.BillingPeriods})
	if err != nil {
		t.Fatal(err)
	}
	var it *cloudprovider.InstanceType
	for _, x := range its {
		if x.Name == "EM-A215R-HDD" {
			it = x
		}
	}
	if it == nil {
		t.Fatal("no EM-A215R-HDD in the snapshot")
	}
	for _, of := range append(cloudprovider.Offerings{{Requirements: it.Requirements}}, it.Offerings...) {
		if of.Requirements.Get(Label).Operator() != "DoesNotExist" {
			t.Fatalf("catalogue offering %v: want %s DoesNotExist", of.Requirements, Label)
		}
	}
	groups := []Group{
		{NodeClass: "a", Zone: zone, Offer: "EM-A215R-HDD", Billing: catalog.BillingMonthly, Count: 2},
		{NodeClass: "a", Zone: zone, Offer: "EM-A215R-HDD", Billing: catalog.BillingHourly, Count: 0},
		{NodeClass: "a", Zone: "nl-ams-1", Offer: "EM-A215R-HDD", Billing: catalog.BillingMonthly, Count: 1}, // zone not allowed
		{NodeClass: "a", Zone: zone, Offer: "EM-NOPE", Billing: catalog.BillingMonthly, Count: 1},
	}
	out := Offerings(its, groups)
	if len(out) != len(its) || len(it.Offerings) != 2 || it.Requirements.Get(karpv1.CapacityTypeLabelKey).Has(karpv1.CapacityTypeReserved) {
		t.Fatalf("the catalogue's instance type was modified: %d offerings, requirements %v", len(it.Offerings), it.Requirements)
	}
	var got *cloudprovider.InstanceType
	for _, x := range out {
		if x.Name == "EM-A215R-HDD" {
			got = x
		}
	}
	if !got.Requirements.Get(karpv1.CapacityTypeLabelKey).Has(karpv1.CapacityTypeReserved) || got.Requirements.Get(Label).Len() != 2 {
		t.Fatalf("instance type requirements %v: want capacity type reserved allowed", got.Requirements)
	}
	reserved := map[string]*cloudprovider.Offering{}
	for _, of := range got.Offerings {
		if of.CapacityType() == karpv1.CapacityTypeReserved {
			reserved[of.Requirements.Get(catalog.LabelBillingPeriod).Any()] = of
		}
	}
	if len(reserved) != 2 {
		t.Fatalf("%d reserved offerings, want 2 (monthly and hourly in %s)", len(reserved), zone)
	}
	m := reserved["monthly"]
	od := onDemand(got.Offerings, zone, catalog.BillingMonthly)
	if !m.Available || m.ReservationCapacity != 2 || m.ReservationID() != "a.fr-par-2.em-a215r-hdd.monthly" ||
		m.Zone() != zone || m.Price != od.Price/PriceDivisor || m.Price <= 0 {
		t.Fatalf("monthly reserved offering %+v (on-demand price %v)", m, od.Price)
	}
	if h := reserved["hourly"]; h.Available || h.ReservationCapacity != 0 {
		t.Fatalf("an exhausted group is offered as available: %+v", h)
	} else if hod := onDemand(got.Offerings, zone, catalog.BillingHourly); h.Price != hod.Price {
		// An hourly spare (a warm-pool server) bills by the hour: not free to consolidation.
		t.Fatalf("hourly reserved offering priced %v, want its on-demand price %v", h.Price, hod.Price)
	}
}

// Get and List label a server taken from a reservation as Create did.
func TestLabelsFollowTheServerTag(t *testing.T) {
	srv := &baremetal.Server{Tags: []string{scaleway.Tag(scaleway.TagReservation, "a.fr-par-2.em-a215r-hdd.monthly")}}
	if l := Labels(srv); l[karpv1.CapacityTypeLabelKey] != karpv1.CapacityTypeReserved || l[Label] != "a.fr-par-2.em-a215r-hdd.monthly" {
		t.Fatalf("labels %v", l)
	}
	if l := Labels(&baremetal.Server{}); l[karpv1.CapacityTypeLabelKey] != karpv1.CapacityTypeOnDemand || len(l) != 1 {
		t.Fatalf("labels %v", l)
	}
}
