package garbagecollection

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Every reason's series exists at zero before the first release, so that
// increase() and the leaked-servers alert see the first one.
func TestCollectedSeriesStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewCollectedCounter(reg)
	want := `
# HELP karpenter_scaleway_em_leaked_servers_collected_total Servers released by the provider's garbage collection, by reason.
# TYPE karpenter_scaleway_em_leaked_servers_collected_total counter
karpenter_scaleway_em_leaked_servers_collected_total{reason="duplicate"} 0
karpenter_scaleway_em_leaked_servers_collected_total{reason="no_nodeclaim"} 0
karpenter_scaleway_em_leaked_servers_collected_total{reason="no_nodeclaim_tag"} 0
karpenter_scaleway_em_leaked_servers_collected_total{reason="spare_expired"} 0
karpenter_scaleway_em_leaked_servers_collected_total{reason="spare_without_nodeclass"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
