package cloudprovider_test

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/breaker"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
)

// Karpenter's registration timeout deletes a NodeClaim whose node never
// registers at the instant the install's own boot timeout would fail it,
// and Delete stops the install before its failure handling counts: the
// deletion itself must count as a failed install for the breaker, or a
// NodeClass whose nodes never join (a join Secret for another cluster)
// orders servers forever. Here the install's boot timeout is far away, so
// only Delete can count it.
func TestNodeClaimDeletedWhileBootingCountsForTheBreaker(t *testing.T) {
	e := startLegacyEnv(t, nil)
	e.opts.TalosAPIPort = closedPort(t) // Talos never answers: the node never registers
	e.opts.BootTimeout = time.Hour
	e.p = e.newProvider()
	if err := e.kube.Create(e.ctx, e.w.NodePool("default", e.nc.Name)); err != nil {
		t.Fatal(err)
	}
	claim := e.nodeClaim()
	e.launch(claim)
	e.waitPhase(claim.Name, install.PhaseBooting)
	e.deleteClaim(claim)
	e.waitReleased(claim.Name)

	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	if err := e.kube.Get(e.ctx, types.NamespacedName{Name: e.nc.Name}, nc); err != nil {
		t.Fatal(err)
	}
	st := nc.Status.Installs
	if st == nil || st.ConsecutiveFailures != 1 || st.LastFailure == nil || st.LastFailure.NodeClaim != claim.Name ||
		st.LastFailure.Phase != string(install.PhaseBooting) || st.LastFailure.Code != breaker.CodeDeletedBeforeJoin {
		t.Fatalf("breaker state after the nodeclaim was deleted while booting: %+v (last failure %+v); want one failure in booting, %s",
			st, lastFailure(st), breaker.CodeDeletedBeforeJoin)
	}
	e.assertNoDuplicatesNorLeaks()
}

func lastFailure(st *v1alpha1.InstallsStatus) *v1alpha1.InstallFailure {
	if st == nil {
		return nil
	}
	return st.LastFailure
}
