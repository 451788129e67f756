package breaker

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metric names.
const (
	MetricState    = "karpenter_scaleway_em_install_breaker_state"
	MetricOpened   = "karpenter_scaleway_em_install_breaker_opened_total"
	MetricRefused  = "karpenter_scaleway_em_install_breaker_refused_orders_total"
	MetricFailures = "karpenter_scaleway_em_install_failures_total"
)

// Metrics of the breaker. A nil *Metrics records nothing.
type Metrics struct {
	state    *prometheus.GaugeVec
	opened   *prometheus.CounterVec
	refused  *prometheus.CounterVec
	failures *prometheus.CounterVec
}

// NewMetrics registers the breaker's metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricState,
			Help: "1 for the install-failure breaker's current state per NodeClass (closed, open, probe_allowed, probing), 0 for the others."},
			[]string{"nodeclass", "state"}),
		opened: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricOpened,
			Help: "Times consecutive install failures stopped orders for a NodeClass (a failed probe opens it again)."},
			[]string{"nodeclass"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRefused,
			Help: "Creates refused because the NodeClass's install-failure breaker is open."},
			[]string{"nodeclass"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricFailures,
			Help: "Installs failed for good, by NodeClass, phase and error code (em-imager's, or phase_failed)."},
			[]string{"nodeclass", "phase", "code"}),
	}
	if reg != nil {
		reg.MustRegister(m.state, m.opened, m.refused, m.failures)
	}
	return m
}

func (m *Metrics) setState(nodeClass string, s State) {
	if m == nil {
		return
	}
	for _, st := range States {
		v := 0.0
		if st == s {
			v = 1
		}
		m.state.WithLabelValues(nodeClass, string(st)).Set(v)
	}
}

func (m *Metrics) refusedOrder(nodeClass string) {
	if m != nil {
		m.refused.WithLabelValues(nodeClass).Inc()
	}
}

func (m *Metrics) failure(nodeClass, phase, code string) {
	if m != nil {
		m.failures.WithLabelValues(nodeClass, phase, code).Inc()
	}
}

func (m *Metrics) openedFor(nodeClass string) {
	if m != nil {
		m.opened.WithLabelValues(nodeClass).Inc()
	}
}
