package identity

import "github.com/prometheus/client_golang/prometheus"

// Metrics of the rule.
type Metrics struct {
	// LeftAlone is karpenter_scaleway_em_servers_left_alone{reason}.
	LeftAlone *prometheus.GaugeVec
	// Adopted is karpenter_scaleway_em_servers_adopted_total.
	Adopted prometheus.Counter
	// Renamed is karpenter_scaleway_em_servers_renamed_total.
	Renamed prometheus.Counter
}

// NewMetrics registers the metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		LeftAlone: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "karpenter_scaleway_em_servers_left_alone",
			Help: "Servers tagged with this cluster's name that it leaves alone, as of the last listing: another cluster's identity (foreign_identity: two clusters share the name) or no identity that this cluster could prove its own (no_identity).",
		}, []string{"reason"}),
		Adopted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "karpenter_scaleway_em_servers_adopted_total",
			Help: "Servers ordered before cluster identities that were adopted (tagged with this cluster's identity).",
		}),
		Renamed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "karpenter_scaleway_em_servers_renamed_total",
			Help: "Servers of this cluster's identity found with the name the cluster had before it was renamed, retagged with the new name.",
		}),
	}
	// At zero from the start, so that an alert sees the first one.
	for _, r := range []string{ReasonForeignIdentity, ReasonNoIdentity} {
		m.LeftAlone.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.LeftAlone, m.Adopted, m.Renamed)
	}
	return m
}
