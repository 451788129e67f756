package cloudprovider_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	cp "github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/cloudprovider"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// Issue 31 item 5: the API takes a claim's order and its answer is lost;
// listings do not show the server yet when Karpenter retries Create, and a
// spare fits the claim meanwhile. The retry must wait for its own order,
// not take the spare: that would be two servers for one claim.
func TestRetriedCreateWaitsForItsLostOrderInsteadOfTakingASpare(t *testing.T) {
	l := startLight(t, nil, func(o *scwsim.Options) { o.ListLag = time.Hour })
	l.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultAnswerLost, Method: "POST", Path: `/servers$`, Times: 1})
	claim := l.claim("claim-a", catalog.BillingMonthly)
	if _, err := l.p.Create(l.ctx, claim); err == nil {
		t.Fatal("Create succeeded: the test did not lose the order's answer")
	}
	if n := len(l.serversOf(claim.Name)); n != 1 {
		t.Fatalf("%d servers for the claim after the lost answer, want the 1 the API took", n)
	}
	// Another claim's monthly server is kept as a spare meanwhile.
	spareID := l.spare()
	_, err := l.p.Create(l.ctx, claim)
	if !errors.Is(err, scaleway.ErrOrderInFlight) {
		t.Errorf("retried Create = %v, want ErrOrderInFlight", err)
	}
	if n := len(l.serversOf(claim.Name)); n != 1 {
		t.Fatalf("%d servers for one claim: the retry took the spare or ordered while its order was in flight", n)
	}
	if s, _ := l.sim.Server(spareID); !scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagPhase, string(install.PhaseSpare))) {
		t.Fatalf("the spare was taken: %v", s.Tags)
	}
	if !l.rec.Has("OrderInFlight") {
		t.Errorf("no OrderInFlight event said why the claim waits; events: %s", l.rec.Reasons())
	}
}

// Issue 31 item 7: the hourly spend limit leaves room for one server. The
// first claim's order is taken but its answer is lost, and listings do not
// show the server yet: the next claim must be refused by the limit, not
// ordered on the strength of the lost answer.
func TestLostOrderCountsAgainstTheSpendLimit(t *testing.T) {
	probe := startLight(t, nil)
	offer, ok := probe.cat.Offer(string(lightZone), lightOffer, catalog.BillingHourly)
	if !ok || offer.PricePerHour == nil {
		t.Fatalf("no hourly %s price in %s", lightOffer, lightZone)
	}
	limit := fmt.Sprintf("%.4f", 1.5*offer.PricePerHour.ToFloat())
	l := startLight(t, &v1alpha1.LimitsSpec{HourlySpend: limit}, func(o *scwsim.Options) { o.ListLag = time.Hour })
	l.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultAnswerLost, Method: "POST", Path: `/servers$`, Times: 1})
	first := l.claim("claim-a", catalog.BillingHourly)
	if _, err := l.p.Create(l.ctx, first); err == nil {
		t.Fatal("Create succeeded: the test did not lose the order's answer")
	}
	if n := len(l.serversOf(first.Name)); n != 1 {
		t.Fatalf("%d servers for the first claim, want the 1 the API took", n)
	}
	second := l.claim("claim-b", catalog.BillingHourly)
	_, err := l.p.Create(l.ctx, second)
	if !cloudprovider.IsInsufficientCapacityError(err) {
		t.Errorf("second Create = %v, want insufficient capacity (the spend limit)", err)
	}
	if n := len(l.serversOf(second.Name)); n != 0 {
		t.Fatalf("%d servers ordered for the second claim: %d servers of %.4f EUR/h against a limit of %s", n, len(l.sim.Servers()), offer.PricePerHour.ToFloat(), limit)
	}
	if !l.rec.Has("SpendLimitReached") {
		t.Errorf("no SpendLimitReached event; events: %s", l.rec.Reasons())
	}
}

// A leader killed after its order was taken, before Karpenter recorded the
// server on the NodeClaim (it does so when Create returns): the next leader
// (or the controller after a restart) remembers nothing, and the listings
// do not show the server yet. It must wait for that server, not order a
// second one; once the listing shows it, the claim gets it.
func TestNextLeaderWaitsForTheOrderOfTheOneThatDied(t *testing.T) {
	l := startLight(t, nil, func(o *scwsim.Options) { o.ListLag = time.Hour })
	claim := l.claim("claim-a", catalog.BillingHourly)
	if _, err := l.p.Create(l.ctx, claim); err != nil {
		t.Fatal(err)
	}
	// The process dies here. The next one reads the claim as stored.
	next := l.nextProcess()
	stored := &karpv1.NodeClaim{}
	if err := l.kube.Get(l.ctx, client.ObjectKeyFromObject(claim), stored); err != nil {
		t.Fatal(err)
	}
	_, err := next.Create(l.ctx, stored)
	if !errors.Is(err, scaleway.ErrOrderInFlight) {
		t.Errorf("the next leader's Create = %v, want ErrOrderInFlight", err)
	}
	if n := len(l.serversOf(claim.Name)); n != 1 {
		t.Fatalf("%d servers for one claim after a leader change", n)
	}
	if !l.rec.Has("OrderInFlight") {
		t.Errorf("no OrderInFlight event said why the claim waits; events: %s", l.rec.Reasons())
	}
	// The listing catches up: the claim gets the server its first order bought.
	srv := l.serversOf(claim.Name)[0]
	if err := l.sim.Age(srv.ID, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	got, err := next.Create(l.ctx, stored)
	if err != nil {
		t.Fatalf("Create once the server is listed: %v", err)
	}
	if _, id, _ := scaleway.ParseProviderID(got.Status.ProviderID); id != srv.ID {
		t.Errorf("providerID %s, want the first order's server %s", got.Status.ProviderID, srv.ID)
	}
}

// The record of an order does not hold up the process that wrote it (it
// knows what it sent), nor another one once the settle window has passed.
func TestOrderingRecordOnlyHoldsOtherProcessesWithinTheSettleWindow(t *testing.T) {
	l := startLight(t, nil, func(o *scwsim.Options) { o.ListLag = time.Hour })
	claim := l.claim("claim-a", catalog.BillingHourly)
	stale := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano) + " gone"
	claim.Annotations = map[string]string{cp.AnnotationOrdering: stale}
	if _, err := l.p.Create(l.ctx, claim); err != nil {
		t.Fatalf("Create with a record older than the settle window: %v", err)
	}
	stored := &karpv1.NodeClaim{}
	if err := l.kube.Get(l.ctx, client.ObjectKeyFromObject(claim), stored); err != nil {
		t.Fatal(err)
	}
	if v := stored.Annotations[cp.AnnotationOrdering]; v == "" || v == stale {
		t.Errorf("annotation %s = %q, want this process's fresh record", cp.AnnotationOrdering, v)
	}
	if n := len(l.serversOf(claim.Name)); n != 1 {
		t.Fatalf("%d servers, want 1", n)
	}
}

// An old leader that froze holding a copy of the NodeClaim wakes up after
// the next leader ordered the claim's server (listings do not show it yet):
// its Create must not order a second one on the strength of its stale copy.
func TestFrozenOldLeaderWithAStaleClaimDoesNotOrder(t *testing.T) {
	l := startLight(t, nil, func(o *scwsim.Options) { o.ListLag = time.Hour })
	stale := l.claim("claim-a", catalog.BillingHourly)
	stored := &karpv1.NodeClaim{}
	if err := l.kube.Get(l.ctx, client.ObjectKeyFromObject(stale), stored); err != nil {
		t.Fatal(err)
	}
	stale = stored.DeepCopy()
	// The old leader (l.p) froze holding stale; the next leader orders.
	next := l.nextProcess()
	if _, err := next.Create(l.ctx, stored); err != nil {
		t.Fatal(err)
	}
	if _, err := l.p.Create(l.ctx, stale); err == nil {
		t.Error("the frozen old leader's Create succeeded on a stale NodeClaim")
	}
	if n := len(l.serversOf(stale.Name)); n != 1 {
		t.Fatalf("%d servers for one claim: the old leader ordered on a stale copy", n)
	}
}
