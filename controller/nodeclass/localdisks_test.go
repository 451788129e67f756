package nodeclass

import (
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/talosgen"
)

// The local-disk policy reaches both the catalogue (prediction) and talosgen
// (the node), and only a real change of policy drifts nodes.
func TestLocalDisksTranslation(t *testing.T) {
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	before := nc.Hash()

	nc.Spec.LocalDisks = "Unused"
	if nc.Hash() != before {
		t.Error("writing the default Unused changed the hash: every node of the NodeClass would drift")
	}

	nc.Spec.LocalDisks = "Ephemeral"
	if nc.Hash() == before {
		t.Error("Ephemeral hashes like Unused: nodes would keep EPHEMERAL on the system disk")
	}
	if f := Filter(nc, "fr-par-2"); f.LocalDisks != localdisks.Ephemeral {
		t.Errorf("catalog filter local disks %q, want Ephemeral", f.LocalDisks)
	}
	if s := Settings(nc); s.LocalDisks != "Ephemeral" {
		t.Errorf("talosgen settings local disks %q, want Ephemeral", s.LocalDisks)
	}
}

// The NodeClass's config check renders every policy: a NodeClass asking for
// Ephemeral is not reported broken because the sample node has one disk.
func TestJoinConfigCheckUnderEveryPolicy(t *testing.T) {
	join, err := talosgen.NewClusterJoinMaterial("https://k8s.example.test:6443", "c")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range localdisks.Policies {
		nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
		nc.Spec.LocalDisks = string(p)
		if _, err := talosgen.Render(join, sampleNodeClaim(nc), Settings(nc), sampleReport(), talosgen.Network{}); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}
