package cloudprovider_test

import (
	"testing"

	"k8s.io/utils/clock"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
)

// iamKeys is the number of IAM SSH keys in the simulated project.
func (e *env) iamKeys() int {
	e.t.Helper()
	keys, err := e.p.API.ListSSHKeys(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return len(keys)
}

// sweep runs one pass of the provider's garbage collection.
func (e *env) sweep() {
	e.t.Helper()
	gc := e.p.GarbageCollection
	gc.Clock = clock.RealClock{}
	if _, err := gc.Reconcile(e.ctx); err != nil {
		e.t.Fatal(err)
	}
}

// #16: the rescue key is in IAM only while an install logs into rescue.
// Checking the credentials registers nothing; two installs mid-imaging keep
// it across a controller restart (their phase tags stand for the holds the
// old process had) and until the last one is done; a new install registers
// it again before its reboot into rescue.
func TestRescueKeyIsInIAMOnlyWhileAnInstallNeedsIt(t *testing.T) {
	e := startEnv(t, nil) // the NodeClass's status, credentials check included, is reconciled
	e.reconcileNodeClass()
	if n := e.iamKeys(); n != 0 {
		t.Fatalf("%d IAM SSH keys after the credentials check, want 0: it must register nothing", n)
	}

	a, b := e.nodeClaim(), e.nodeClaim()
	gotA, _, _ := e.imagingInRescue(a) // registers the key for its rescue boot, as an install does
	gotB, _, _ := e.imagingInRescue(b)
	if n := e.iamKeys(); n != 1 {
		t.Fatalf("%d IAM SSH keys while two servers are in rescue, want 1", n)
	}
	e.sweep()
	if n := e.iamKeys(); n != 1 {
		t.Fatalf("the sweep removed the key two installs hold")
	}
	// A restart mid-imaging: the new process holds nothing in memory.
	e.p = e.newProvider()
	e.sweep()
	if n := e.iamKeys(); n != 1 {
		t.Fatalf("after a restart the sweep removed the key the servers in imaging need")
	}

	e.launched(a.Name, gotA)
	e.waitNode(gotA.Status.ProviderID)
	e.sweep()
	if n := e.iamKeys(); n != 1 {
		t.Fatalf("the key left IAM while %s is still in imaging", b.Name)
	}
	e.launched(b.Name, gotB)
	e.waitNode(gotB.Status.ProviderID)
	e.sweep()
	if n := e.iamKeys(); n != 0 {
		t.Fatalf("%d IAM SSH keys once no install logs into rescue, want 0", n)
	}

	// The next install registers it again right before its reboot into rescue.
	c := e.nodeClaim()
	gotC := e.launch(c)
	e.waitPhase(c.Name, install.PhaseImaging)
	if n := e.iamKeys(); n != 1 {
		t.Fatalf("%d IAM SSH keys while an install is in imaging, want 1", n)
	}
	e.waitNode(gotC.Status.ProviderID)
	e.waitPhase(c.Name, install.PhaseJoined)
	if h := e.p.RescueKeys.Holders(); h != 0 {
		t.Fatalf("%d holds on the rescue key after the install", h)
	}
	e.sweep()
	if n := e.iamKeys(); n != 0 {
		t.Fatalf("%d IAM SSH keys after the last install, want 0", n)
	}
	e.reconcileNodeClass()
	if n := e.iamKeys(); n != 0 {
		t.Fatalf("the credentials check registered the key again")
	}
	e.assertNoDuplicatesNorLeaks()
}
