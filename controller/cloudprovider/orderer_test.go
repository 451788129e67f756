package cloudprovider

// Unit tests of the orderer's three paths (reserved, spare, new server) and
// of each error class of an order, on fakes of its parts: no simulated
// world, no kube-apiserver, milliseconds. The world tests in this package
// (reserved_test.go, cloudprovider_test.go, inflight_test.go, light_test.go)
// check the same paths end to end.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spendlimit"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/eventlog"
)

const fakeZone = "fr-par-2"

// fakeOffers is an offerBook that sells every offer name in every zone
// and period except those in missing, and records what is set aside.
type fakeOffers struct {
	missing map[string]bool
	marked  []string // "offer/billing/reason"
}

func (f *fakeOffers) Offer(zone, name string, billing catalog.BillingPeriod) (*baremetal.Offer, bool) {
	if f.missing[name] {
		return nil, false
	}
	return &baremetal.Offer{ID: "id-" + name, Name: name, SubscriptionPeriod: baremetal.OfferSubscriptionPeriod(billing)}, true
}

func (f *fakeOffers) MarkUnavailable(zone, name string, billing catalog.BillingPeriod, reason catalog.UnavailableReason) {
	f.marked = append(f.marked, fmt.Sprintf("%s/%s/%s", name, billing, reason))
}

// fakeSpares is a spareTaker holding spares by offer name (Take) and by
// reservation ID (TakeReserved); err fails every take.
type fakeSpares struct {
	byOffer       map[string]*baremetal.Server
	byReservation map[string]*baremetal.Server
	err           error
	takes         []string // "offer/billing" or "reserved:id"
}

func (f *fakeSpares) Take(_ context.Context, _ scw.Zone, offer string, billing catalog.BillingPeriod, _ *v1alpha1.ScalewayElasticMetalNodeClass, _, _ string) (*baremetal.Server, error) {
	f.takes = append(f.takes, offer+"/"+string(billing))
	if f.err != nil {
		return nil, f.err
	}
	srv := f.byOffer[offer]
	delete(f.byOffer, offer)
	return srv, nil
}

func (f *fakeSpares) TakeReserved(_ context.Context, _ scw.Zone, _ string, _ catalog.BillingPeriod, _ *v1alpha1.ScalewayElasticMetalNodeClass, _, _, id string) (*baremetal.Server, error) {
	f.takes = append(f.takes, "reserved:"+id)
	if f.err != nil {
		return nil, f.err
	}
	srv := f.byReservation[id]
	delete(f.byReservation, id)
	return srv, nil
}

// fakeReservations records the reservations found exhausted.
type fakeReservations struct{ exhausted []string }

func (f *fakeReservations) Exhausted(_, _, offer string, billing catalog.BillingPeriod) {
	f.exhausted = append(f.exhausted, offer+"/"+string(billing))
}

// fakeServers is a serverOrderer: an order of an offer named in errs fails
// with its error, any other is delivered as server "srv-<offer>".
type fakeServers struct {
	errs   map[string]error
	orders []scaleway.CreateServerRequest
}

func (f *fakeServers) CreateServer(_ context.Context, req scaleway.CreateServerRequest) (*baremetal.Server, bool, error) {
	f.orders = append(f.orders, req)
	name := strings.TrimPrefix(req.OfferID, "id-")
	if err := f.errs[name]; err != nil {
		return nil, false, err
	}
	return &baremetal.Server{ID: "srv-" + name, Zone: req.Zone, OfferName: name, Tags: req.Tags}, true, nil
}

// fakeLimits is a spendSession refusing the offers in over.
type fakeLimits struct {
	over     map[string]bool
	ordered  []string
	inFlight []string // "tag offer"
}

func (f *fakeLimits) Check(_ string, offer *baremetal.Offer) error {
	if f.over[offer.Name] {
		return &spendlimit.ExceededError{NodeClass: "nc", Limit: spendlimit.LimitHourly, Max: 1, Current: 1, Order: 0.5}
	}
	return nil
}

func (f *fakeLimits) Ordered(srv *baremetal.Server, _ string, _ *baremetal.Offer) {
	f.ordered = append(f.ordered, srv.ID)
}

func (f *fakeLimits) InFlight(tag, _ string, offer *baremetal.Offer) {
	f.inFlight = append(f.inFlight, tag+" "+offer.Name)
}

// orderFixture is an orderer on fakes for NodeClaim "claim-1" of NodeClass "nc".
type orderFixture struct {
	offers   *fakeOffers
	spares   *fakeSpares
	resv     *fakeReservations
	servers  *fakeServers
	limits   *fakeLimits
	rec      *eventlog.Recorder
	setAside []string
	o        *orderer
}

func newOrderFixture() *orderFixture {
	f := &orderFixture{
		offers:  &fakeOffers{missing: map[string]bool{}},
		spares:  &fakeSpares{byOffer: map[string]*baremetal.Server{}, byReservation: map[string]*baremetal.Server{}},
		resv:    &fakeReservations{},
		servers: &fakeServers{errs: map[string]error{}},
		limits:  &fakeLimits{over: map[string]bool{}},
		rec:     &eventlog.Recorder{},
	}
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "nc"}}
	nc.Spec.Zones = []string{fakeZone}
	nc.Spec.Billing.Periods = []string{"hourly", "monthly"}
	claim := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "claim-1", Labels: map[string]string{karpv1.NodePoolLabelKey: "pool"}}}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.o = &orderer{
		offers: f.offers, spares: f.spares, reservations: f.resv, servers: f.servers, limits: f.limits,
		recorder: f.rec, log: logr.Discard(),
		owner: &identity.Owner{Identity: identity.Identity{Name: "c1", ID: "uid-c1"}},
		setAside: func(nc *v1alpha1.ScalewayElasticMetalNodeClass, zone, offer string, billing catalog.BillingPeriod, _ time.Time) {
			f.setAside = append(f.setAside, offer+"/"+string(billing))
		},
		now:         func() time.Time { return now },
		clusterName: "c1", defaultZone: fakeZone,
		claim: claim, nc: nc,
	}
	return f
}

// offering is a candidate: offer paid by billing in fakeZone, a reserved
// offering of reservation id when id is set.
func offering(offer string, billing catalog.BillingPeriod, id string) candidate {
	labels := map[string]string{
		corev1.LabelTopologyZone:       fakeZone,
		catalog.LabelBillingPeriod:     string(billing),
		karpv1.CapacityTypeLabelKey:    karpv1.CapacityTypeOnDemand,
		corev1.LabelInstanceTypeStable: offer,
	}
	if id != "" {
		labels[karpv1.CapacityTypeLabelKey] = karpv1.CapacityTypeReserved
		labels[catalog.LabelReservationID] = id
	}
	return candidate{
		it:       &cloudprovider.InstanceType{Name: offer},
		offering: &cloudprovider.Offering{Requirements: scheduling.NewLabelRequirements(labels), Available: true},
	}
}

// run orders from the candidates and returns the server's ID ("" when none).
func (f *orderFixture) run(t *testing.T, cands ...candidate) (string, error) {
	t.Helper()
	srv, err := f.o.run(context.Background(), cands)
	if (srv == nil) == (err == nil) {
		t.Fatalf("run = %v, %v: want a server or an error", srv, err)
	}
	if srv == nil {
		return "", err
	}
	return srv.ID, nil
}

func (f *orderFixture) ordered() string {
	var names []string
	for _, o := range f.servers.orders {
		names = append(names, strings.TrimPrefix(o.OfferID, "id-"))
	}
	return strings.Join(names, ",")
}

func want(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}

func TestOrdererReservedSpareIsTakenNeverOrdered(t *testing.T) {
	f := newOrderFixture()
	f.spares.byReservation["r1"] = &baremetal.Server{ID: "spare-1", OfferName: "EM-A"}
	id, err := f.run(t, offering("EM-A", catalog.BillingMonthly, "r1"), offering("EM-B", catalog.BillingHourly, ""))
	if err != nil {
		t.Fatal(err)
	}
	want(t, "server", id, "spare-1")
	want(t, "takes", strings.Join(f.spares.takes, ","), "reserved:r1")
	want(t, "orders", f.ordered(), "")
	want(t, "events", f.rec.Reasons(), "ReusedSpare")
	if !strings.Contains(f.rec.Last().Message, "from reservation r1") {
		t.Errorf("event message %q does not name the reservation", f.rec.Last().Message)
	}
}

func TestOrdererExhaustedReservationFallsBackToTheNextOffering(t *testing.T) {
	f := newOrderFixture()
	id, err := f.run(t, offering("EM-A", catalog.BillingMonthly, "r1"), offering("EM-B", catalog.BillingHourly, ""))
	if err != nil {
		t.Fatal(err)
	}
	want(t, "server", id, "srv-EM-B")
	want(t, "exhausted", strings.Join(f.resv.exhausted, ","), "EM-A/monthly")
	want(t, "events", f.rec.Reasons(), "Ordered")
}

func TestOrdererReservedOnlyNeverOrders(t *testing.T) {
	f := newOrderFixture()
	_, err := f.run(t, offering("EM-A", catalog.BillingMonthly, "r1"))
	if !cloudprovider.IsInsufficientCapacityError(err) || !strings.Contains(err.Error(), reservationExhausted("r1")) {
		t.Fatalf("err = %v, want an InsufficientCapacityError saying reservation r1 is exhausted", err)
	}
	want(t, "orders", f.ordered(), "")
	want(t, "events", f.rec.Reasons(), "")
}

func reservationExhausted(id string) string { return "reservation " + id + " has no spare server left" }

func TestOrdererSpareTakeFailureEndsTheCreate(t *testing.T) {
	for _, c := range []candidate{offering("EM-A", catalog.BillingMonthly, "r1"), offering("EM-A", catalog.BillingMonthly, "")} {
		f := newOrderFixture()
		f.spares.err = errors.New("listing spares: boom")
		_, err := f.run(t, c, offering("EM-B", catalog.BillingHourly, ""))
		if err == nil || cloudprovider.IsInsufficientCapacityError(err) || !strings.Contains(err.Error(), "boom") {
			t.Errorf("%s: err = %v, want the take's error as is", c.offering.CapacityType(), err)
		}
		want(t, "orders", f.ordered(), "")
		want(t, "exhausted", strings.Join(f.resv.exhausted, ","), "")
	}
}

func TestOrdererMonthlySpareIsReused(t *testing.T) {
	f := newOrderFixture()
	f.spares.byOffer["EM-A"] = &baremetal.Server{ID: "spare-1", OfferName: "EM-A"}
	id, err := f.run(t, offering("EM-A", catalog.BillingMonthly, ""))
	if err != nil {
		t.Fatal(err)
	}
	want(t, "server", id, "spare-1")
	want(t, "orders", f.ordered(), "")
	want(t, "events", f.rec.Reasons(), "ReusedSpare")
	if m := f.rec.Last().Message; !strings.Contains(m, "reusing spare monthly server spare-1") {
		t.Errorf("event message %q", m)
	}
}

func TestOrdererHourlyLooksForSparesOnlyInAWarmPool(t *testing.T) {
	f := newOrderFixture()
	f.spares.byOffer["EM-A"] = &baremetal.Server{ID: "spare-1", OfferName: "EM-A"}
	id, err := f.run(t, offering("EM-A", catalog.BillingHourly, ""))
	if err != nil {
		t.Fatal(err)
	}
	want(t, "without a warm pool: server", id, "srv-EM-A")
	want(t, "without a warm pool: takes", strings.Join(f.spares.takes, ","), "")

	f = newOrderFixture()
	f.o.nc.Spec.WarmPool = []v1alpha1.WarmPoolEntry{{Offer: "EM-A", Servers: 1}}
	f.spares.byOffer["EM-A"] = &baremetal.Server{ID: "pool-1", OfferName: "EM-A"}
	id, err = f.run(t, offering("EM-A", catalog.BillingHourly, ""))
	if err != nil {
		t.Fatal(err)
	}
	want(t, "with a warm pool: server", id, "pool-1")
	want(t, "with a warm pool: orders", f.ordered(), "")
}

func TestOrdererNoSpareOrdersWithTheClaimsTags(t *testing.T) {
	f := newOrderFixture()
	id, err := f.run(t, offering("EM-A", catalog.BillingMonthly, ""))
	if err != nil {
		t.Fatal(err)
	}
	want(t, "server", id, "srv-EM-A")
	want(t, "takes", strings.Join(f.spares.takes, ","), "EM-A/monthly")
	want(t, "counted against the limits", strings.Join(f.limits.ordered, ","), "srv-EM-A")
	want(t, "events", f.rec.Reasons(), "Ordered")
	req := f.servers.orders[0]
	claimTag := scaleway.Tag(scaleway.TagNodeClaim, "claim-1")
	want(t, "idempotency tag", req.IdempotencyTag, claimTag)
	want(t, "name", req.Name, "claim-1")
	want(t, "zone", string(req.Zone), fakeZone)
	for _, tag := range []string{claimTag, scaleway.Tag(scaleway.TagNodePool, "pool"), scaleway.Tag(scaleway.TagNodeClass, "nc")} {
		if !scaleway.HasTags(req.Tags, tag) {
			t.Errorf("order tags %v lack %s", req.Tags, tag)
		}
	}
	if req.Match == nil {
		t.Error("the order has no Match: a namesake cluster's server could be taken for it")
	}
}

func TestOrdererOfferMissingFromTheCatalogueIsSkipped(t *testing.T) {
	f := newOrderFixture()
	f.offers.missing["EM-A"] = true
	id, err := f.run(t, offering("EM-A", catalog.BillingHourly, ""), offering("EM-B", catalog.BillingHourly, ""))
	if err != nil {
		t.Fatal(err)
	}
	want(t, "server", id, "srv-EM-B")

	f = newOrderFixture()
	f.offers.missing["EM-A"] = true
	_, err = f.run(t, offering("EM-A", catalog.BillingHourly, ""))
	if !cloudprovider.IsInsufficientCapacityError(err) || !strings.Contains(err.Error(), "no offering of the catalogue matches") {
		t.Fatalf("err = %v", err)
	}
}

func TestOrdererSpendLimitSetsTheOfferingAsideAndTriesTheNext(t *testing.T) {
	f := newOrderFixture()
	f.limits.over["EM-A"] = true
	id, err := f.run(t, offering("EM-A", catalog.BillingHourly, ""), offering("EM-B", catalog.BillingHourly, ""))
	if err != nil {
		t.Fatal(err)
	}
	want(t, "server", id, "srv-EM-B")
	want(t, "set aside", strings.Join(f.setAside, ","), "EM-A/hourly")
	want(t, "orders", f.ordered(), "EM-B")
	want(t, "events", f.rec.Reasons(), "SpendLimitReached,Ordered")
	want(t, "catalogue marks", strings.Join(f.offers.marked, ","), "")

	f = newOrderFixture()
	f.limits.over["EM-A"] = true
	_, err = f.run(t, offering("EM-A", catalog.BillingHourly, ""))
	var exceeded *spendlimit.ExceededError
	if !cloudprovider.IsInsufficientCapacityError(err) || !errors.As(err, &exceeded) {
		t.Fatalf("err = %v, want an InsufficientCapacityError carrying the ExceededError", err)
	}
	want(t, "orders", f.ordered(), "")
}

// TestOrdererOrderErrorClasses: what each class of order failure does to
// the offering, the events, the spend limits and the Create.
func TestOrdererOrderErrorClasses(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		// next: the next offering is ordered; else the Create ends with
		// an error (ice: an InsufficientCapacityError).
		next     bool
		ice      bool
		marked   string
		events   string
		inFlight bool
	}{
		{name: "out of stock", err: &scw.OutOfStockError{Resource: "offer"}, next: true,
			marked: "EM-A/hourly/out_of_stock", events: "OfferingUnavailable,Ordered"},
		{name: "quota", err: &scw.QuotasExceededError{}, next: true,
			marked: "EM-A/hourly/quota", events: "OfferingUnavailable,Ordered"},
		{name: "refused", err: &scaleway.Error{Op: "CreateServer", Class: scaleway.ClassRefused, Err: errors.New("503 refused")}, ice: true,
			marked: "EM-A/hourly/refused", events: "OrderRefused"},
		{name: "offer unknown", err: &scw.ResourceNotFoundError{Resource: "offer"}, ice: true,
			marked: "EM-A/hourly/refused", events: "OrderRefused"},
		{name: "API fault", err: &scaleway.Error{Op: "CreateServer", Class: scaleway.ClassPermission, Err: errors.New("403")},
			inFlight: true},
		{name: "answer lost", err: &scaleway.Error{Op: "CreateServer", Class: scaleway.ClassTimeout, Ambiguous: true, Err: errors.New("timeout")},
			inFlight: true, events: "OrderInFlight"},
		{name: "order in flight", err: fmt.Errorf("%w: sent to %s", scaleway.ErrOrderInFlight, fakeZone),
			inFlight: true, events: "OrderInFlight"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newOrderFixture()
			f.servers.errs["EM-A"] = c.err
			id, err := f.run(t, offering("EM-A", catalog.BillingHourly, ""), offering("EM-B", catalog.BillingHourly, ""))
			switch {
			case c.next:
				if err != nil {
					t.Fatalf("err = %v, want the next offering ordered", err)
				}
				want(t, "server", id, "srv-EM-B")
				want(t, "orders", f.ordered(), "EM-A,EM-B")
			default:
				if err == nil || cloudprovider.IsInsufficientCapacityError(err) != c.ice || !errors.Is(err, c.err) {
					t.Fatalf("err = %v (insufficient capacity: %t), want %v wrapped (insufficient capacity: %t)",
						err, cloudprovider.IsInsufficientCapacityError(err), c.err, c.ice)
				}
				want(t, "orders", f.ordered(), "EM-A")
			}
			want(t, "catalogue marks", strings.Join(f.offers.marked, ","), c.marked)
			want(t, "events", f.rec.Reasons(), c.events)
			inFlight := ""
			if c.inFlight {
				inFlight = scaleway.Tag(scaleway.TagNodeClaim, "claim-1") + " EM-A"
			}
			want(t, "counted in flight", strings.Join(f.limits.inFlight, ","), inFlight)
		})
	}
}

func TestOrdererEveryOfferingUnavailableIsInsufficientCapacity(t *testing.T) {
	f := newOrderFixture()
	f.servers.errs["EM-A"] = &scw.OutOfStockError{}
	f.servers.errs["EM-B"] = &scw.QuotasExceededError{}
	_, err := f.run(t, offering("EM-A", catalog.BillingHourly, ""), offering("EM-B", catalog.BillingMonthly, ""))
	if !cloudprovider.IsInsufficientCapacityError(err) || !scaleway.IsQuotaExceeded(err) {
		t.Fatalf("err = %v, want an InsufficientCapacityError carrying the last offering's quota error", err)
	}
	want(t, "catalogue marks", strings.Join(f.offers.marked, ","), "EM-A/hourly/out_of_stock,EM-B/monthly/quota")
	want(t, "events", f.rec.Reasons(), "OfferingUnavailable,OfferingUnavailable")
	want(t, "types", f.rec.Last().Type, corev1.EventTypeWarning)
}
