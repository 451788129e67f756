package cloudprovider_test

import (
	"errors"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// Issue 31 item 5: the API takes a claim's order and its answer is lost;
// listings do not show the server yet when Karpenter retries Create, and a
// spare fits the claim meanwhile. The retry must wait for its own order,
// not take the spare: that would be two servers for one claim.
func TestRetriedCreateWaitsForItsLostOrderInsteadOfTakingASpare(t *testing.T) {
	l := startLight(t, nil, func(o *scwsim.Options) { o.ListLag = time.Hour })
	l.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultAnswerLost, Method: "POST", Path: `/servers$`, Times: 1})
	claim := l.claim("claim-a", catalog.BillingMonthly)
	if _, err := l.p.Create(l.ctx, claim); err == nil {
		t.Fatal("Create succeeded: the test did not lose the order's answer")
	}
	if n := len(l.serversOf(claim.Name)); n != 1 {
		t.Fatalf("%d servers for the claim after the lost answer, want the 1 the API took", n)
	}
	// Another claim's monthly server is kept as a spare meanwhile.
	spareID := l.spare()
	_, err := l.p.Create(l.ctx, claim)
	if !errors.Is(err, scaleway.ErrOrderInFlight) {
		t.Errorf("retried Create = %v, want ErrOrderInFlight", err)
	}
	if n := len(l.serversOf(claim.Name)); n != 1 {
		t.Fatalf("%d servers for one claim: the retry took the spare or ordered while its order was in flight", n)
	}
	if s, _ := l.sim.Server(spareID); !scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagPhase, string(install.PhaseSpare))) {
		t.Fatalf("the spare was taken: %v", s.Tags)
	}
	if !l.rec.Has("OrderInFlight") {
		t.Errorf("no OrderInFlight event said why the claim waits; events: %s", l.rec.Reasons())
	}
}
