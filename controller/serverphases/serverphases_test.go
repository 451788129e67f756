package serverphases_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/serverphases"
)

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// server is a server of the cluster ordered with the catalogue's offer;
// phase "" leaves the phase tag out (a server just ordered).
func server(t *testing.T, cat *catalog.Catalog, id, offer string, billing catalog.BillingPeriod, nodeClass, phase string) *baremetal.Server {
	t.Helper()
	o, ok := cat.Offer("fr-par-2", offer, billing)
	if !ok {
		t.Fatalf("no %s %s offer in fr-par-2", billing, offer)
	}
	tags := []string{"karpenter.sh/managed-by=test", "karpenter-scaleway-em/nodeclass=" + nodeClass}
	if phase != "" {
		tags = append(tags, "karpenter-scaleway-em/phase="+phase)
	}
	return &baremetal.Server{ID: id, Zone: scw.ZoneFrPar2, OfferID: o.ID, OfferName: offer, Tags: tags,
		CreatedAt: &now, Status: baremetal.ServerStatusReady}
}

func TestServersByPhaseFollowTheListing(t *testing.T) {
	cat := catalog.New(catalog.Options{})
	reg := prometheus.NewRegistry()
	g := serverphases.NewGauge(reg, cat)
	if n := testutil.CollectAndCount(g); n != 0 {
		t.Fatalf("%d series before the first listing", n)
	}
	deleting := server(t, cat, "d", "EM-I220E-NVME", catalog.BillingHourly, "gp", "joined")
	deleting.Status = baremetal.ServerStatusDeleting
	withdrawn := server(t, cat, "w", "EM-I220E-NVME", catalog.BillingHourly, "gp", "booting")
	withdrawn.OfferID = "an-offer-no-longer-listed"
	g.Update([]*baremetal.Server{
		server(t, cat, "a", "EM-I220E-NVME", catalog.BillingHourly, "gp", ""),
		server(t, cat, "b", "EM-I220E-NVME", catalog.BillingHourly, "gp", "imaging"),
		server(t, cat, "c", "EM-I220E-NVME", catalog.BillingHourly, "gp", "imaging"),
		server(t, cat, "s", "EM-A115X-SSD", catalog.BillingMonthly, "monthly", "spare"),
		deleting, withdrawn,
	})
	want := `
# HELP karpenter_scaleway_em_servers The cluster's servers by NodeClass, zone, offer, billing period and install phase (ordered, rescue, imaging, booting, joined, spare), from the last listing.
# TYPE karpenter_scaleway_em_servers gauge
karpenter_scaleway_em_servers{billing_period="hourly",nodeclass="gp",offer="EM-I220E-NVME",phase="imaging",zone="fr-par-2"} 2
karpenter_scaleway_em_servers{billing_period="hourly",nodeclass="gp",offer="EM-I220E-NVME",phase="ordered",zone="fr-par-2"} 1
karpenter_scaleway_em_servers{billing_period="monthly",nodeclass="monthly",offer="EM-A115X-SSD",phase="spare",zone="fr-par-2"} 1
karpenter_scaleway_em_servers{billing_period="unknown",nodeclass="gp",offer="EM-I220E-NVME",phase="booting",zone="fr-par-2"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), serverphases.Metric); err != nil {
		t.Error(err)
	}
	// The spare was released, one install moved on: no series of what is gone.
	g.Update([]*baremetal.Server{server(t, cat, "b", "EM-I220E-NVME", catalog.BillingHourly, "gp", "booting")})
	want = `
# HELP karpenter_scaleway_em_servers The cluster's servers by NodeClass, zone, offer, billing period and install phase (ordered, rescue, imaging, booting, joined, spare), from the last listing.
# TYPE karpenter_scaleway_em_servers gauge
karpenter_scaleway_em_servers{billing_period="hourly",nodeclass="gp",offer="EM-I220E-NVME",phase="booting",zone="fr-par-2"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), serverphases.Metric); err != nil {
		t.Error(err)
	}
}
