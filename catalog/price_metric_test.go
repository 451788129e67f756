package catalog

import (
	"context"
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// The price estimate metric holds, for every offering Karpenter is offered,
// the price it compares (at the default one-month commitment), with
// karpenter-provider-aws's labels plus billing_period.
func TestOfferingPriceEstimateMatchesOfferings(t *testing.T) {
	e := newEnv(t, false)
	its := mustTypes(t, e.cat, Filter{BillingPeriods: BillingPeriods})
	series := 0
	for _, it := range its {
		for _, of := range it.Offerings {
			billing := of.Requirements.Get(LabelBillingPeriod).Any()
			g := e.cat.metrics.priceEstimate.WithLabelValues(it.Name, of.CapacityType(), of.Zone(), billing)
			if got := testutil.ToFloat64(g); math.Abs(got-of.Price) > 1e-12 {
				t.Errorf("%s %s %s: metric %v, offering price %v", it.Name, of.Zone(), billing, got, of.Price)
			}
			series++
		}
	}
	if series < 50 {
		t.Fatalf("only %d offerings checked", series)
	}
	if n := testutil.CollectAndCount(e.cat.metrics.priceEstimate, MetricOfferingPriceEstimate); n != series {
		t.Errorf("%d price series for %d offerings", n, series)
	}
	if of := e.cat.metrics.priceEstimate.WithLabelValues("EM-I220E-NVME", karpv1.CapacityTypeOnDemand, "fr-par-2", "hourly"); testutil.ToFloat64(of) != 0.548 {
		t.Errorf("EM-I220E-NVME hourly in fr-par-2: %v, want 0.548", testutil.ToFloat64(of))
	}
}

// A refresh with a new price moves the metric; an offer that disappears
// leaves no stale series.
func TestOfferingPriceEstimateFollowsRefresh(t *testing.T) {
	e := newEnv(t, true)
	if err := e.cat.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	gauge := func() float64 {
		return testutil.ToFloat64(e.cat.metrics.priceEstimate.WithLabelValues("EM-I220E-NVME", karpv1.CapacityTypeOnDemand, "fr-par-1", "hourly"))
	}
	other := func() float64 {
		return testutil.ToFloat64(e.cat.metrics.priceEstimate.WithLabelValues("EM-A116X-SSD", karpv1.CapacityTypeOnDemand, "fr-par-1", "hourly"))
	}
	before := gauge()
	if before == 0 || other() == 0 {
		t.Fatal("no price for EM-I220E-NVME or EM-A116X-SSD in fr-par-1")
	}
	offers, err := e.cat.Offer("fr-par-1", "EM-I220E-NVME", BillingHourly)
	if !err {
		t.Fatal("offer not found")
	}
	changed := *offers
	changed.PricePerHour = scw.NewMoneyFromFloat(before*2, "EUR", 3)
	e.srv.Set("fr-par-1", "hourly", []*baremetal.Offer{&changed})
	if err := e.cat.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := gauge(); math.Abs(got-before*2) > 1e-9 {
		t.Errorf("after the refresh: %v, want %v", got, before*2)
	}
	// fr-par-1's hourly list now holds one offer: the others' hourly series are gone.
	if v := other(); v != 0 {
		t.Errorf("a series for an offer no longer listed: %v", v)
	}
}
