package spare_test

import (
	"context"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/simapi"
)

// A monthly server whose NodeClaim is deleted while it reboots into Talos
// cannot be rebooted into rescue then (the API refuses a server that is
// "starting"). It used to be kept as a takeable spare anyway, its Talos
// came up and registered a Node, and the next NodeClaim took the spare with
// that stale Node. Now it stays pending (not taken, not offered) until a
// reboot into rescue is accepted, a failed reboot included, and its stale
// Node is deleted.
func TestSpareKeptMidRebootIsTakenOnlyBackInRescueWithoutItsNode(t *testing.T) {
	ctx := context.Background()
	sim, api, _ := simapi.StartURL(t, zone, func(o *scwsim.Options) { o.Delays.RebootStart = 2 * time.Second })
	f := newKeeperFixture(t, sim, api)
	k, nc, kube := f.k, f.nc, f.kube
	srv := f.claimed(t, install.PhaseBooting)
	waitFor := func(what string, cond func(*baremetal.Server) bool) *baremetal.Server {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			s, err := api.GetServer(ctx, zone, srv.ID)
			if err != nil {
				t.Fatal(err)
			}
			if cond(s) {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: %s", what, s.Status)
			}
		}
	}
	waitFor("delivery", func(s *baremetal.Server) bool { return s.Status == baremetal.ServerStatusReady })
	// The install's reboot into Talos.
	if _, err := api.RebootServer(ctx, zone, srv.ID, baremetal.ServerBootTypeNormal, nil); err != nil {
		t.Fatal(err)
	}
	waitFor("the reboot into Talos", func(s *baremetal.Server) bool { return s.Status == baremetal.ServerStatusStarting })
	if out, d, err := k.Release(ctx, zone, srv.ID, "a", nc); err != nil || out != spare.Kept {
		t.Fatalf("Release mid-reboot: %s (%s), %v; want kept", out, d.Reason, err)
	}
	takeNone := func(when string) {
		t.Helper()
		kept, err := api.GetServer(ctx, zone, srv.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !spare.RescuePending(kept) || spare.Takeable(kept) {
			t.Fatalf("%s: the spare is takeable (tags %v) although it may run its old node", when, kept.Tags)
		}
		if got, err := k.Take(ctx, zone, "EM-A215R-HDD", catalog.BillingMonthly, nc, "b", "np"); err != nil || got != nil {
			t.Fatalf("%s: Take gave the spare to a new nodeclaim: %v, %v", when, got, err)
		}
	}
	takeNone("kept mid-reboot")

	// Talos comes up and its kubelet registers the old node.
	waitFor("Talos up", func(s *baremetal.Server) bool {
		return s.Status == baremetal.ServerStatusReady && s.BootType == baremetal.ServerBootTypeNormal
	})
	pid := scaleway.ProviderID(zone, srv.ID)
	if err := kube.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: corev1.NodeSpec{ProviderID: pid}}); err != nil {
		t.Fatal(err)
	}
	// A reboot the API refuses leaves it pending, its node in place.
	fault := sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Path: `/reboot$`, Status: 400,
		Body: `{"message":"Server is not ready"}`})
	if err := k.Settle(ctx, zone, srv.ID); err != nil {
		t.Fatal(err)
	}
	takeNone("after a refused reboot")
	if err := kube.Get(ctx, clientKey("a"), &corev1.Node{}); err != nil {
		t.Fatalf("the node was deleted while its Talos may still run: %v", err)
	}
	sim.RemoveFault(fault)
	if err := k.Settle(ctx, zone, srv.ID); err != nil {
		t.Fatal(err)
	}
	waitFor("the spare's reboot into rescue", func(s *baremetal.Server) bool { return s.BootType == baremetal.ServerBootTypeRescue })
	nodes := &corev1.NodeList{}
	if err := kube.List(ctx, nodes); err != nil || len(nodes.Items) != 0 {
		t.Fatalf("nodes left after the spare went back to rescue: %v, %v", nodes.Items, err)
	}
	// Its disks still hold the node's secrets: taken only once the
	// pre-imager erased them (TestEraseKeptSpareIsNotTakenUntilErased).
	if got, err := k.Take(ctx, zone, "EM-A215R-HDD", catalog.BillingMonthly, nc, "b", "np"); err != nil || got != nil {
		t.Fatalf("back in rescue, its disks not erased: Take gave the spare to a new nodeclaim: %v, %v", got, err)
	}
	if _, err := api.EditTags(ctx, zone, srv.ID, func(tags []string) ([]string, bool) {
		return scaleway.RemoveTagIn(tags, install.TagErasePending)
	}); err != nil {
		t.Fatal(err)
	}
	got, err := k.Take(ctx, zone, "EM-A215R-HDD", catalog.BillingMonthly, nc, "b", "np")
	if err != nil || got == nil || got.ID != srv.ID {
		t.Fatalf("Take once the spare is back in rescue and erased: %v, %v; want the spare", got, err)
	}
}

func clientKey(name string) client.ObjectKey { return client.ObjectKey{Name: name} }
