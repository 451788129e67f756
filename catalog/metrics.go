package catalog

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

const metricPrefix = "karpenter_scaleway_em_catalog_"

// MetricOfferingPriceEstimate has the name and labels of
// karpenter-provider-aws's metric (instance_type, capacity_type, zone), so
// dashboards made for it work, plus billing_period: an Elastic Metal offer
// has an hourly and a monthly price.
const MetricOfferingPriceEstimate = "karpenter_cloudprovider_instance_type_offering_price_estimate"

type metrics struct {
	refreshes      *prometheus.CounterVec   // zone, billing_period, result
	refreshSeconds *prometheus.HistogramVec // result
	lastSuccess    *prometheus.GaugeVec     // zone
	marks          *prometheus.CounterVec   // reason
	expiries       *prometheus.CounterVec   // reason
	unavailable    *prometheus.GaugeVec     // reason
	offers         *prometheus.GaugeVec     // zone, billing_period, stock
	zoneOrigin     *prometheus.GaugeVec     // zone, origin
	builds         prometheus.Counter
	priceEstimate  *prometheus.GaugeVec // instance_type, capacity_type, zone, billing_period
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		refreshes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPrefix + "refresh_total",
			Help: "ListOffers refreshes by zone, billing period and result (success or error).",
		}, []string{"zone", "billing_period", "result"}),
		refreshSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    metricPrefix + "refresh_duration_seconds",
			Help:    "Duration of a whole catalogue refresh (every zone), by result.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 10),
		}, []string{"result"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricPrefix + "last_successful_refresh_timestamp_seconds",
			Help: "Unix time of the last refresh of a zone that answered for both billing periods.",
		}, []string{"zone"}),
		marks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPrefix + "unavailable_marks_total",
			Help: "Offerings marked unavailable after a failed order, by reason.",
		}, []string{"reason"}),
		expiries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPrefix + "unavailable_expiries_total",
			Help: "Unavailable marks that expired, by reason.",
		}, []string{"reason"}),
		unavailable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricPrefix + "unavailable_offerings",
			Help: "Offerings currently in the unavailable cache, by reason.",
		}, []string{"reason"}),
		offers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricPrefix + "offers",
			Help: "Enabled offers in the catalogue by zone, billing period and stock level.",
		}, []string{"zone", "billing_period", "stock"}),
		zoneOrigin: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricPrefix + "zone_data_origin",
			Help: "1 for the origin of each zone's current data: live, recorded or derived (snapshot).",
		}, []string{"zone", "origin"}),
		priceEstimate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricOfferingPriceEstimate,
			Help: "Instance type offering estimated hourly price (EUR) used when making informed decisions on node cost calculation, based on instance type, capacity type, zone and billing period. Monthly: the price per month over 730 h plus the setup fee spread over one month.",
		}, []string{"instance_type", "capacity_type", "zone", "billing_period"}),
		builds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricPrefix + "instance_type_builds_total",
			Help: "Instance type lists built (cache misses of InstanceTypes).",
		}),
	}
	m.refreshes = register(reg, m.refreshes)
	m.refreshSeconds = register(reg, m.refreshSeconds)
	m.lastSuccess = register(reg, m.lastSuccess)
	m.marks = register(reg, m.marks)
	m.expiries = register(reg, m.expiries)
	m.unavailable = register(reg, m.unavailable)
	m.offers = register(reg, m.offers)
	m.zoneOrigin = register(reg, m.zoneOrigin)
	m.builds = register(reg, m.builds)
	m.priceEstimate = register(reg, m.priceEstimate)
	return m
}

// register adds c to reg, or reuses the collector already registered under the same name (a second Catalog
// on the same registry shares the series).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err) // a name clash with a different metric type is a programming error
	}
	return c
}
