package spend

import (
	"context"
	"sync"
	"time"

	"github.com/awslabs/operatorpkg/reconciler"
	"github.com/awslabs/operatorpkg/singleton"
	"github.com/prometheus/client_golang/prometheus"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"k8s.io/utils/clock"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/clocks"
)

// Metric names.
const (
	MetricHourly     = "karpenter_scaleway_em_spend_hourly_eur"
	MetricCommitment = "karpenter_scaleway_em_spend_monthly_commitment_eur"
	MetricUnpriced   = "karpenter_scaleway_em_spend_unpriced_servers"
)

// Controller recomputes the spend gauges every Interval from one listing of
// the cluster's servers per zone. Only the leader runs it, so only the
// leader exports the gauges.
type Controller struct {
	// Servers lists every server of the cluster, or fails
	// ((*inventory.Inventory).Servers: every zone it may have servers in).
	Servers  func(ctx context.Context) ([]*baremetal.Server, error)
	Offers   Offers
	Interval time.Duration
	Clock    clock.Clock
	Gauges   *Gauges
	// Listed, when set, is given each complete listing too (the servers
	// by phase gauge): one listing feeds both.
	Listed func(servers []*baremetal.Server)
}

// Reconcile lists and recomputes. A failed listing keeps the previous
// values: a partial view would show a drop in spend that did not happen.
func (c *Controller) Reconcile(ctx context.Context) (reconciler.Result, error) {
	interval := c.Interval
	if interval <= 0 {
		interval = time.Minute
	}
	all, err := c.Servers(ctx)
	if err != nil {
		return reconciler.Result{}, err
	}
	c.Gauges.Set(Compute(all, c.Offers, c.Clock.Now()))
	if c.Listed != nil {
		c.Listed(all)
	}
	return reconciler.Result{RequeueAfter: interval}, nil
}

// Register adds the singleton to the manager.
func (c *Controller) Register(_ context.Context, m manager.Manager) error {
	c.Clock = clocks.Or(c.Clock)
	return controllerruntime.NewControllerManagedBy(m).
		Named("scaleway-em.spend").
		WatchesRawSource(singleton.Source()).
		Complete(singleton.AsReconciler(c))
}

// Gauges export the last Totals. They are a Collector over one snapshot, so
// a scrape never sees half of a recomputation, and a NodeClass whose servers
// are all gone leaves no stale series.
type Gauges struct {
	mu     sync.Mutex
	totals Totals

	hourly, commitment, unpriced *prometheus.Desc
}

// NewGauges registers the gauges with reg (nil: not registered).
func NewGauges(reg prometheus.Registerer) *Gauges {
	g := &Gauges{
		hourly: prometheus.NewDesc(MetricHourly,
			"What the cluster's servers cost per hour (EUR): hourly servers at their price per hour, monthly ones at their monthly price over 730 h; by NodeClass, billing period and usage (node, or spare: a monthly server kept for reuse, paid and idle).",
			[]string{"nodeclass", "billing_period", "usage"}, nil),
		commitment: prometheus.NewDesc(MetricCommitment,
			"Monthly commitment (EUR): the monthly price of every monthly server, plus the setup fee of those ordered in the current calendar month (UTC); by NodeClass and usage.",
			[]string{"nodeclass", "usage"}, nil),
		unpriced: prometheus.NewDesc(MetricUnpriced,
			"Servers whose offer the catalogue no longer prices (withdrawn offers): the spend leaves them out.",
			[]string{"nodeclass"}, nil),
	}
	if reg != nil {
		reg.MustRegister(g)
	}
	return g
}

// Set replaces the exported totals.
func (g *Gauges) Set(t Totals) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.totals = t
}

// Totals returns the last totals set.
func (g *Gauges) Totals() Totals {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.totals
}

// Describe implements prometheus.Collector.
func (g *Gauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.hourly
	ch <- g.commitment
	ch <- g.unpriced
}

// Collect implements prometheus.Collector.
func (g *Gauges) Collect(ch chan<- prometheus.Metric) {
	t := g.Totals()
	commitment := map[[2]string]float64{}
	unpriced := map[string]int{}
	for k, a := range t {
		billing := string(k.Billing)
		if billing == "" {
			billing = "unknown"
		}
		ch <- prometheus.MustNewConstMetric(g.hourly, prometheus.GaugeValue, a.Hourly, k.NodeClass, billing, k.Usage)
		commitment[[2]string{k.NodeClass, k.Usage}] += a.Commitment
		unpriced[k.NodeClass] += a.Unpriced
	}
	for k, v := range commitment {
		ch <- prometheus.MustNewConstMetric(g.commitment, prometheus.GaugeValue, v, k[0], k[1])
	}
	for nc, n := range unpriced {
		ch <- prometheus.MustNewConstMetric(g.unpriced, prometheus.GaugeValue, float64(n), nc)
	}
}
