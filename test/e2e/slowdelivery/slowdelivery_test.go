// Package slowdelivery holds the end-to-end test whose delivery outlasts
// Karpenter's 15-minute registration timeout on the real clock. It is its
// own package so that `go test ./...` runs it beside the other suites (it
// takes about 17 minutes, mostly waiting).
package slowdelivery

import (
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/e2e/harness"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// Delivery takes 16 minutes, everything else the test profile's
// milliseconds: the NodeClaim's registration would time out 15 minutes after
// its creation in Karpenter core, and the install controller holds the
// window while the install makes progress. One order, no release, one Ready
// node.
func TestDeliveryLongerThanTheRegistrationTimeout(t *testing.T) {
	const delivery = 16 * time.Minute
	e := harness.Start(t, harness.Setup{
		World:      world.Options{Sim: func(o *scwsim.Options) { o.Delays.Delivery = delivery }},
		Controller: world.ControllerOptions{Env: []string{"DELIVERY_TIMEOUT=30m"}},
		Timeout:    40 * time.Minute,
	})
	e.Run("slow", 1, "1", "1Gi", false)
	e.WaitBound("slow", 1, delivery+10*time.Minute)
	claims := e.NodeClaims()
	if len(claims) != 1 {
		t.Fatalf("%d NodeClaims, want the first one only", len(claims))
	}
	if age := time.Since(claims[0].CreationTimestamp.Time); age < 15*time.Minute {
		t.Fatalf("the NodeClaim is %s old: the test did not cross the registration timeout", age)
	}
	ready := 0
	for _, n := range e.Nodes() {
		for _, c := range n.Status.Conditions {
			if c.Type == "Ready" && c.Status == "True" {
				ready++
			}
		}
	}
	if ready != 1 {
		t.Errorf("%d Ready nodes, want 1", ready)
	}
	if n := e.W.Sim.CreatesByTag(world.TagNodeClaim)[claims[0].Name]; n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
	if n, _ := e.W.Sim.CountCalls("DELETE", `/servers/`); n != 0 {
		t.Errorf("%d servers released, want 0", n)
	}
	e.AssertNoDuplicateOrders()
	e.AssertNothingLeaked()
}
