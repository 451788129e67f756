// Package serverphases counts the cluster's servers by NodeClass, zone,
// offer, billing period and install phase (karpenter_scaleway_em_servers):
// installs in each phase, joined nodes and spares, on one graph. It is fed
// the spend controller's listing, so the two agree and the API is listed
// once per interval.
package serverphases

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spend"
)

// Metric is the gauge's name.
const Metric = "karpenter_scaleway_em_servers"

// Key is one series.
type Key struct {
	NodeClass, Zone, Offer, Billing string
	Phase                           install.Phase
}

// Counts are servers per Key.
type Counts map[Key]int

// Count groups the servers that are not being deleted; a server's billing
// period is the one its offer ID is listed under (spend.Of), "unknown" when
// the catalogue no longer lists it.
func Count(servers []*baremetal.Server, offers spend.Offers, now time.Time) Counts {
	out := Counts{}
	for _, s := range servers {
		if s.Status == baremetal.ServerStatusDeleting {
			continue
		}
		c := spend.Of(s, offers, now)
		billing := string(c.Billing)
		if billing == "" {
			billing = "unknown"
		}
		out[Key{NodeClass: c.NodeClass, Zone: string(s.Zone), Offer: s.OfferName, Billing: billing, Phase: install.PhaseOf(s)}]++
	}
	return out
}

// Gauge exports the last Counts. It is a Collector over one snapshot: a
// server gone from the listing leaves no series behind.
type Gauge struct {
	Offers spend.Offers
	Clock  func() time.Time

	mu     sync.Mutex
	counts Counts
	desc   *prometheus.Desc
}

// NewGauge registers the gauge with reg (nil: not registered).
func NewGauge(reg prometheus.Registerer, offers spend.Offers) *Gauge {
	g := &Gauge{Offers: offers, Clock: time.Now, desc: prometheus.NewDesc(Metric,
		"The cluster's servers by NodeClass, zone, offer, billing period and install phase (ordered, rescue, imaging, booting, joined, spare), from the last listing.",
		[]string{"nodeclass", "zone", "offer", "billing_period", "phase"}, nil)}
	if reg != nil {
		reg.MustRegister(g)
	}
	return g
}

// Update counts a complete listing of the cluster's servers.
func (g *Gauge) Update(servers []*baremetal.Server) {
	c := Count(servers, g.Offers, g.Clock())
	g.mu.Lock()
	defer g.mu.Unlock()
	g.counts = c
}

// Describe implements prometheus.Collector.
func (g *Gauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

// Collect implements prometheus.Collector.
func (g *Gauge) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, n := range g.counts {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(n), k.NodeClass, k.Zone, k.Offer, k.Billing, string(k.Phase))
	}
}
