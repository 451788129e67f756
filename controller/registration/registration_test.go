package registration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/controllers/nodeclaim/lifecycle"
	"sigs.k8s.io/karpenter/pkg/events"
	"sigs.k8s.io/karpenter/pkg/state/nodepoolhealth"

	"github.com/awslabs/operatorpkg/status"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/registration"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

// core is Karpenter core's real NodeClaim lifecycle controller on a real
// kube-apiserver, reconciled by hand on a fake clock (its timeouts are
// requeues, which a fake clock cannot fire).
type core struct {
	t      *testing.T
	ctx    context.Context
	direct client.Client // reads straight from the API server
	clock  *clocktesting.FakeClock
	ctrl   *lifecycle.Controller
	window *registration.Window
	n      int
}

func startCore(t *testing.T) *core {
	kube := testenv.StartKube(t, testenv.KubeOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cached := kube.CachedClient(t)
	clk := clocktesting.NewFakeClock(time.Now())
	return &core{
		t: t, ctx: ctx, direct: kube.Client, clock: clk,
		ctrl:   lifecycle.NewController(clk, cached, launcher{}, events.NewRecorder(&record.FakeRecorder{}), nodepoolhealth.NewState(), nil),
		window: &registration.Window{Kube: kube.Client, Clock: clk},
	}
}

// launcher is the provider side core calls: Create returns at once with a
// provider ID, as ours does once the server is ordered. Nothing else is
// called while a claim launches and waits for its node.
type launcher struct{ cloudprovider.CloudProvider }

func (launcher) Name() string { return "scaleway-em" }
func (launcher) GetSupportedNodeClasses() []status.Object {
	return []status.Object{&v1alpha1.ScalewayElasticMetalNodeClass{}}
}
func (launcher) Create(_ context.Context, nc *karpv1.NodeClaim) (*karpv1.NodeClaim, error) {
	out := nc.DeepCopy()
	out.Status.ProviderID = "scaleway-em://fr-par-2/" + nc.Name
	return out, nil
}

func (launcher) Delete(context.Context, *karpv1.NodeClaim) error {
	return cloudprovider.NewNodeClaimNotFoundError(fmt.Errorf("gone"))
}

// claim creates a NodeClaim and lets core launch it. The fake clock starts
// again from the creation time the API server stamped: set before the create,
// a slow API server (seconds on a loaded CI machine) stamped the claim after
// the clock and core's 15 minutes ended later than the test counted.
func (c *core) claim() *karpv1.NodeClaim {
	c.t.Helper()
	c.n++
	nc := &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("claim-%d", c.n)},
		Spec: karpv1.NodeClaimSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: v1alpha1.SchemeGroupVersion.Group, Kind: "ScalewayElasticMetalNodeClass", Name: "default"},
			Requirements: []karpv1.NodeSelectorRequirementWithMinValues{},
		},
	}
	if err := c.direct.Create(c.ctx, nc); err != nil {
		c.t.Fatal(err)
	}
	c.clock.SetTime(nc.CreationTimestamp.Time)
	c.reconcile(nc.Name) // finalizer, launch
	got := c.reconcile(nc.Name)
	if !got.StatusConditions().Get(karpv1.ConditionTypeLaunched).IsTrue() || got.Status.ProviderID == "" {
		c.t.Fatalf("core did not launch %s: %+v", nc.Name, got.Status)
	}
	reg := got.StatusConditions().Get(karpv1.ConditionTypeRegistered)
	if reg == nil || !reg.IsUnknown() || !reg.LastTransitionTime.Equal(&got.CreationTimestamp) {
		c.t.Fatalf("core's Registered condition %+v does not start at the creation time %s", reg, got.CreationTimestamp)
	}
	return got
}

func (c *core) get(name string) *karpv1.NodeClaim {
	c.t.Helper()
	nc := &karpv1.NodeClaim{}
	if err := c.direct.Get(c.ctx, types.NamespacedName{Name: name}, nc); err != nil {
		c.t.Fatal(err)
	}
	return nc
}

// reconcile runs core's lifecycle controller once on the stored NodeClaim;
// nil once it is gone.
func (c *core) reconcile(name string) *karpv1.NodeClaim {
	c.t.Helper()
	if _, err := c.ctrl.Reconcile(c.ctx, c.get(name)); err != nil {
		c.t.Fatalf("core lifecycle: %v", err)
	}
	nc := &karpv1.NodeClaim{}
	if err := c.direct.Get(c.ctx, types.NamespacedName{Name: name}, nc); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil
		}
		c.t.Fatal(err)
	}
	return nc
}

func deleted(nc *karpv1.NodeClaim) bool { return nc == nil || !nc.DeletionTimestamp.IsZero() }

// The window holds an install from the NodeClaim's creation through a long
// delivery; core's own 15 minutes start when the server boots its OS; a
// stuck install is bounded by its phase deadline. Without the window, core
// deletes the claim after 15 minutes: the first case shows the test sees it.
func TestWindowAgainstCoreLifecycle(t *testing.T) {
	c := startCore(t)
	step := func(d time.Duration) { c.clock.Step(d) }

	// Core alone: deleted 15 minutes after creation, however the install goes.
	alone := c.claim()
	step(registration.Timeout - time.Minute)
	if deleted(c.reconcile(alone.Name)) {
		t.Fatal("core deleted a claim before its registration timeout")
	}
	step(time.Minute + time.Second)
	if !deleted(c.reconcile(alone.Name)) {
		t.Fatal("core kept a claim 15 minutes after its creation: this test no longer sees core's timeout")
	}

	// An install whose delivery takes 25 minutes (phase deadline 30 minutes),
	// then boots: never deleted while it makes progress.
	slow := c.claim()
	start := c.clock.Now()
	delivery := start.Add(30 * time.Minute)
	for m := 0; m < 25; m++ {
		step(time.Minute)
		if _, err := c.window.Installing(c.ctx, c.get(slow.Name), delivery); err != nil {
			t.Fatal(err)
		}
		if deleted(c.reconcile(slow.Name)) {
			t.Fatalf("core deleted an install in delivery after %d minutes", m+1)
		}
	}
	bootStart := c.clock.Now()
	if wrote, err := c.window.Booting(c.ctx, c.get(slow.Name), bootStart); err != nil || !wrote {
		t.Fatalf("Booting: wrote=%v, %v", wrote, err)
	}
	step(registration.Timeout - time.Minute)
	if deleted(c.reconcile(slow.Name)) {
		t.Fatal("core deleted the claim within 15 minutes of its boot")
	}
	if got := registration.Expires(c.get(slow.Name)); !got.Equal(bootStart.Truncate(time.Second).Add(registration.Timeout)) {
		t.Fatalf("core's registration deadline %s, want 15 minutes after the boot started (%s)", got, bootStart)
	}
	step(time.Minute + 2*time.Second)
	if !deleted(c.reconcile(slow.Name)) {
		t.Fatal("core kept a claim whose node never registered 15 minutes after its boot")
	}

	// A delivery stuck past its deadline: the window stops at the deadline
	// plus the grace, and core deletes the claim there.
	stuck := c.claim()
	end := c.clock.Now().Add(20 * time.Minute).Add(registration.DefaultGrace)
	for {
		step(time.Minute)
		if _, err := c.window.Installing(c.ctx, c.get(stuck.Name), end.Add(-registration.DefaultGrace)); err != nil {
			t.Fatal(err)
		}
		gone := deleted(c.reconcile(stuck.Name))
		if gone && c.clock.Now().Before(end) {
			t.Fatalf("core deleted the claim %s before its install's deadline", end.Sub(c.clock.Now()))
		}
		if gone {
			break
		}
		if c.clock.Now().After(end.Add(time.Minute)) {
			t.Fatal("a stuck install held its claim past its deadline")
		}
	}
}

// A registered claim's condition is never touched.
func TestWindowLeavesRegisteredClaimsAlone(t *testing.T) {
	c := startCore(t)
	nc := c.claim()
	stored := nc.DeepCopy()
	nc.StatusConditions().SetTrue(karpv1.ConditionTypeRegistered)
	if err := c.direct.Status().Patch(c.ctx, nc, client.MergeFrom(stored)); err != nil {
		t.Fatal(err)
	}
	before := c.get(nc.Name)
	c.clock.Step(time.Hour)
	if wrote, err := c.window.Booting(c.ctx, before, c.clock.Now()); err != nil || wrote {
		t.Fatalf("Booting on a registered claim: wrote=%v, %v", wrote, err)
	}
	if after := c.get(nc.Name); after.ResourceVersion != before.ResourceVersion {
		t.Fatal("a registered claim was written")
	}
}
