package warmpool

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spend"
)

// Metrics of the warm pools: what they hold and what they cost, so that
// nobody pays for a pool by accident.
type Metrics struct {
	Servers    *prometheus.GaugeVec
	Hourly     *prometheus.GaugeVec
	Commitment *prometheus.GaugeVec
	Orders     *prometheus.CounterVec

	mu  sync.Mutex
	had bool
}

// NewMetrics registers the warm-pool metrics with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Servers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "karpenter_scaleway_em_warm_pool_servers",
			Help: "Servers of the NodeClasses' warm pools (spec.warmPool) by state: wanted (the spec), delivering (ordered, not delivered yet), ready (delivered, idle, paid).",
		}, []string{"nodeclass", "zone", "offer", "billing_period", "state"}),
		Hourly: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "karpenter_scaleway_em_warm_pool_cost_euros_per_hour",
			Help: "What a NodeClass's warm-pool servers cost per hour (EUR): hourly ones at their price per hour, monthly ones at their monthly price over 730 h.",
		}, []string{"nodeclass"}),
		Commitment: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "karpenter_scaleway_em_warm_pool_monthly_commitment_euros",
			Help: "Monthly fees (and setup fees of this month's orders) committed this calendar month for a NodeClass's monthly warm-pool servers (EUR).",
		}, []string{"nodeclass"}),
		Orders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "karpenter_scaleway_em_warm_pool_orders_total",
			Help: "Servers ordered for the NodeClasses' warm pools.",
		}, []string{"nodeclass", "zone", "offer", "billing_period"}),
	}
	if reg != nil {
		reg.MustRegister(m.Servers, m.Hourly, m.Commitment, m.Orders)
	}
	return m
}

func (m *Metrics) reset() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Servers.Reset()
	m.Hourly.Reset()
	m.Commitment.Reset()
	m.had = false
}

// hadPools: the last pass saw a pool (its gauges must be cleared).
func (m *Metrics) hadPools() bool {
	if m == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.had
}

func (m *Metrics) observe(nodeClass string, want map[Key]int, keep map[Key][]*baremetal.Server, offers spend.Offers, now time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.had = true
	var hourly, committed float64
	for k, n := range want {
		m.Servers.WithLabelValues(nodeClass, k.Zone, k.Offer, string(k.Billing), "wanted").Set(float64(n))
	}
	for k, list := range keep {
		for _, s := range list {
			state := "ready"
			if s.Status != baremetal.ServerStatusReady {
				state = "delivering"
			}
			m.Servers.WithLabelValues(nodeClass, k.Zone, k.Offer, string(k.Billing), state).Inc()
			c := spend.Of(s, offers, now)
			hourly += c.Hourly
			committed += c.Commitment
		}
	}
	m.Hourly.WithLabelValues(nodeClass).Set(hourly)
	m.Commitment.WithLabelValues(nodeClass).Set(committed)
}

func (m *Metrics) ordered(nodeClass string, k Key) {
	if m != nil {
		m.Orders.WithLabelValues(nodeClass, k.Zone, k.Offer, string(k.Billing)).Inc()
	}
}

var _ spend.Offers = (*catalog.Catalog)(nil)
