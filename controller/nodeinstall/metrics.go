package nodeinstall

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
)

// Metric names the chart's alerts read.
const (
	MetricPhaseStarted = "karpenter_scaleway_em_install_phase_started_timestamp_seconds"
	MetricPhaseTimeout = "karpenter_scaleway_em_install_phase_timeout_seconds"
)

// Metrics of the install controller.
type Metrics struct {
	inProgress   prometheus.Gauge
	finishedN    *prometheus.CounterVec
	phaseStart   *prometheus.GaugeVec
	phaseTimeout *prometheus.GaugeVec
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
		phaseStart: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricPhaseStarted,
			Help: "Unix time the current phase of each install in progress started (the server's phase-since tag); the series goes when the install ends.",
		}, []string{"nodeclaim", "nodeclass", "phase"}),
		phaseTimeout: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricPhaseTimeout,
			Help: "The configured timeout of each install phase (DELIVERY_TIMEOUT, RESCUE_TIMEOUT, IMAGING_TIMEOUT, BOOT_TIMEOUT).",
		}, []string{"phase"}),
	}
	if reg != nil {
		reg.MustRegister(m.inProgress, m.finishedN, m.phaseStart, m.phaseTimeout)
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

// phaseStarted records that claim's install is in phase p since since (one
// series per install: the previous phase's goes).
func (m *Metrics) phaseStarted(claim, nodeClass string, p install.Phase, since time.Time) {
	if m == nil {
		return
	}
	m.forget(claim)
	m.phaseStart.WithLabelValues(claim, nodeClass, string(p)).Set(float64(since.Unix()))
}

// forget drops claim's series: its install ended.
func (m *Metrics) forget(claim string) {
	if m != nil {
		m.phaseStart.DeletePartialMatch(prometheus.Labels{"nodeclaim": claim})
	}
}

func (m *Metrics) timeouts(t install.Timeouts) {
	if m == nil {
		return
	}
	for _, p := range install.ActivePhases {
		m.phaseTimeout.WithLabelValues(string(p)).Set(t.Of(p).Seconds())
	}
}
