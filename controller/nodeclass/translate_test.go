package nodeclass

import (
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
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
