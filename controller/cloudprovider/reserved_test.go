package cloudprovider_test

import (
	"strings"
	"testing"
	"time"

	"github.com/scaleway/scaleway-sdk-go/scw"
	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/reservation"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// spare orders a monthly server of offer in fr-par-2 tagged as the keeper
// leaves a spare of the env's NodeClass.
func (e *env) spare(offer string) string { return e.spareBilled(offer, "monthly") }

// spareBilled is spare paid by period (an hourly one is a warm-pool spare).
func (e *env) spareBilled(offer, period string) string {
	e.t.Helper()
	id, ok := e.w.Sim.OfferID("fr-par-2", offer, period)
	if !ok {
		e.t.Fatalf("no %s %s", period, offer)
	}
	name := "spare-" + offer + "-" + string(rune('a'+len(e.w.Sim.Servers())))
	order := scaleway.Tag("test/order", name)
	tags := append(e.p.Inventory.Owner.Tags(), scaleway.Tag(scaleway.TagNodeClass, e.nc.Name), order)
	srv, _, err := e.p.API.CreateServer(e.ctx, scaleway.CreateServerRequest{Zone: scw.ZoneFrPar2, OfferID: id, Name: name,
		Tags: install.SetPhaseIn(tags, install.PhaseSpare, time.Now()), IdempotencyTag: order})
	if err != nil {
		e.t.Fatal(err)
	}
	return srv.ID
}

// spareListings counts the listings of spares (by the reserved offerings'
// cache or a Take).
func (e *env) spareListings() int {
	n := 0
	for _, c := range e.w.Sim.Calls() {
		if c.Method == "GET" && strings.HasSuffix(c.Path, "/servers") && strings.Contains(c.Query, "phase%3Dspare") {
			n++
		}
	}
	return n
}

func reservedOffering(its []*cloudprovider.InstanceType, offer string) (*cloudprovider.Offering, *cloudprovider.Offering) {
	var reserved, onDemand *cloudprovider.Offering
	for _, it := range its {
		if it.Name != offer {
			continue
		}
		for _, of := range it.Offerings {
			if of.Zone() != "fr-par-2" || !of.Requirements.Get(catalog.LabelBillingPeriod).Has("monthly") {
				continue
			}
			if of.CapacityType() == karpv1.CapacityTypeReserved {
				reserved = of
			} else {
				onDemand = of
			}
		}
	}
	return reserved, onDemand
}

func reservedOnly(id string) []karpv1.NodeSelectorRequirementWithMinValues {
	return []karpv1.NodeSelectorRequirementWithMinValues{
		{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeReserved}},
		{Key: reservation.Label, Operator: corev1.NodeSelectorOpIn, Values: []string{id}},
	}
}

// Spares are reserved offerings (near-zero price, their count as capacity,
// one listing for many GetInstanceTypes); a reserved claim takes one without
// ordering and its server is labelled reserved by Create, Get and List; a
// reserved claim that finds the spare gone (taken behind the cache's back)
// gets InsufficientCapacity, orders nothing, and the offering turns
// unavailable.
func TestSparesAreReservedOfferings(t *testing.T) {
	e := startEnv(t, nil)
	e.updateNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) { nc.Spec.Billing.Periods = []string{"monthly"} })
	offer := "EM-A215R-HDD"
	if r, _ := reservedOffering(e.instanceTypes(), offer); r != nil {
		t.Fatalf("a reserved offering without any spare: %+v", r)
	}
	e.spare(offer)
	e.spare(offer)
	e.p.CloudProvider.Reservations.Invalidate(scw.ZoneFrPar2) // the spares were made behind the cache's back
	before := e.spareListings()
	var its []*cloudprovider.InstanceType
	for range 10 {
		its = e.instanceTypes()
	}
	if n := e.spareListings() - before; n != 1 {
		t.Fatalf("10 GetInstanceTypes listed spares %d times, want 1", n)
	}
	t.Logf("10 GetInstanceTypes: %d spare listing", e.spareListings()-before)
	r, od := reservedOffering(its, offer)
	if r == nil || od == nil {
		t.Fatalf("no reserved offering for the two spares of %s", offer)
	}
	id := reservation.ID(e.nc.Name, "fr-par-2", offer, catalog.BillingMonthly)
	if !r.Available || r.ReservationCapacity != 2 || r.ReservationID() != id || r.Price != od.Price/reservation.PriceDivisor {
		t.Fatalf("reserved offering: available %v capacity %d id %q price %v (on-demand %v)", r.Available, r.ReservationCapacity, r.ReservationID(), r.Price, od.Price)
	}
	for _, it := range its {
		for _, of := range it.Offerings {
			if of.CapacityType() != karpv1.CapacityTypeReserved && of.Requirements.Get(reservation.Label).Operator() != corev1.NodeSelectorOpDoesNotExist {
				t.Fatalf("on-demand offering of %s without %s DoesNotExist: %v", it.Name, reservation.Label, of.Requirements)
			}
		}
	}

	// A reserved claim takes a spare: no order, labelled reserved everywhere.
	first := e.nodeClaim(reservedOnly(id)...)
	calls := len(e.w.Sim.Calls())
	got, err := e.p.CloudProvider.Create(e.ctx, first)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	var made []string
	for _, c := range e.w.Sim.Calls()[calls:] {
		made = append(made, c.Method+" "+c.Path[strings.LastIndex(c.Path, "/zones/")+len("/zones/"):])
	}
	t.Logf("Create from a reservation: %d API calls: %v", len(made), made)
	if n := e.creates(first.Name); n != 0 {
		t.Fatalf("%d orders for a reserved claim", n)
	}
	if got.Labels[karpv1.CapacityTypeLabelKey] != karpv1.CapacityTypeReserved || got.Labels[reservation.Label] != id ||
		got.Labels[corev1.LabelInstanceTypeStable] != offer {
		t.Fatalf("Create's labels %v: want capacity type reserved, %s=%s", got.Labels, reservation.Label, id)
	}
	again, err := e.p.CloudProvider.Get(e.ctx, got.Status.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	list, err := e.p.CloudProvider.List(e.ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("List: %d, %v", len(list), err)
	}
	for _, nc := range []*karpv1.NodeClaim{again, list[0]} {
		if nc.Labels[karpv1.CapacityTypeLabelKey] != karpv1.CapacityTypeReserved || nc.Labels[reservation.Label] != id {
			t.Fatalf("Get/List labels %v disagree with Create's", nc.Labels)
		}
	}
	if r, _ := reservedOffering(e.instanceTypes(), offer); r == nil || r.ReservationCapacity != 1 {
		t.Fatalf("after a take: reserved offering %+v, want capacity 1 (the cache is dropped on a take)", r)
	}

	// The last spare goes behind the cache's back (another writer).
	for _, s := range e.w.Sim.Servers() {
		if scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagPhase, string(install.PhaseSpare))) {
			if _, err := e.p.API.EditTags(e.ctx, scw.ZoneFrPar2, s.ID, func(tags []string) ([]string, bool) {
				return install.SetPhaseIn(tags, install.PhaseOrdered, time.Now()), true
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	second := e.nodeClaim(reservedOnly(id)...)
	if _, err := e.p.CloudProvider.Create(e.ctx, second); !cloudprovider.IsInsufficientCapacityError(err) {
		t.Fatalf("Create with the reservation exhausted = %v, want InsufficientCapacity", err)
	}
	if n := e.creates(second.Name); n != 0 {
		t.Fatalf("%d orders for a reserved claim whose reservation is exhausted", n)
	}
	if r, _ := reservedOffering(e.instanceTypes(), offer); r == nil || r.Available || r.ReservationCapacity != 0 {
		t.Fatalf("exhausted reservation offered as %+v, want unavailable with capacity 0", r)
	}
	// A claim that also allows on-demand orders as before.
	third := e.nodeClaim(karpv1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{offer}})
	if got, err := e.p.CloudProvider.Create(e.ctx, third); err != nil || got.Labels[karpv1.CapacityTypeLabelKey] != karpv1.CapacityTypeOnDemand || e.creates(third.Name) != 1 {
		t.Fatalf("on-demand fallback: %v (labels %v), %d orders", err, got, e.creates(third.Name))
	}
}

// A listing that fails gives no reserved offering and no error: Karpenter
// keeps scheduling on-demand.
func TestSpareListingFaultHidesReservedOfferings(t *testing.T) {
	e := startEnv(t, nil)
	e.updateNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) { nc.Spec.Billing.Periods = []string{"monthly"} })
	e.spare("EM-A215R-HDD")
	e.p.CloudProvider.Reservations.Invalidate(scw.ZoneFrPar2)
	e.w.Sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Method: "GET", Path: `/servers$`, Status: 503})
	if r, od := reservedOffering(e.instanceTypes(), "EM-A215R-HDD"); r != nil || od == nil {
		t.Fatalf("with the spare listing failing: reserved %+v, on-demand %+v; want no reserved offering, the on-demand one", r, od)
	}
}

// Two reserved claims race for one spare (the cache counted two): one takes
// it, the other gets InsufficientCapacity; neither orders, the spare is
// taken once.
func TestTwoReservedCreatesRaceForOneSpare(t *testing.T) {
	e := startEnv(t, nil)
	e.updateNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) { nc.Spec.Billing.Periods = []string{"monthly"} })
	offer := "EM-A215R-HDD"
	// An hourly spare of the offer (a warm-pool one), older: not the
	// monthly reservation's, never taken for it.
	hourly := e.spareBilled(offer, "hourly")
	kept := e.spare(offer)
	gone := e.spare(offer)
	e.p.CloudProvider.Reservations.Invalidate(scw.ZoneFrPar2)
	if r, _ := reservedOffering(e.instanceTypes(), offer); r == nil || r.ReservationCapacity != 2 {
		t.Fatalf("reserved offering %+v, want capacity 2", r)
	}
	if err := e.w.Sim.ForceStatus(gone, "deleting"); err != nil { // deleted in the console: the cache still counts it
		t.Fatal(err)
	}
	id := reservation.ID(e.nc.Name, "fr-par-2", offer, catalog.BillingMonthly)
	claims := []*karpv1.NodeClaim{e.nodeClaim(reservedOnly(id)...), e.nodeClaim(reservedOnly(id)...)}
	errs := make([]error, len(claims))
	got := make([]*karpv1.NodeClaim, len(claims))
	done := make(chan int)
	for i := range claims {
		go func() {
			got[i], errs[i] = e.p.CloudProvider.Create(e.ctx, claims[i])
			done <- i
		}()
	}
	<-done
	<-done
	won, lost := 0, 0
	for i := range claims {
		switch {
		case errs[i] == nil && got[i].Status.ProviderID == scaleway.ProviderID(scw.ZoneFrPar2, kept):
			won++
		case cloudprovider.IsInsufficientCapacityError(errs[i]):
			lost++
		default:
			t.Fatalf("claim %d: %v, %v", i, got[i], errs[i])
		}
		if n := e.creates(claims[i].Name); n != 0 {
			t.Fatalf("claim %d ordered %d servers", i, n)
		}
	}
	if won != 1 || lost != 1 {
		t.Fatalf("%d took the spare, %d got InsufficientCapacity; want one each", won, lost)
	}
	if s, _ := e.w.Sim.Server(hourly); !scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagPhase, string(install.PhaseSpare))) {
		t.Fatalf("the hourly spare was taken for the monthly reservation: %v", s.Tags)
	}
}
