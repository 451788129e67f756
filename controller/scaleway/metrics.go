package scaleway

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names (all in the karpenter_scaleway_em namespace).
const (
	MetricAPICalls        = "karpenter_scaleway_em_api_calls_total"
	MetricAPICallDuration = "karpenter_scaleway_em_api_call_duration_seconds"
	MetricAPIRetries      = "karpenter_scaleway_em_api_retries_total"
	MetricPollerWaiters   = "karpenter_scaleway_em_api_poller_waiters"
	MetricPollerLists     = "karpenter_scaleway_em_api_poller_lists_total"
)

type metrics struct {
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	retries  *prometheus.CounterVec
	waiters  *prometheus.GaugeVec
	lists    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricAPICalls,
			Help: "Scaleway API call attempts by operation and result (ok, not_found, out_of_stock, quota, transient, throttled, server_error, refused, timeout, permission, unauthorized, invalid, network, canceled, other).",
		}, []string{"op", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricAPICallDuration,
			Help:    "Duration of Scaleway API call attempts, including client-side rate-limit waits and all pages of a list.",
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"op"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricAPIRetries,
			Help: "Scaleway API call retries by operation and the class of the failure that caused them.",
		}, []string{"op", "reason"}),
		waiters: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricPollerWaiters,
			Help: "Callers currently waiting on the batched server poller, by zone.",
		}, []string{"zone"}),
		lists: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricPollerLists,
			Help: "Batched ListServers rounds made by the poller, by zone.",
		}, []string{"zone"}),
	}
	var err error
	m.calls, err = register(reg, m.calls)
	if err != nil {
		return nil, err
	}
	m.duration, err = register(reg, m.duration)
	if err != nil {
		return nil, err
	}
	m.retries, err = register(reg, m.retries)
	if err != nil {
		return nil, err
	}
	m.waiters, err = register(reg, m.waiters)
	if err != nil {
		return nil, err
	}
	m.lists, err = register(reg, m.lists)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// register adopts an already registered identical collector, so that several
// Clients (tests, or a restart of the client inside one process) share one
// series instead of failing.
func register[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}
