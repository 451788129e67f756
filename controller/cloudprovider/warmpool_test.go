package cloudprovider_test

import (
	"testing"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// An hourly NodeClaim takes a delivered, pre-imaged warm-pool server instead
// of ordering, installs and joins on it without a reboot into rescue, and
// the pool orders a replacement.
func TestHourlyNodeClaimTakesAWarmPoolServer(t *testing.T) {
	e := startEnv(t, nil)
	const offer = "EM-A116X-SSD"
	e.updateNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
		nc.Spec.WarmPool = []v1alpha1.WarmPoolEntry{{Offer: offer, Servers: 1}}
	})
	pool := func() []scwsim.ServerState {
		var out []scwsim.ServerState
		for _, s := range e.w.Sim.Servers() {
			if s.Status != string(baremetal.ServerStatusDeleting) && scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagWarmPool, "true")) {
				out = append(out, s)
			}
		}
		return out
	}
	// The pool orders; the pre-imager boots the delivered server into a
	// keyed rescue and writes the image (the pool itself reboots nothing).
	e.eventually("the warm pool delivered and pre-imaged", func() bool {
		if _, err := e.p.WarmPool.Reconcile(e.ctx); err != nil {
			t.Fatal(err)
		}
		e.preImage(e.ctx)
		p := pool()
		return len(p) == 1 && spare.PreImaged(e.server(p[0].ID), e.currentImage())
	})
	warm := pool()[0]
	boots := e.rescueBoots(warm.ID)

	claim := e.nodeClaim(karpv1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{offer}})
	got := e.launch(claim)
	if _, id, _ := scaleway.ParseProviderID(got.Status.ProviderID); id != warm.ID {
		t.Fatalf("Create gave %s, not the warm-pool server %s", got.Status.ProviderID, warm.ID)
	}
	if n := e.creates(claim.Name); n != 0 {
		t.Fatalf("%d orders although a warm-pool server was there", n)
	}
	if !e.events.said(claim.Name, "ReusedSpare", warm.ID) {
		t.Error("no ReusedSpare event")
	}
	e.waitNode(got.Status.ProviderID)
	e.waitPhase(claim.Name, install.PhaseJoined)
	if n := e.rescueBoots(warm.ID) - boots; n != 0 {
		t.Errorf("%d reboots into rescue taking a pre-imaged pool server, want 0", n)
	}

	if _, err := e.p.WarmPool.Reconcile(e.ctx); err != nil {
		t.Fatal(err)
	}
	p := pool()
	if len(p) != 1 || p[0].ID == warm.ID {
		t.Fatalf("the taken server was not replaced in the pool: %+v", p)
	}
	e.assertNoDuplicatesNorLeaks()
}
