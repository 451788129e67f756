package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/e2e/harness"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// launched counts NodeClaims that have a provider ID.
func launched(claims []karpv1.NodeClaim) int {
	n := 0
	for _, c := range claims {
		if c.Status.ProviderID != "" {
			n++
		}
	}
	return n
}

// gauge reads an unlabelled gauge from the controller's metrics.
func gauge(e *harness.Env, name string) (string, error) {
	ctx, cancel := context.WithTimeout(e.Ctx, 10*time.Second)
	defer cancel()
	text, err := e.C.Metrics(ctx)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no %s in the metrics", name)
}

// Deliveries take two minutes (everything else the test profile's
// milliseconds). A second wave of pods arrives while the first wave's
// servers are still being delivered: Karpenter launches its NodeClaims at
// once, because every NodeClaim already has a provider ID and its cluster
// state is synced; then both waves end Ready, one server per NodeClaim.
func TestSecondWaveWhileTheFirstIsDelivered(t *testing.T) {
	e := harness.Start(t, harness.Setup{
		World:      world.Options{Sim: func(o *scwsim.Options) { o.Delays.Delivery = 2 * time.Minute }},
		Controller: world.ControllerOptions{Env: []string{"DELIVERY_TIMEOUT=10m"}},
	})
	e.Run("first", 2, "3", "1Gi", true)
	e.Eventually("the first wave's NodeClaims launched", harness.WaitLong, func() (bool, string) {
		n := launched(e.NodeClaims())
		return n == 2, fmt.Sprintf("%d launched; %s", n, e.Summary())
	})
	var first []string
	for _, s := range e.W.Sim.Servers() {
		first = append(first, s.ID)
	}
	e.Run("second", 2, "3", "1Gi", true)
	e.Eventually("the second wave's NodeClaims launched", harness.WaitLong, func() (bool, string) {
		n := launched(e.NodeClaims())
		return n == 4, fmt.Sprintf("%d launched; %s", n, e.Summary())
	})
	// Causality, not timing: the second wave was launched before any server
	// of the first wave was even delivered.
	for _, id := range first {
		if s, ok := e.W.Sim.Server(id); !ok || s.Status != "delivering" {
			t.Fatalf("first-wave server %s was %q when the second wave launched: the second wave waited for the first", id, s.Status)
		}
	}
	// Karpenter's gauge drops to 0 for a moment whenever its informers are
	// behind the API server (a NodeClaim listed before its state caught
	// up), which a loaded machine shows: what must not happen is that it
	// stays 0 while the installs run (NodeClaims without provider IDs).
	e.Eventually("cluster state synced during the installs", time.Minute, func() (bool, string) {
		v, err := gauge(e, "karpenter_cluster_state_synced")
		return err == nil && v == "1", fmt.Sprintf("karpenter_cluster_state_synced = %q (%v)", v, err)
	})
	for _, id := range first {
		if s, ok := e.W.Sim.Server(id); !ok || s.Status != "delivering" {
			t.Fatalf("first-wave server %s was %q when the cluster state was seen synced: want it still delivering", id, s.Status)
		}
	}
	e.WaitBound("first", 2, 10*time.Minute)
	e.WaitBound("second", 2, 10*time.Minute)
	if n := len(e.W.Sim.Servers()); n != 4 {
		t.Errorf("%d servers for 4 NodeClaims", n)
	}
	e.AssertNoDuplicateOrders()
	e.AssertNothingLeaked()
}

// An empty node is consolidated while another NodeClaim's server is still
// held in delivery: disruption no longer waits for installs.
func TestConsolidationActsDuringAnInstall(t *testing.T) {
	e := harness.Start(t, harness.Setup{})
	idle := e.Run("idle", 1, "3", "1Gi", false)
	e.WaitBound("idle", 1, harness.WaitLong)
	servers := e.W.Sim.Servers()
	if len(servers) != 1 {
		t.Fatalf("%d servers for one pod", len(servers))
	}
	idleServer := servers[0].ID
	// Servers ordered from now on stay in delivery until the fault goes.
	hold := e.W.Sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStuck, State: "delivering"})
	// 10 CPUs do not fit the idle node's offer: a second NodeClaim.
	e.Run("busy", 1, "10", "4Gi", false)
	e.Eventually("the busy pod's NodeClaim launched, its server held in delivery", harness.WaitLong, func() (bool, string) {
		return launched(e.NodeClaims()) == 2 && len(e.W.Sim.Servers()) == 2, e.Summary()
	})
	var busyServer string
	for _, s := range e.W.Sim.Servers() {
		if s.ID != idleServer {
			busyServer = s.ID
		}
	}
	idle.ScaleTo(0)
	e.Eventually("the idle node consolidated", harness.WaitLong, func() (bool, string) {
		_, ok := e.W.Sim.Server(idleServer)
		return !ok, e.Summary()
	})
	if s, ok := e.W.Sim.Server(busyServer); !ok || s.Status != "delivering" {
		t.Fatalf("the busy server was %q when the idle node went: the test did not consolidate during an install", s.Status)
	}
	e.W.Sim.RemoveFault(hold)
	e.WaitBound("busy", 1, harness.WaitLong)
	e.AssertNoDuplicateOrders()
	e.AssertNothingLeaked()
}
