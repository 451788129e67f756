package nodeinstall

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
)

// One series per install in progress, moving with its phase and gone with
// it; the timeouts the alert compares with are there from the start.
func TestPhaseGaugesFollowInstalls(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.timeouts(install.Timeouts{Delivery: 30 * time.Minute, Rescue: 15 * time.Minute, Imaging: 20 * time.Minute, Boot: 15 * time.Minute})
	t0 := time.Unix(1_800_000_000, 0)
	m.phaseStarted("a", "gp", install.PhaseOrdered, t0)
	m.phaseStarted("b", "gp", install.PhaseOrdered, t0)
	m.phaseStarted("a", "gp", install.PhaseImaging, t0.Add(5*time.Minute))
	want := `
# HELP karpenter_scaleway_em_install_phase_started_timestamp_seconds Unix time the current phase of each install in progress started (the server's phase-since tag); the series goes when the install ends.
# TYPE karpenter_scaleway_em_install_phase_started_timestamp_seconds gauge
karpenter_scaleway_em_install_phase_started_timestamp_seconds{nodeclaim="a",nodeclass="gp",phase="imaging"} 1.8000003e+09
karpenter_scaleway_em_install_phase_started_timestamp_seconds{nodeclaim="b",nodeclass="gp",phase="ordered"} 1.8e+09
# HELP karpenter_scaleway_em_install_phase_timeout_seconds The configured timeout of each install phase (DELIVERY_TIMEOUT, RESCUE_TIMEOUT, IMAGING_TIMEOUT, BOOT_TIMEOUT).
# TYPE karpenter_scaleway_em_install_phase_timeout_seconds gauge
karpenter_scaleway_em_install_phase_timeout_seconds{phase="booting"} 900
karpenter_scaleway_em_install_phase_timeout_seconds{phase="imaging"} 1200
karpenter_scaleway_em_install_phase_timeout_seconds{phase="ordered"} 1800
karpenter_scaleway_em_install_phase_timeout_seconds{phase="rescue"} 900
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), MetricPhaseStarted, MetricPhaseTimeout); err != nil {
		t.Fatal(err)
	}
	m.forget("a")
	m.forget("b")
	if n := testutil.CollectAndCount(m.phaseStart); n != 0 {
		t.Errorf("%d phase-start series after both installs ended", n)
	}
}
