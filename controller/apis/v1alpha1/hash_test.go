package v1alpha1

import "testing"

// sparesOnDeletion changes nothing on the nodes: setting it must not drift them.
func TestSparesOnDeletionIsNotDrift(t *testing.T) {
	nc := &ScalewayElasticMetalNodeClass{}
	nc.Spec.Billing.Periods = []string{"monthly"}
	before := nc.Hash()
	nc.Spec.Billing.SparesOnDeletion = SparesKeep
	if after := nc.Hash(); after != before {
		t.Fatalf("hash %s -> %s: setting sparesOnDeletion would replace every node", before, after)
	}
}
