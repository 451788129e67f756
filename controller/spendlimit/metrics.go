package spendlimit

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
)

// Metric names.
const (
	MetricLimit    = "karpenter_scaleway_em_spend_limit_eur"
	MetricRefusals = "karpenter_scaleway_em_spend_limit_refused_orders_total"
)

// Metrics of the limits. A nil *Metrics records nothing.
type Metrics struct {
	refusals *prometheus.CounterVec
}

// NewMetrics registers the refusal counter, and the limit gauges read from
// the NodeClasses kube holds (a cached reader: a scrape lists the cache),
// with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer, kube client.Reader) *Metrics {
	m := &Metrics{refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRefusals,
		Help: "Orders not placed because they would cross a NodeClass's spend limit (limit: hourly_spend, monthly_commitment)."},
		[]string{"nodeclass", "limit"})}
	if reg != nil {
		reg.MustRegister(m.refusals)
		if kube != nil {
			reg.MustRegister(&limitGauges{kube: kube, desc: prometheus.NewDesc(MetricLimit,
				"A NodeClass's spend limit (spec.limits): hourly_spend in EUR/h, monthly_commitment in EUR; compare with karpenter_scaleway_em_spend_hourly_eur and karpenter_scaleway_em_spend_monthly_commitment_eur. No series for a limit not set.",
				[]string{"nodeclass", "limit"}, nil)})
		}
	}
	return m
}

func (m *Metrics) refusal(nodeClass, limit string) {
	if m != nil {
		m.refusals.WithLabelValues(nodeClass, limit).Inc()
	}
}

// limitGauges exports every NodeClass's limits at scrape time.
type limitGauges struct {
	kube client.Reader
	desc *prometheus.Desc
}

func (g *limitGauges) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *limitGauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list := &v1alpha1.ScalewayElasticMetalNodeClassList{}
	if err := g.kube.List(ctx, list); err != nil {
		return
	}
	for _, nc := range list.Items {
		if nc.Spec.Limits == nil {
			continue
		}
		if v, ok := v1alpha1.EUR(nc.Spec.Limits.HourlySpend); ok {
			ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, nc.Name, LimitHourly)
		}
		if v, ok := v1alpha1.EUR(nc.Spec.Limits.MonthlyCommitment); ok {
			ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, nc.Name, LimitCommitment)
		}
	}
}
