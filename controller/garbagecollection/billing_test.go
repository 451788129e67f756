package garbagecollection

import (
	"context"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/billing"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
)

// earlyNextMonth is the 2nd of the calendar month (UTC) after t's: past any
// grace period for a server created at t, and far from a renewal.
func earlyNextMonth(t time.Time) time.Time { return billing.MonthEnd(t).Add(24 * time.Hour) }

// inRenewalMargin is half the renewal margin before the end of t's calendar
// month (UTC): monthly subscriptions renew then, so a spare goes.
func inRenewalMargin(t time.Time) time.Time {
	return billing.PaidUntil(t).Add(-spare.RenewalMargin / 2)
}

// withoutOffers is a refreshed catalogue that no longer lists the servers'
// offer (Scaleway stopped selling it, or the refresh replaced the zone).
type withoutOffers struct{}

func (withoutOffers) Offer(string, string, catalog.BillingPeriod) (*baremetal.Offer, bool) {
	return nil, false
}
func (withoutOffers) Refreshed(string) bool { return true }

// A monthly server is kept until its paid month ends whatever the catalogue
// lists when the collector sweeps: the embedded snapshot before the first
// refresh, or a refresh without its offer. What it was bought as is on the
// server (its billing tags); asked of the catalogue, it was "hourly", and
// the collector deleted the spare and the orphan, throwing their months away.
func TestMonthlySparesAreKeptWhateverTheCatalogueLists(t *testing.T) {
	for name, offers := range map[string]func() spare.Offers{
		"embedded snapshot":           func() spare.Offers { return catalog.New(catalog.Options{Zones: []scw.Zone{zone}}) },
		"refreshed without the offer": func() spare.Offers { return withoutOffers{} },
	} {
		t.Run(name, func(t *testing.T) {
			nc := &v1alpha1.ScalewayElasticMetalNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "nc"}}
			f := setup(t, nc)
			order := func(tags ...string) *baremetal.Server {
				t.Helper()
				// orderIn tags it bought monthly, as an order does.
				return f.orderIn(t, zone, "monthly", append([]string{scaleway.Tag(scaleway.TagNodeClass, "nc")}, tags...)...)
			}
			kept := order(scaleway.Tag(scaleway.TagPhase, string(install.PhaseSpare)), "order=spare")
			orphan := order(scaleway.Tag(scaleway.TagNodeClaim, "gone"))
			f.gc.Spares.Offers = offers()

			// Past the grace period, early in the next calendar month: far
			// from any renewal, so only what the servers were bought as decides.
			f.clk.SetTime(earlyNextMonth(f.clk.Now()))
			if _, err := f.gc.Reconcile(context.Background()); err != nil {
				t.Fatal(err)
			}
			live := f.live(t)
			if !live[kept.ID] {
				t.Error("the collector released a paid monthly spare")
			}
			if !live[orphan.ID] {
				t.Error("the collector released a paid monthly server whose nodeclaim is gone (it is kept as a spare)")
			}
			for _, s := range f.sim.Servers() {
				if s.ID == orphan.ID && !scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagPhase, string(install.PhaseSpare))) {
					t.Errorf("the orphan is not a spare: %v", s.Tags)
				}
			}
		})
	}
}
