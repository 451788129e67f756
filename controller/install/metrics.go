package install

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// Metrics of the install pipeline.
type Metrics struct {
	phaseSeconds *prometheus.HistogramVec
	imagerMBps   prometheus.Histogram
	imagerBytes  prometheus.Counter
	kexec        *prometheus.CounterVec
}

// NewMetrics registers the pipeline's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		phaseSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "karpenter_scaleway_em_install_phase_duration_seconds",
			Help:    "Time spent in one install phase (one run of it: a resumed phase is counted again), by phase and result.",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 240, 480, 900, 1800, 3600},
		}, []string{"phase", "result"}),
		imagerMBps: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "karpenter_scaleway_em_imager_throughput_mbytes_per_second",
			Help:    "Raw image MB (10^6 bytes) written per second by em-imager, per install.",
			Buckets: []float64{10, 25, 50, 100, 200, 400, 800, 1600, 3200},
		}),
		imagerBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "karpenter_scaleway_em_imager_raw_bytes_total",
			Help: "Raw image bytes em-imager wrote and verified.",
		}),
		kexec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "karpenter_scaleway_em_kexec_boots_total",
			Help: "Installs' kexec boots from rescue by outcome: jumped, refused (Scaleway's reboot instead), unreachable (rescue did not let the install in; reboot instead), no-node (no node within the grace after a jump; reboot instead).",
		}, []string{"result"}),
	}
	for _, r := range []string{KexecJumped, KexecRefused, KexecUnreachable, KexecNoNode} {
		m.kexec.WithLabelValues(r)
	}
	// Every series exists from the start, at zero: increase() cannot see a
	// counter's first step when the series is born with it, so the first
	// failure of a phase would otherwise never reach an alert.
	for _, p := range ActivePhases {
		for _, result := range []string{"ok", "error"} {
			m.phaseSeconds.WithLabelValues(string(p), result)
		}
	}
	if reg != nil {
		reg.MustRegister(m.phaseSeconds, m.imagerMBps, m.imagerBytes, m.kexec)
	}
	return m
}

func (m *Metrics) observePhase(p Phase, start, end time.Time, err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.phaseSeconds.WithLabelValues(string(p), result).Observe(end.Sub(start).Seconds())
}

func (m *Metrics) observeImager(r *report.Report) {
	if m == nil || r.Timings == nil {
		return
	}
	m.imagerMBps.Observe(r.Timings.RawMBps)
	if r.Image != nil {
		m.imagerBytes.Add(float64(r.Image.RawBytes))
	}
}

func (m *Metrics) observeKexec(result string) {
	if m == nil || result == "" {
		return
	}
	m.kexec.WithLabelValues(result).Inc()
}
