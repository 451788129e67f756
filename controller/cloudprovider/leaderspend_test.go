package cloudprovider_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/invariants"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// Issue 31 (a leader change): the hourly spend limit leaves room for two
// servers; the leader orders both and dies. Listings serve the servers as
// they were a while ago (StaleLag), so the next leader's listing shows
// neither: its spend-limit accounting must still count them (from the
// NodeClaims' ordering records in the API server, not from the dead
// process's memory) and refuse a third order. Checked over the
// simulator's ledger (I5), not only by counting refusals.
func TestNextLeaderCountsThePredecessorsUnlistedOrdersAgainstTheSpendLimit(t *testing.T) {
	probe := startLight(t, nil)
	offer, ok := probe.cat.Offer(string(lightZone), lightOffer, catalog.BillingHourly)
	if !ok || offer.PricePerHour == nil {
		t.Fatalf("no hourly %s price in %s", lightOffer, lightZone)
	}
	price := offer.PricePerHour.ToFloat()
	limit := fmt.Sprintf("%.4f", 2.5*price)
	l := startLight(t, &v1alpha1.LimitsSpec{HourlySpend: limit}, func(o *scwsim.Options) { o.StaleLag = time.Hour })
	for _, name := range []string{"claim-a", "claim-b"} {
		if _, err := l.p.Create(l.ctx, l.claim(name, catalog.BillingHourly)); err != nil {
			t.Fatalf("the leader's Create of %s: %v", name, err)
		}
	}
	// The leader dies here; the next one remembers nothing of its orders.
	next := l.nextProcess()
	third := l.claim("claim-c", catalog.BillingHourly)
	_, err := next.Create(l.ctx, third)
	if !cloudprovider.IsInsufficientCapacityError(err) {
		t.Errorf("the next leader's Create = %v, want insufficient capacity (the spend limit)", err)
	}
	maxEUR, err := strconv.ParseFloat(limit, 64)
	if err != nil {
		t.Fatal(err)
	}
	if vs := invariants.I5(l.sim.Ledger(), invariants.Facts{Limits: map[string]invariants.Limits{l.nc.Name: {Hourly: maxEUR}}}); len(vs) > 0 {
		t.Fatalf("the next leader ordered past the limit of %s EUR/h (%.4f EUR/h a server):\n%s", limit, price, invariants.Report(vs))
	}
	if n := len(l.serversOf(third.Name)); n != 0 {
		t.Fatalf("%d servers ordered for the third claim", n)
	}
	if !l.rec.Has("SpendLimitReached") {
		t.Errorf("no SpendLimitReached event; events: %s", l.rec.Reasons())
	}
}
