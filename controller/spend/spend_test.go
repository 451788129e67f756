package spend_test

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spend"
)

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// server is a server of the cluster ordered with the catalogue's offer.
func server(t *testing.T, cat *catalog.Catalog, offer string, billing catalog.BillingPeriod, nodeClass, phase string, created time.Time) *baremetal.Server {
	t.Helper()
	o, ok := cat.Offer("fr-par-2", offer, billing)
	if !ok {
		t.Fatalf("no %s %s offer in fr-par-2", billing, offer)
	}
	tags := []string{"karpenter.sh/managed-by=test", "karpenter-scaleway-em/phase=" + phase}
	if nodeClass != "" {
		tags = append(tags, "karpenter-scaleway-em/nodeclass="+nodeClass)
	}
	return &baremetal.Server{ID: offer + "-" + phase, Zone: scw.ZoneFrPar2, OfferID: o.ID, OfferName: offer, Tags: tags,
		CreatedAt: &created, Status: baremetal.ServerStatusReady}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestCostOfEachKindOfServer(t *testing.T) {
	cat := catalog.New(catalog.Options{})
	lastMonth := time.Date(2026, 10, 31, 23, 30, 0, 0, time.UTC)
	thisMonth := time.Date(2026, 11, 1, 0, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		name               string
		srv                *baremetal.Server
		usage              string
		billing            catalog.BillingPeriod
		hourly, commitment float64
	}{
		{"hourly node", server(t, cat, "EM-I220E-NVME", catalog.BillingHourly, "gp", "joined", thisMonth),
			spend.UsageNode, catalog.BillingHourly, 0.548, 0},
		{"monthly node ordered this month: month and setup fee", server(t, cat, "EM-I220E-NVME", catalog.BillingMonthly, "gp", "imaging", thisMonth),
			spend.UsageNode, catalog.BillingMonthly, 199.99 / 730, 199.99 + 199.99},
		{"monthly spare ordered last month: the month only", server(t, cat, "EM-I220E-NVME", catalog.BillingMonthly, "gp", "spare", lastMonth),
			spend.UsageSpare, catalog.BillingMonthly, 199.99 / 730, 199.99},
		{"monthly offer without a fee", server(t, cat, "EM-RV1-C4M16S128-A", catalog.BillingMonthly, "riscv", "joined", thisMonth),
			spend.UsageNode, catalog.BillingMonthly, 15.99 / 730, 15.99},
	} {
		c := spend.Of(tc.srv, cat, now)
		if !c.Priced || c.Usage != tc.usage || c.Billing != tc.billing || !near(c.Hourly, tc.hourly) || !near(c.Commitment, tc.commitment) {
			t.Errorf("%s: %+v, want %s/%s %.6f/h, %.2f committed", tc.name, c, tc.usage, tc.billing, tc.hourly, tc.commitment)
		}
	}
}

func TestComputeGroupsAndSkips(t *testing.T) {
	cat := catalog.New(catalog.Options{})
	h1 := server(t, cat, "EM-I220E-NVME", catalog.BillingHourly, "gp", "joined", now.Add(-time.Hour))
	h2 := server(t, cat, "EM-I220E-NVME", catalog.BillingHourly, "gp", "rescue", now.Add(-time.Minute))
	deleting := server(t, cat, "EM-I220E-NVME", catalog.BillingHourly, "gp", "joined", now.Add(-time.Hour))
	deleting.Status = baremetal.ServerStatusDeleting
	spare := server(t, cat, "EM-A115X-SSD", catalog.BillingMonthly, "gp", "spare", now.AddDate(0, -2, 0))
	withdrawn := server(t, cat, "EM-I220E-NVME", catalog.BillingHourly, "gp", "joined", now)
	withdrawn.OfferID = "00000000-0000-0000-0000-000000000000"
	untagged := server(t, cat, "EM-I220E-NVME", catalog.BillingHourly, "", "joined", now)

	totals := spend.Compute([]*baremetal.Server{h1, h2, deleting, spare, withdrawn, untagged}, cat, now)
	nodes := totals[spend.Key{NodeClass: "gp", Billing: catalog.BillingHourly, Usage: spend.UsageNode}]
	if nodes.Servers != 2 || !near(nodes.Hourly, 2*0.548) || nodes.Commitment != 0 {
		t.Errorf("gp hourly nodes: %+v, want 2 servers at 0.548/h (the deleting one left out)", nodes)
	}
	spares := totals[spend.Key{NodeClass: "gp", Billing: catalog.BillingMonthly, Usage: spend.UsageSpare}]
	if spares.Servers != 1 || !near(spares.Hourly, 32.99/730) || !near(spares.Commitment, 32.99) {
		t.Errorf("gp spares: %+v", spares)
	}
	unknown := totals[spend.Key{NodeClass: "gp", Usage: spend.UsageNode}]
	if unknown.Servers != 1 || unknown.Unpriced != 1 || unknown.Hourly != 0 {
		t.Errorf("the server of a withdrawn offer: %+v, want counted as unpriced", unknown)
	}
	if a := totals[spend.Key{NodeClass: spend.UnknownNodeClass, Billing: catalog.BillingHourly, Usage: spend.UsageNode}]; a.Servers != 1 {
		t.Errorf("a server without a NodeClass tag: %+v, want under %q", a, spend.UnknownNodeClass)
	}
	sum := totals.NodeClass("gp")
	if sum.Servers != 4 || !near(sum.Hourly, 2*0.548+32.99/730) || !near(sum.Commitment, 32.99) || sum.Unpriced != 1 {
		t.Errorf("gp in all: %+v", sum)
	}
}

// A server's billing period is its billing tags': a monthly server whose
// offer the catalogue no longer lists under its ID (withdrawn, or a refresh
// that replaced the zone) is still monthly, unpriced, and its setup fee is
// owed in the calendar month (UTC) of its order, not of its creation.
func TestBillingComesFromTheServersTags(t *testing.T) {
	cat := catalog.New(catalog.Options{})
	tagged := func(billing, paidSince string) *baremetal.Server {
		s := server(t, cat, "EM-I220E-NVME", catalog.BillingMonthly, "gp", "spare", now.AddDate(0, -3, 0))
		s.Tags = append(s.Tags, "karpenter-scaleway-em/billing="+billing, "karpenter-scaleway-em/paid-since="+paidSince)
		return s
	}
	withdrawn := tagged("monthly", "1700000000")
	withdrawn.OfferID = "00000000-0000-0000-0000-000000000000"
	if c := spend.Of(withdrawn, cat, now); c.Billing != catalog.BillingMonthly || c.Priced {
		t.Errorf("a monthly server of a withdrawn offer: %+v, want monthly, unpriced", c)
	}
	// Ordered on 1 November 00:30 in Paris, 31 October 23:30 UTC: October's fee.
	october := tagged("monthly", strconv.FormatInt(time.Date(2026, 10, 31, 23, 30, 0, 0, time.UTC).Unix(), 10))
	november := tagged("monthly", strconv.FormatInt(time.Date(2026, 11, 1, 0, 30, 0, 0, time.UTC).Unix(), 10))
	if c := spend.Of(october, cat, now); !c.Priced || !near(c.Commitment, 199.99) {
		t.Errorf("ordered in October (UTC): %+v, want the month only", c)
	}
	if c := spend.Of(november, cat, now); !c.Priced || !near(c.Commitment, 2*199.99) {
		t.Errorf("ordered in November (UTC): %+v, want the month and the setup fee", c)
	}
}

// The gauges export the last totals only: a NodeClass whose servers are
// gone disappears instead of keeping its last value.
func TestGaugesExportTheLastTotals(t *testing.T) {
	cat := catalog.New(catalog.Options{})
	reg := prometheus.NewRegistry()
	g := spend.NewGauges(reg)
	if n := testutil.CollectAndCount(g); n != 0 {
		t.Fatalf("%d series before the first computation (a replica that is not the leader exports none)", n)
	}
	g.Set(spend.Compute([]*baremetal.Server{
		server(t, cat, "EM-I220E-NVME", catalog.BillingHourly, "gp", "joined", now),
		server(t, cat, "EM-A115X-SSD", catalog.BillingMonthly, "monthly", "spare", now.AddDate(0, -1, 0)),
	}, cat, now))
	want := `
# HELP karpenter_scaleway_em_spend_hourly_eur What the cluster's servers cost per hour (EUR): hourly servers at their price per hour, monthly ones at their monthly price over 730 h; by NodeClass, billing period and usage (node, or spare: a monthly server kept for reuse, paid and idle).
# TYPE karpenter_scaleway_em_spend_hourly_eur gauge
karpenter_scaleway_em_spend_hourly_eur{billing_period="hourly",nodeclass="gp",usage="node"} 0.548
karpenter_scaleway_em_spend_hourly_eur{billing_period="monthly",nodeclass="monthly",usage="spare"} 0.045191780821917814
# HELP karpenter_scaleway_em_spend_monthly_commitment_eur Monthly commitment (EUR): the monthly price of every monthly server, plus the setup fee of those ordered in the current calendar month (UTC); by NodeClass and usage.
# TYPE karpenter_scaleway_em_spend_monthly_commitment_eur gauge
karpenter_scaleway_em_spend_monthly_commitment_eur{nodeclass="gp",usage="node"} 0
karpenter_scaleway_em_spend_monthly_commitment_eur{nodeclass="monthly",usage="spare"} 32.99
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), spend.MetricHourly, spend.MetricCommitment); err != nil {
		t.Error(err)
	}
	g.Set(spend.Compute(nil, cat, now))
	if n := testutil.CollectAndCount(g); n != 0 {
		t.Errorf("%d series after every server went", n)
	}
}
