package install

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Each phase's error series exists at zero before any failure, so that the
// first failure shows in increase() and the install-failure alert.
func TestPhaseSeriesStartAtZero(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	if n := testutil.CollectAndCount(m.phaseSeconds); n != 8 {
		t.Errorf("%d phase series before any install, want 8 (4 phases x ok/error)", n)
	}
	for _, p := range []Phase{PhaseOrdered, PhaseRescue, PhaseImaging, PhaseBooting} {
		h := m.phaseSeconds.WithLabelValues(string(p), "error").(prometheus.Histogram)
		if n := testutil.CollectAndCount(h); n != 1 {
			t.Errorf("phase %s: no error series", p)
		}
	}
}
