package warmpool

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/inventory"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spendlimit"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/eventlog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/simapi"
)

const zone = scw.Zone("fr-par-2")

var c1 = identity.Identity{Name: "c1", ID: "uid-c1"}

type fixture struct {
	sim    *scwsim.Sim
	url    string
	kube   client.Client
	cat    *catalog.Catalog
	keeper *spare.Keeper
	rec    *eventlog.Recorder
	c      *Controller
}

// readyNodeClass is a Ready NodeClass in zone with pool.
func readyNodeClass(pool ...v1alpha1.WarmPoolEntry) *v1alpha1.ScalewayElasticMetalNodeClass {
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "nc"}}
	nc.Spec.Zones = []string{string(zone)}
	nc.Spec.Billing.Periods = []string{"hourly", "monthly"}
	nc.Spec.WarmPool = pool
	for _, typ := range []string{v1alpha1.ConditionTypeCredentialsReady, v1alpha1.ConditionTypeProjectReady, v1alpha1.ConditionTypeImageReady,
		v1alpha1.ConditionTypeJoinConfigReady, v1alpha1.ConditionTypeInstallsHealthy} {
		nc.StatusConditions().SetTrue(typ)
	}
	return nc
}

func setup(t *testing.T, nc *v1alpha1.ScalewayElasticMetalNodeClass, edits ...func(*scwsim.Options)) *fixture {
	sim, api, url := simapi.StartURL(t, zone, edits...)
	_ = v1alpha1.SchemeGroupVersion
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nc).WithStatusSubresource(nc).Build()
	f := &fixture{sim: sim, url: url, kube: kube, rec: &eventlog.Recorder{}}
	f.c = f.controller(t, api)
	return f
}

// controller is a controller as a (re)started process builds it: nothing
// remembered but what the API and the cluster hold.
func (f *fixture) controller(t *testing.T, api *scaleway.Client) *Controller {
	owner := &identity.Owner{Identity: c1, API: api, Kube: f.kube, Log: testlog.New(t)}
	inv := &inventory.Inventory{API: api, Kube: f.kube, Owner: owner, DefaultZone: string(zone), Log: testlog.New(t)}
	f.cat = catalog.New(catalog.Options{Client: api.SDK(), Zones: []scw.Zone{zone}})
	if err := f.cat.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.keeper = &spare.Keeper{API: api, Offers: f.cat, Rescue: &rescue.Dialer{}, Owner: owner, Log: testlog.New(t)}
	return &Controller{Kube: f.kube, API: api, Catalog: f.cat, Servers: inv.Servers, Saw: inv.Saw, Spares: f.keeper,
		Limits: &spendlimit.Limiter{Servers: inv.Servers, Offers: f.cat}, DefaultZone: string(zone),
		Recorder: f.rec, Metrics: NewMetrics(prometheus.NewRegistry()), Log: testlog.New(t)}
}

func (f *fixture) reconcile(t *testing.T) error {
	t.Helper()
	_, err := f.c.Reconcile(context.Background())
	return err
}

func (f *fixture) nodeClass(t *testing.T) *v1alpha1.ScalewayElasticMetalNodeClass {
	t.Helper()
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	if err := f.kube.Get(context.Background(), types.NamespacedName{Name: "nc"}, nc); err != nil {
		t.Fatal(err)
	}
	return nc
}

func (f *fixture) condition(t *testing.T) (metav1.ConditionStatus, string, string) {
	t.Helper()
	c := f.nodeClass(t).StatusConditions().Get(v1alpha1.ConditionTypeWarmPoolReady)
	if c == nil {
		return "", "", ""
	}
	return c.Status, c.Reason, c.Message
}

func (f *fixture) posts(t *testing.T) int {
	t.Helper()
	n, err := f.sim.CountCalls("POST", `/servers$`)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// live lists the simulator's servers not being deleted, in the pool or not.
func (f *fixture) live() (pool, other []scwsim.ServerState) {
	for _, s := range f.sim.Servers() {
		switch {
		case s.Status == string(baremetal.ServerStatusDeleting):
		case scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagWarmPool, "true")):
			pool = append(pool, s)
		default:
			other = append(other, s)
		}
	}
	return pool, other
}

// delivered reconciles until every live pool server is delivered (the
// pre-imager, not the pool, then boots it into rescue).
func (f *fixture) delivered(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a bound for a hung test, not a timing assertion
	for {
		if err := f.reconcile(t); err != nil {
			t.Fatal(err)
		}
		pool, _ := f.live()
		done := len(pool) > 0
		for _, s := range pool {
			done = done && s.Status == string(baremetal.ServerStatusReady)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool not delivered: %+v", pool)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var hourlyEntry = v1alpha1.WarmPoolEntry{Offer: "EM-A116X-SSD", Servers: 2}

// The pool is ordered straight into phase spare with the cluster's and the
// NodeClass's tags, delivered into rescue, kept at its size without a
// second order, and its cost is shown.
func TestPoolIsOrderedDeliveredAndKeptFull(t *testing.T) {
	f := setup(t, readyNodeClass(hourlyEntry))
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if got := f.posts(t); got != 2 {
		t.Fatalf("%d orders, want 2", got)
	}
	if st, reason, _ := f.condition(t); st != metav1.ConditionFalse || reason != ReasonFilling {
		t.Errorf("WarmPoolReady %s/%s while ordering", st, reason)
	}
	f.delivered(t)
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if got := f.posts(t); got != 2 {
		t.Fatalf("%d orders for a full pool, want 2", got)
	}
	pool, _ := f.live()
	for _, s := range pool {
		for _, tag := range append(c1.Tags(), scaleway.Tag(scaleway.TagNodeClass, "nc"), scaleway.Tag(scaleway.TagPhase, string(install.PhaseSpare))) {
			if !scaleway.HasTags(s.Tags, tag) {
				t.Errorf("pool server %s lacks %s: %v", s.ID, tag, s.Tags)
			}
		}
	}
	if st, reason, msg := f.condition(t); st != metav1.ConditionTrue {
		t.Errorf("WarmPoolReady %s/%s: %s", st, reason, msg)
	}
	offer, _ := f.cat.Offer(string(zone), "EM-A116X-SSD", catalog.BillingHourly)
	perHour := 2 * float64(offer.PricePerHour.Units) // whole euros
	perHour += 2 * float64(offer.PricePerHour.Nanos) / 1e9
	if got := testutil.ToFloat64(f.c.Metrics.Hourly.WithLabelValues("nc")); got < perHour-1e-9 || got > perHour+1e-9 {
		t.Errorf("cost %v EUR/h, want %v", got, perHour)
	}
	if got := testutil.ToFloat64(f.c.Metrics.Servers.WithLabelValues("nc", string(zone), "EM-A116X-SSD", "hourly", "ready")); got != 2 {
		t.Errorf("ready pool servers %v", got)
	}
	if !f.rec.Has("WarmPoolOrdered") {
		t.Error("no WarmPoolOrdered event")
	}
}

// An order whose answer was lost, then a controller restart (nothing
// remembered in memory): the slot's server is found, never ordered twice.
func TestLostAnswerAndRestartDoNotOrderTwice(t *testing.T) {
	f := setup(t, readyNodeClass(v1alpha1.WarmPoolEntry{Offer: "EM-A116X-SSD", Servers: 1}))
	f.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultAnswerLost, Method: "POST", Path: `/servers$`, Times: 1})
	_ = f.reconcile(t) // the answer is lost
	_ = f.reconcile(t) // the same process: the order is in flight
	f.c = f.controller(t, simapi.NewClient(t, f.sim, f.url, zone))
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	for slot, n := range f.sim.CreatesByTag(scaleway.TagWarmPoolSlot) {
		if n != 1 {
			t.Errorf("slot %s ordered %d times", slot, n)
		}
	}
	if pool, _ := f.live(); len(pool) != 1 {
		t.Errorf("%d pool servers, want 1", len(pool))
	}
}

// A 5xx on the order is ambiguous: looked for, never ordered again while
// it may have been taken. A bare 429 proves it was not: retried, one order.
func TestServerErrorsAndRateLimitsDoNotOrderTwice(t *testing.T) {
	f := setup(t, readyNodeClass(v1alpha1.WarmPoolEntry{Offer: "EM-A116X-SSD", Servers: 1}))
	f.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Status: 503, Method: "POST", Path: `/servers$`, Times: 1})
	_ = f.reconcile(t)
	_ = f.reconcile(t)
	if got := f.posts(t); got != 1 {
		t.Fatalf("%d orders after a 503, want 1 (then only looked for)", got)
	}
	if st, _, msg := f.condition(t); st != metav1.ConditionFalse || !strings.Contains(msg, "in flight") {
		t.Errorf("WarmPoolReady %s: %s", st, msg)
	}

	g := setup(t, readyNodeClass(v1alpha1.WarmPoolEntry{Offer: "EM-A116X-SSD", Servers: 1}))
	g.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultRateLimit, Method: "POST", Path: `/servers$`, Times: 1})
	if err := g.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if pool, _ := g.live(); len(pool) != 1 {
		t.Errorf("%d pool servers after a 429, want 1", len(pool))
	}
	for slot, n := range g.sim.CreatesByTag(scaleway.TagWarmPoolSlot) {
		if n != 1 {
			t.Errorf("slot %s ordered %d times", slot, n)
		}
	}
}

// Out of stock and over quota: the offering is set aside (no order on the
// next pass), an event and the condition say why.
func TestOutOfStockAndQuotaSetTheOfferingAside(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fault  func(*scwsim.Sim) error
		reason catalog.UnavailableReason
	}{
		{"out of stock", func(s *scwsim.Sim) error { return s.SetStock(string(zone), "EM-A116X-SSD", 0) }, catalog.ReasonOutOfStock},
		{"quota", func(s *scwsim.Sim) error { return s.SetQuota("", "EM-A116X-SSD", 0) }, catalog.ReasonQuota},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t, readyNodeClass(v1alpha1.WarmPoolEntry{Offer: "EM-A116X-SSD", Servers: 1}))
			if err := tc.fault(f.sim); err != nil {
				t.Fatal(err)
			}
			_ = f.reconcile(t)
			_ = f.reconcile(t)
			if got := f.posts(t); got != 1 {
				t.Errorf("%d orders, want 1 (then set aside)", got)
			}
			if reason, ok := f.cat.Unavailable(string(zone), "EM-A116X-SSD", catalog.BillingHourly); !ok || reason != tc.reason {
				t.Errorf("catalogue: %s %v", reason, ok)
			}
			if pool, _ := f.live(); len(pool) != 0 {
				t.Errorf("%d pool servers", len(pool))
			}
			if st, reason, _ := f.condition(t); st != metav1.ConditionFalse || reason != ReasonOfferingUnavail {
				t.Errorf("WarmPoolReady %s/%s", st, reason)
			}
			if !f.rec.Has("WarmPoolOrderFailed") {
				t.Error("no WarmPoolOrderFailed event")
			}
		})
	}
}

// Create's gates hold for the pool: no order while the NodeClass is not
// Ready, its install-failure breaker has opened, or a spend limit would be
// crossed; an entry that cannot be served orders nothing and says why.
func TestGatesStopOrders(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(*v1alpha1.ScalewayElasticMetalNodeClass)
		reason string
		event  string
	}{
		{"not ready", func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
			nc.StatusConditions().SetFalse(v1alpha1.ConditionTypeImageReady, "NotFound", "no manifest")
		}, ReasonOrdersBlocked, ""},
		{"breaker open", func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
			nc.Status.Installs = &v1alpha1.InstallsStatus{ConsecutiveFailures: 3, Opened: 1}
		}, ReasonOrdersBlocked, "WarmPoolOrdersBlocked"},
		{"spend limit", func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
			nc.Spec.Limits = &v1alpha1.LimitsSpec{HourlySpend: "0.01"}
		}, ReasonOrdersBlocked, "WarmPoolSpendLimit"},
		{"unknown offer", func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
			nc.Spec.WarmPool[0].Offer = "EM-NOPE"
		}, ReasonInvalidEntry, ""},
		{"zone the nodeclass does not use", func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
			nc.Spec.WarmPool[0].Zone = "nl-ams-1"
		}, ReasonInvalidEntry, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := readyNodeClass(v1alpha1.WarmPoolEntry{Offer: "EM-A116X-SSD", Servers: 1})
			tc.edit(nc)
			f := setup(t, nc)
			if err := f.reconcile(t); err != nil {
				t.Fatal(err)
			}
			if got := f.posts(t); got != 0 {
				t.Errorf("%d orders", got)
			}
			if st, reason, msg := f.condition(t); st != metav1.ConditionFalse || reason != tc.reason {
				t.Errorf("WarmPoolReady %s/%s: %s", st, reason, msg)
			}
			if tc.event != "" && !f.rec.Has(tc.event) {
				t.Errorf("no %s event", tc.event)
			}
		})
	}
}

// A NodeClaim takes a pool server (spare.Keeper.Take, its billing only): it
// leaves the pool and the pool orders its replacement.
func TestTakenServerLeavesThePoolAndIsReplaced(t *testing.T) {
	f := setup(t, readyNodeClass(v1alpha1.WarmPoolEntry{Offer: "EM-A116X-SSD", Servers: 1}))
	f.delivered(t)
	ctx := context.Background()
	nc := f.nodeClass(t)
	if srv, err := f.keeper.Take(ctx, zone, "EM-A116X-SSD", catalog.BillingMonthly, nc, "monthly-claim", "np"); err != nil || srv != nil {
		t.Fatalf("a monthly claim took an hourly pool server: %v %v", srv, err)
	}
	taken, err := f.keeper.Take(ctx, zone, "EM-A116X-SSD", catalog.BillingHourly, nc, "claim-a", "np")
	if err != nil || taken == nil {
		t.Fatalf("take: %v %v", taken, err)
	}
	for _, key := range []string{scaleway.TagWarmPool, scaleway.TagWarmPoolSlot} {
		if _, ok := scaleway.TagValue(taken.Tags, key); ok {
			t.Errorf("a taken server keeps %s: %v", key, taken.Tags)
		}
	}
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	pool, other := f.live()
	if len(pool) != 1 || len(other) != 1 || other[0].ID != taken.ID || pool[0].ID == taken.ID {
		t.Fatalf("pool %+v, other %+v", pool, other)
	}
}

// Shrinking: surplus hourly servers are released, monthly ones leave the
// pool as ordinary spares (paid for the month).
func TestShrinkReleasesHourlyAndDemotesMonthly(t *testing.T) {
	f := setup(t, readyNodeClass(
		v1alpha1.WarmPoolEntry{Offer: "EM-A116X-SSD", Servers: 2},
		v1alpha1.WarmPoolEntry{Offer: "EM-A115X-SSD", BillingPeriod: "monthly", Servers: 1}))
	f.delivered(t)
	nc := f.nodeClass(t)
	nc.Spec.WarmPool = []v1alpha1.WarmPoolEntry{{Offer: "EM-A116X-SSD", Servers: 1}}
	if err := f.kube.Update(context.Background(), nc); err != nil {
		t.Fatal(err)
	}
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	pool, other := f.live()
	if len(pool) != 1 || pool[0].OfferName != "EM-A116X-SSD" {
		t.Errorf("pool %+v", pool)
	}
	if len(other) != 1 || other[0].OfferName != "EM-A115X-SSD" || !scaleway.HasTags(other[0].Tags, scaleway.Tag(scaleway.TagPhase, "spare")) {
		t.Errorf("the monthly server is not an ordinary spare: %+v", other)
	}
	if _, ok := scaleway.TagValue(other[0].Tags, scaleway.TagWarmPoolSlot); ok {
		t.Errorf("demoted server keeps its slot: %v", other[0].Tags)
	}
	if !f.rec.Has("WarmPoolReleased") || !f.rec.Has("WarmPoolDemoted") {
		t.Error("no WarmPoolReleased/WarmPoolDemoted event")
	}
}

// Listings lag orders: a pool server ordered moments ago is not listed yet,
// and the next pass must not order its slot again.
func TestLaggingListingDoesNotOrderTwice(t *testing.T) {
	f := setup(t, readyNodeClass(v1alpha1.WarmPoolEntry{Offer: "EM-A116X-SSD", Servers: 1}),
		func(o *scwsim.Options) { o.ListLag = time.Hour })
	for range 2 {
		if err := f.reconcile(t); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.posts(t); got != 1 {
		t.Errorf("%d orders while the listing lags, want 1", got)
	}
}

// A pool server taken before any pass listed it (Karpenter takes a
// delivering pool server within the pass interval) leaves the pool with its
// slot tag: its slot is not "ordered, not listed yet" any more, and the
// next pass orders it again instead of waiting out InFlight.
func TestSlotTakenBeforeItWasListedIsOrderedAgain(t *testing.T) {
	f := setup(t, readyNodeClass(v1alpha1.WarmPoolEntry{Offer: "EM-A116X-SSD", Servers: 1}))
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	taken, err := f.keeper.Take(context.Background(), zone, "EM-A116X-SSD", catalog.BillingHourly, f.nodeClass(t), "claim-a", "np")
	if err != nil || taken == nil {
		t.Fatalf("take: %v, %v", taken, err)
	}
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if got := f.posts(t); got != 2 {
		t.Fatalf("%d orders, want 2: the taken server's slot ordered again", got)
	}
	if pool, _ := f.live(); len(pool) != 1 || pool[0].ID == taken.ID {
		t.Fatalf("pool %+v, want one new server", pool)
	}
}
