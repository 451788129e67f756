package spendlimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spendlimit"
)

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

type fixture struct {
	cat     *catalog.Catalog
	servers []*baremetal.Server
	listErr error
	lists   int
	l       *spendlimit.Limiter
	clock   *clocktesting.FakeClock
}

func newFixture() *fixture {
	f := &fixture{cat: catalog.New(catalog.Options{}), clock: clocktesting.NewFakeClock(now)}
	f.l = &spendlimit.Limiter{Offers: f.cat, Clock: f.clock, Servers: func(context.Context) ([]*baremetal.Server, error) {
		f.lists++
		return f.servers, f.listErr
	}}
	return f
}

func (f *fixture) offer(t *testing.T, name string, billing catalog.BillingPeriod) *baremetal.Offer {
	t.Helper()
	o, ok := f.cat.Offer("fr-par-2", name, billing)
	if !ok {
		t.Fatalf("no %s %s in fr-par-2", billing, name)
	}
	return o
}

func (f *fixture) server(t *testing.T, id, name string, billing catalog.BillingPeriod, nodeClass string) *baremetal.Server {
	o := f.offer(t, name, billing)
	created := now.Add(-time.Hour)
	return &baremetal.Server{ID: id, Zone: scw.ZoneFrPar2, OfferID: o.ID, OfferName: name, CreatedAt: &created,
		Status: baremetal.ServerStatusReady, Tags: []string{"karpenter-scaleway-em/nodeclass=" + nodeClass}}
}

func nodeClass(hourly, commitment string) *v1alpha1.ScalewayElasticMetalNodeClass {
	return &v1alpha1.ScalewayElasticMetalNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "gp"},
		Spec: v1alpha1.ScalewayElasticMetalNodeClassSpec{Limits: &v1alpha1.LimitsSpec{HourlySpend: hourly, MonthlyCommitment: commitment}}}
}

// 0.548 EUR/h spent of 1 EUR/h: another EM-I220E-NVME (0.548) would cross
// the limit, an EM-A116X-SSD (0.077) fits; other NodeClasses' servers do
// not count.
func TestHourlyLimitRefusesWhatWouldCrossIt(t *testing.T) {
	f := newFixture()
	f.servers = []*baremetal.Server{
		f.server(t, "s1", "EM-I220E-NVME", catalog.BillingHourly, "gp"),
		f.server(t, "s2", "EM-I220E-NVME", catalog.BillingHourly, "other"),
	}
	s, err := f.l.Begin(context.Background(), nodeClass("1", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer s.End()
	var ex *spendlimit.ExceededError
	if err := s.Check("fr-par-2", f.offer(t, "EM-I220E-NVME", catalog.BillingHourly)); !errors.As(err, &ex) || ex.Limit != spendlimit.LimitHourly {
		t.Fatalf("EM-I220E-NVME at 0.548 spent of 1: %v, want the hourly limit exceeded", err)
	}
	if err := s.Check("fr-par-2", f.offer(t, "EM-A116X-SSD", catalog.BillingHourly)); err != nil {
		t.Errorf("EM-A116X-SSD (0.077/h) refused: %v", err)
	}
	// A monthly server counts its monthly price over 730 h: 32.99/730 fits.
	if err := s.Check("fr-par-2", f.offer(t, "EM-A115X-SSD", catalog.BillingMonthly)); err != nil {
		t.Errorf("monthly EM-A115X-SSD (0.045/h amortised) refused: %v", err)
	}
}

// The monthly commitment counts a new monthly order's month and its setup fee.
func TestMonthlyCommitmentLimit(t *testing.T) {
	f := newFixture()
	s, err := f.l.Begin(context.Background(), nodeClass("", "66"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check("fr-par-2", f.offer(t, "EM-A115X-SSD", catalog.BillingMonthly)); err != nil {
		t.Errorf("32.99 + 32.99 fee under 66: %v", err)
	}
	var ex *spendlimit.ExceededError
	if err := s.Check("fr-par-2", f.offer(t, "EM-B111X-SATA", catalog.BillingMonthly)); !errors.As(err, &ex) || ex.Limit != spendlimit.LimitCommitment {
		t.Errorf("94.99 + fee over 66: %v, want the commitment limit exceeded", err)
	}
	if err := s.Check("fr-par-2", f.offer(t, "EM-I220E-NVME", catalog.BillingHourly)); err != nil {
		t.Errorf("an hourly order commits nothing monthly: %v", err)
	}
	s.End()
}

// An order counts before listings show it, once (not twice when they do).
func TestOrdersCountBeforeTheyAreListed(t *testing.T) {
	f := newFixture()
	nc := nodeClass("0.6", "")
	hourly := f.offer(t, "EM-I220E-NVME", catalog.BillingHourly)
	s, err := f.l.Begin(context.Background(), nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check("fr-par-2", hourly); err != nil {
		t.Fatal(err)
	}
	s.Ordered(&baremetal.Server{ID: "new"}, "fr-par-2", hourly)
	s.End()

	s, _ = f.l.Begin(context.Background(), nc) // the listing does not show "new" yet
	if err := s.Check("fr-par-2", hourly); err == nil {
		t.Errorf("a second 0.548 order under a 0.6 limit was allowed while the first is not listed yet")
	}
	s.End()

	f.servers = []*baremetal.Server{f.server(t, "new", "EM-I220E-NVME", catalog.BillingHourly, "gp")}
	s, _ = f.l.Begin(context.Background(), nc)
	// 0.548 listed + 0.077 = 0.625 > 0.6: refused, with the listed order counted once.
	var ex *spendlimit.ExceededError
	err = s.Check("fr-par-2", f.offer(t, "EM-A116X-SSD", catalog.BillingHourly))
	if !errors.As(err, &ex) || ex.Current < 0.5 || ex.Current > 0.6 {
		t.Errorf("after the order is listed: %v; want refused with 0.548 spent (counted once)", err)
	}
	s.End()
}

func TestNoLimitsNoListingAndListingFailureIsAnError(t *testing.T) {
	f := newFixture()
	s, err := f.l.Begin(context.Background(), nodeClass("", ""))
	if s != nil || err != nil || f.lists != 0 {
		t.Errorf("no limits: session %v err %v, %d listings; want none", s, err, f.lists)
	}
	if err := s.Check("fr-par-2", f.offer(t, "EM-I220E-NVME", catalog.BillingHourly)); err != nil {
		t.Errorf("a nil session refused: %v", err)
	}
	f.listErr = errors.New("503")
	if _, err := f.l.Begin(context.Background(), nodeClass("1", "")); err == nil {
		t.Errorf("a failed listing let the limit be checked against a guess")
	}
	// The lock was released: the next session does not block.
	f.listErr = nil
	s, err = f.l.Begin(context.Background(), nodeClass("1", ""))
	if err != nil {
		t.Fatal(err)
	}
	s.End()
}

// Issue 31 item 7: an order whose answer was lost may have been taken: it
// counts until a listing shows a server with its idempotency tag (then once,
// as listed) or the API client no longer treats it as in flight (its
// settle window ended); an answer that arrives later replaces it, not adds
// to it.
func TestOrdersInFlightCountUntilListedOrSettled(t *testing.T) {
	f := newFixture()
	settled := map[string]bool{}
	f.l.OrderInFlight = func(tag string) bool { return !settled[tag] }
	nc := nodeClass("0.6", "")
	hourly := f.offer(t, "EM-I220E-NVME", catalog.BillingHourly)
	const tag = "karpenter.sh/nodeclaim=a"
	begin := func() *spendlimit.Session {
		t.Helper()
		s, err := f.l.Begin(context.Background(), nc)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := begin()
	if err := s.Check("fr-par-2", hourly); err != nil {
		t.Fatal(err)
	}
	s.InFlight(tag, "fr-par-2", hourly)
	s.End()

	s = begin() // nothing listed: the lost order still counts
	if err := s.Check("fr-par-2", hourly); err == nil {
		t.Error("a second 0.548 order under a 0.6 limit was allowed while the first one's answer is lost")
	}
	s.InFlight(tag, "fr-par-2", hourly) // the same order again: counted once
	if err := s.Check("fr-par-2", f.offer(t, "EM-A116X-SSD", catalog.BillingHourly)); err == nil {
		t.Error("0.548 in flight + 0.077 under 0.6 allowed")
	}
	s.End()

	// Listed with its tag: counted once, as listed.
	listed := f.server(t, "s-a", "EM-I220E-NVME", catalog.BillingHourly, "gp")
	listed.Tags = append(listed.Tags, tag)
	f.servers = []*baremetal.Server{listed}
	s = begin()
	var ex *spendlimit.ExceededError
	if err := s.Check("fr-par-2", f.offer(t, "EM-A116X-SSD", catalog.BillingHourly)); !errors.As(err, &ex) || ex.Current > 0.6 {
		t.Errorf("once listed: %v; want refused with 0.548 spent (counted once)", err)
	}
	s.End()

	// Never listed: it counts while the client has it in flight.
	f.servers = nil
	s = begin()
	s.InFlight("karpenter.sh/nodeclaim=b", "fr-par-2", hourly)
	s.End()
	f.clock.Step(4 * time.Minute)
	s = begin()
	if err := s.Check("fr-par-2", hourly); err == nil {
		t.Error("an order in flight 4 min ago no longer counts")
	}
	s.End()
	settled["karpenter.sh/nodeclaim=b"] = true
	s = begin()
	if err := s.Check("fr-par-2", hourly); err != nil {
		t.Errorf("an order past its settle window still counts: %v", err)
	}
	s.End()

	// The answer arrives on a retry (the server found by its tag): it
	// replaces the order in flight.
	s = begin()
	s.InFlight("karpenter.sh/nodeclaim=c", "fr-par-2", hourly)
	s.Ordered(&baremetal.Server{ID: "s-c", Tags: []string{"karpenter.sh/nodeclaim=c"}}, "fr-par-2", hourly)
	s.End()
	f.servers = []*baremetal.Server{f.server(t, "s-c", "EM-I220E-NVME", catalog.BillingHourly, "gp")}
	s = begin()
	if err := s.Check("fr-par-2", f.offer(t, "EM-A116X-SSD", catalog.BillingHourly)); !errors.As(err, &ex) || ex.Current > 0.6 {
		t.Errorf("an order in flight, then answered and listed: %v; want 0.548 spent (counted once)", err)
	}
	s.End()
}

// Orders another process recorded before sending them count while no
// listed server carries their tag; once one does, the listing counts it
// (once); a record the catalogue cannot price fails the check instead of
// being left out.
func TestRecordedOrdersOfAnotherProcessCountUntilListed(t *testing.T) {
	f := newFixture()
	rec := spendlimit.Record{Tag: "karpenter.sh/nodeclaim=a", Zone: "fr-par-2", Offer: "EM-I220E-NVME", Billing: catalog.BillingHourly}
	var recs []spendlimit.Record
	f.l.Records = append(f.l.Records, func(_ context.Context, nc string) ([]spendlimit.Record, error) {
		if nc != "gp" {
			return nil, nil
		}
		return recs, nil
	})
	check := func() error {
		t.Helper()
		s, err := f.l.Begin(context.Background(), nodeClass("1", ""))
		if err != nil {
			return err
		}
		defer s.End()
		return s.Check("fr-par-2", f.offer(t, "EM-I220E-NVME", catalog.BillingHourly))
	}
	if err := check(); err != nil {
		t.Fatalf("nothing spent, nothing recorded: %v", err)
	}
	recs = []spendlimit.Record{rec}
	var ex *spendlimit.ExceededError
	if err := check(); !errors.As(err, &ex) {
		t.Fatalf("a recorded EM-I220E-NVME (0.548/h) and another of 1 EUR/h: %v, want the limit exceeded", err)
	}
	// Listed: counted by the listing alone, and still over.
	srv := f.server(t, "s1", "EM-I220E-NVME", catalog.BillingHourly, "gp")
	srv.Tags = append(srv.Tags, rec.Tag)
	f.servers = []*baremetal.Server{srv}
	if err := check(); !errors.As(err, &ex) || ex.Current > 0.6 {
		t.Fatalf("listed and recorded: %v, want the limit exceeded with the server counted once", err)
	}
	f.servers = nil
	recs = []spendlimit.Record{{Tag: "karpenter.sh/nodeclaim=b", Zone: "fr-par-2", Offer: "EM-NOPE", Billing: catalog.BillingHourly}}
	if err := check(); err == nil || errors.As(err, &ex) {
		t.Fatalf("an unpriceable record: %v, want an error", err)
	}
}
