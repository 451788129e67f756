package nodeinstall

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
)

// Metrics of the install controller.
type Metrics struct {
	inProgress prometheus.Gauge
	finishedN  *prometheus.CounterVec
}

// NewMetrics registers the controller's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		inProgress: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "karpenter_scaleway_em_installs_in_progress",
			Help: "Installs being driven by this controller (one per NodeClaim between Create and the node's registration).",
		}),
		finishedN: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "karpenter_scaleway_em_installs_finished_total",
			Help: "Installs that ended, by result (joined, failed) and the phase they ended in.",
		}, []string{"result", "phase"}),
	}
	if reg != nil {
		reg.MustRegister(m.inProgress, m.finishedN)
	}
	return m
}

func (m *Metrics) started() {
	if m != nil {
		m.inProgress.Inc()
	}
}

func (m *Metrics) stopped() {
	if m != nil {
		m.inProgress.Dec()
	}
}

func (m *Metrics) finished(p install.Phase, result string) {
	if m != nil {
		m.finishedN.WithLabelValues(result, string(p)).Inc()
	}
}
