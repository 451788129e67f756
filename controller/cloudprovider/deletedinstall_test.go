package cloudprovider_test

import (
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/breaker"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
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

// Issue 31 item 15: a monthly NodeClaim deleted while its server reboots
// into Talos is kept as a spare, but the API refuses a reboot into rescue
// while the server is "starting": Talos comes up from the disk and
// registers a Node with the server's providerID that no NodeClaim owns.
// Karpenter core matches a NodeClaim to its Node by providerID alone, so
// the next NodeClaim taking that spare would be registered against the
// stale Node and never installed. The spare must not be taken until it is
// back in rescue and the stale Node is gone; then it installs for real.
func TestSpareKeptWhileBootingIsTakenOnlyBackInRescueWithoutItsNode(t *testing.T) {
	// The reboot into Talos lasts long enough to delete the claim in it.
	e := startEnv(t, func(o *scwsim.Options) { o.Delays.RebootStart = 3 * time.Second })
	// The scenario is the API's reboot into Talos: a kexec boot (the
	// default) leaves the server ready in rescue, which a keep reboots at
	// once.
	e.updateNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
		nc.Spec.Billing.Periods = []string{"monthly"}
		nc.Spec.Boot = v1alpha1.BootReboot
	})
	if err := e.kube.Create(e.ctx, e.w.NodePool("default", e.nc.Name)); err != nil {
		t.Fatal(err)
	}
	first := e.nodeClaim(monthlyReq)
	got := e.launch(first)
	pid := got.Status.ProviderID
	_, id, _ := scaleway.ParseProviderID(pid)
	e.poll("the server rebooting into Talos", 5*time.Millisecond, func() bool {
		s, ok := e.w.Sim.Server(id)
		return ok && s.Status == string(baremetal.ServerStatusStarting) && s.BootType == string(baremetal.ServerBootTypeNormal) &&
			scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagPhase, string(install.PhaseBooting)))
	})
	e.deleteClaim(first)
	if s, _ := e.w.Sim.Server(id); !scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagPhase, string(install.PhaseSpare))) {
		t.Fatalf("server not kept as a spare: %v", s.Tags)
	}
	// Talos boots from the disk: its node registers, owned by no NodeClaim.
	stale := e.waitNode(pid)
	if stale.Name != first.Name {
		t.Fatalf("node %q registered, want the deleted claim's %q", stale.Name, first.Name)
	}
	// Sweeps bring the spare back to rescue; the pre-imaging lifts the
	// quarantine a deletion while booting sets.
	e.eventually("the spare back in rescue and takeable", func() bool {
		e.sweep()
		e.preImage(e.ctx)
		s, _ := e.w.Sim.Server(id)
		srv := &baremetal.Server{Tags: s.Tags, Status: baremetal.ServerStatus(s.Status)}
		return s.Status == string(baremetal.ServerStatusReady) && s.BootType == string(baremetal.ServerBootTypeRescue) &&
			install.PhaseOf(srv) == install.PhaseSpare && spare.Takeable(srv)
	})
	second := e.nodeClaim(monthlyReq, karpv1.NodeSelectorRequirementWithMinValues{
		Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{got.Labels[corev1.LabelInstanceTypeStable]}})
	again := e.launch(second)
	if again.Status.ProviderID != pid {
		t.Fatalf("ordered %s instead of taking spare %s", again.Status.ProviderID, pid)
	}
	// What core would match the new claim to: no Node yet but its own.
	if nodes := e.nodesOf(pid); len(nodes) != 0 {
		t.Fatalf("the taken spare still has node %q (registered after its nodeclaim was deleted): core would register the new claim against it", nodes[0].Name)
	}
	e.eventually("the new claim's own node", func() bool {
		nodes := e.nodesOf(pid)
		return len(nodes) == 1 && nodes[0].Name == second.Name
	})
	e.waitPhase(second.Name, install.PhaseJoined)
	if errs := e.events.find(second.Name, "InstallFailed"); len(errs) != 0 {
		t.Fatalf("the spare's install failed: %s", errs[0].Message)
	}
	e.assertNoDuplicatesNorLeaks()
}

// nodesOf lists the Nodes with providerID.
func (e *env) nodesOf(providerID string) []corev1.Node {
	e.t.Helper()
	nodes := &corev1.NodeList{}
	if err := e.kube.List(e.ctx, nodes); err != nil {
		e.t.Fatal(err)
	}
	var out []corev1.Node
	for _, n := range nodes.Items {
		if n.Spec.ProviderID == providerID {
			out = append(out, n)
		}
	}
	return out
}
