package cloudprovider_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/nodeinstall"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// #13: the metal-iso partition em-imager wrote is lost before the server
// boots Talos. Talos booted with talos.config=metal-iso finds no volume and
// stays down (fail closed: no maintenance API, no Node); the booting phase
// times out, the install fails, the server is released and the install's
// phase gauge goes with it. Nothing ever talks to :50000.
func TestLostMetalISOFailsClosedAndReleases(t *testing.T) {
	e := startEnv(t, nil)
	claim := e.nodeClaim()
	got := e.launch(claim)
	_, id, _ := scaleway.ParseProviderID(got.Status.ProviderID)
	e.w.Machines.LoseMetalISO(id)

	e.waitPhase(claim.Name, install.PhaseBooting)
	e.eventually("the nodeclaim labelled with the booting phase", func() bool {
		return e.claim(claim.Name).Labels[v1alpha1.LabelInstallPhase] == string(install.PhaseBooting)
	})
	e.eventually("the install's booting phase in the phase-start gauge", func() bool {
		return phaseStartSeries(t, e, claim.Name, install.PhaseBooting) == 1
	})
	e.eventually("Talos down for want of a metal-iso volume", func() bool { return e.machineDid(id, "config-missing") })
	if !e.machineDid(id, "metal-iso-lost") {
		t.Fatal("the simulated disk never lost its metal-iso partition")
	}
	calls, err := e.w.Machines.TalosAPICalls(id)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 0 {
		t.Errorf("%d calls to the Talos API on :50000 in Disk mode", len(calls))
	}

	e.assertInstallFailed(claim.Name, "phase booting", "node's registration", "released")
	if n := phaseStartSeries(t, e, claim.Name, ""); n != 0 {
		t.Errorf("%d phase-start series of the failed install remain", n)
	}
	nodes := &corev1.NodeList{}
	if err := e.kube.List(e.ctx, nodes, client.MatchingFields{"spec.providerID": got.Status.ProviderID}); err == nil && len(nodes.Items) != 0 {
		t.Errorf("a node registered without its config: %s", nodes.Items[0].Name)
	}
	e.assertNoDuplicatesNorLeaks()
}

// machineDid reports whether the simulated machine of server id recorded what.
func (e *env) machineDid(id, what string) bool {
	for _, ev := range e.w.Machines.Events() {
		if ev.ServerID == id && ev.What == what {
			return true
		}
	}
	return false
}

// phaseStartSeries counts the phase-start series of claim (in phase, or
// any phase when empty).
func phaseStartSeries(t *testing.T, e *env, claim string, phase install.Phase) int {
	t.Helper()
	families, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		if f.GetName() != nodeinstall.MetricPhaseStarted {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["nodeclaim"] == claim && (phase == "" || labels["phase"] == string(phase)) {
				n++
			}
		}
	}
	return n
}
