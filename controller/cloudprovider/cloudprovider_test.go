package cloudprovider_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/bootstraptoken"
	cp "github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/cloudprovider"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/diskimage"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

func (e *env) instanceTypes() []*cloudprovider.InstanceType {
	e.t.Helper()
	its, err := e.p.CloudProvider.GetInstanceTypes(e.ctx, &karpv1.NodePool{Spec: karpv1.NodePoolSpec{Template: karpv1.NodeClaimTemplate{
		Spec: karpv1.NodeClaimTemplateSpec{NodeClassRef: &karpv1.NodeClassReference{Name: e.nc.Name}}}}})
	if err != nil || len(its) == 0 {
		e.t.Fatalf("instance types: %d, %v", len(its), err)
	}
	return its
}

// Create returns as soon as the server is ordered, with everything Karpenter
// needs; the install then runs in the install controller and the node joins.
func TestCreateReturnsAtOnceThenTheNodeJoinsAndDeleteReleasesIt(t *testing.T) {
	e := startEnv(t, nil)
	claim := e.nodeClaim()
	// Delivery is held until Create has returned: a Create that waited for
	// it would never return.
	hold := e.w.Sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStuck, Tag: scaleway.Tag(scaleway.TagNodeClaim, claim.Name), State: "delivering"})
	got := e.launch(claim)
	zone, id, err := scaleway.ParseProviderID(got.Status.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	if srv, _ := e.w.Sim.Server(id); srv.Status != "delivering" {
		t.Fatalf("server %s while delivery is held", srv.Status)
	}
	e.eventually("the nodeclaim labelled with the ordered phase", func() bool {
		return e.claim(claim.Name).Labels[v1alpha1.LabelInstallPhase] == string(install.PhaseOrdered)
	})
	e.w.Sim.RemoveFault(hold)
	if got.Labels[corev1.LabelInstanceTypeStable] == "" || got.Labels[corev1.LabelTopologyZone] != string(zone) ||
		got.Labels[catalog.LabelBillingPeriod] != string(catalog.BillingHourly) {
		t.Errorf("hydrated labels incomplete: %v", got.Labels)
	}
	if got.Status.Allocatable.Cpu().IsZero() {
		t.Errorf("no allocatable cpu: %v", got.Status.Allocatable)
	}
	if _, ok := got.Annotations[v1alpha1.AnnotationImageSHA256]; ok {
		t.Errorf("Create claims an image before anything was written: %v", got.Annotations)
	}
	// Mid-install, Get and List show the claim launched, without a node.
	if mid, err := e.p.CloudProvider.Get(e.ctx, got.Status.ProviderID); err != nil || mid.Name != claim.Name {
		t.Fatalf("Get mid-install = %v, %v", mid, err)
	}
	node := e.waitNode(got.Status.ProviderID)
	if node.Name != claim.Name {
		t.Errorf("node name %q, want the nodeclaim's %q", node.Name, claim.Name)
	}
	var unregistered bool
	for _, taint := range node.Spec.Taints {
		unregistered = unregistered || taint.Key == karpv1.UnregisteredTaintKey
	}
	if !unregistered {
		t.Errorf("node registered without the %s taint: %v", karpv1.UnregisteredTaintKey, node.Spec.Taints)
	}
	if node.Labels[karpv1.NodePoolLabelKey] != "default" {
		t.Errorf("node labels %v lack the nodepool", node.Labels)
	}
	e.waitPhase(claim.Name, install.PhaseJoined)
	e.eventually("the nodeclaim labelled joined, without imaging progress", func() bool {
		l := e.claim(claim.Name).Labels
		_, pct := l[v1alpha1.LabelImagingProgress]
		return l[v1alpha1.LabelInstallPhase] == string(install.PhaseJoined) && !pct
	})
	// Disk delivery (the default): the config came from the metal-iso
	// partition, and nothing ever talked to the node's :50000.
	e.assertConfigFromDisk(id)
	// What was written is on the NodeClaim.
	if have := e.claim(claim.Name).Annotations[v1alpha1.AnnotationImageSHA256]; have != e.nc.Status.Image.RawSHA256 {
		t.Errorf("image annotation %q, written image %q", have, e.nc.Status.Image.RawSHA256)
	}
	if evs := e.events.find(claim.Name, "InstallImaging"); len(evs) == 0 {
		t.Error("no InstallImaging event on the nodeclaim")
	}
	if n := e.creates(claim.Name); n != 1 {
		t.Errorf("%d orders for one nodeclaim", n)
	}
	list, err := e.p.CloudProvider.List(e.ctx)
	if err != nil || len(list) != 1 || list[0].Status.ProviderID != got.Status.ProviderID {
		t.Fatalf("List = %v, %v", list, err)
	}
	e.register(claim.Name)
	e.deleteClaim(claim)
	if _, err := e.p.CloudProvider.Get(e.ctx, got.Status.ProviderID); !cloudprovider.IsNodeClaimNotFoundError(err) {
		t.Errorf("Get after delete: %v, want NodeClaimNotFound", err)
	}
	e.assertNoDuplicatesNorLeaks()
}

// A controller restart in any phase resumes the same server: never a second
// order, in either config delivery.
func TestRestartInEachPhaseResumesWithoutReordering(t *testing.T) {
	t.Run("disk", func(t *testing.T) { testRestartInEachPhase(t, startEnv(t, nil)) })
	t.Run("maintenance-api", func(t *testing.T) { testRestartInEachPhase(t, startLegacyEnv(t, nil)) })
}

func testRestartInEachPhase(t *testing.T, e *env) {
	for _, phase := range []install.Phase{install.PhaseOrdered, install.PhaseRescue, install.PhaseImaging, install.PhaseBooting} {
		t.Run(string(phase), func(t *testing.T) {
			claim := e.nodeClaim()
			got := e.launch(claim)
			// "Kill" the controller as soon as the server is in the phase.
			e.waitPhase(claim.Name, phase)
			e.p = e.newProvider()
			// Core calls Create again only if it had not recorded the answer;
			// either way the same server comes back.
			again, err := e.p.CloudProvider.Create(e.ctx, claim)
			if err != nil || again.Status.ProviderID != got.Status.ProviderID {
				t.Fatalf("Create after restart in %s = %v, %v", phase, again, err)
			}
			e.waitNode(got.Status.ProviderID)
			if n := e.creates(claim.Name); n != 1 {
				t.Errorf("restart in %s: %d orders for one nodeclaim", phase, n)
			}
			if _, id, _ := scaleway.ParseProviderID(got.Status.ProviderID); e.nc.Spec.Talos.ConfigDelivery != v1alpha1.ConfigDeliveryMaintenanceAPI {
				e.assertConfigFromDisk(id)
			}
		})
	}
	e.assertNoDuplicatesNorLeaks()
}

func TestOutOfStockFallsBackToAnotherOffer(t *testing.T) {
	e := startEnv(t, nil)
	// The cheapest offer the claim could take, then take its stock away.
	claim := e.nodeClaim()
	first := cheapestAvailable(e.instanceTypes())
	if err := e.w.Sim.SetStock("", first, 0); err != nil {
		t.Fatal(err)
	}
	got, err := e.p.CloudProvider.Create(e.ctx, claim)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if it := got.Labels[corev1.LabelInstanceTypeStable]; it == first {
		t.Fatalf("ordered %s, which is out of stock", it)
	}
	if _, marked := e.p.Catalog.Unavailable("fr-par-2", first, catalog.BillingHourly); !marked {
		t.Errorf("%s not marked unavailable after an out-of-stock order", first)
	}
}

func cheapestAvailable(its []*cloudprovider.InstanceType) string {
	best, price := "", 0.0
	for _, it := range its {
		if it.Requirements.Get(corev1.LabelArchStable).Has("amd64") {
			for _, of := range it.Offerings.Available() {
				if best == "" || of.Price < price {
					best, price = it.Name, of.Price
				}
			}
		}
	}
	return best
}

func TestQuotaEverywhereIsInsufficientCapacity(t *testing.T) {
	e := startEnv(t, nil)
	for _, it := range e.instanceTypes() {
		if err := e.w.Sim.SetQuota(e.w.Sim.Options().ProjectID, it.Name, 0); err != nil {
			t.Fatal(err)
		}
	}
	claim := e.nodeClaim()
	_, err := e.p.CloudProvider.Create(e.ctx, claim)
	if !cloudprovider.IsInsufficientCapacityError(err) {
		t.Fatalf("Create = %v, want InsufficientCapacityError", err)
	}
	if n := e.creates(claim.Name); n != 0 {
		t.Errorf("%d servers ordered over quota", n)
	}
}

// assertInstallFailed: the install failed for good, said why on the
// NodeClaim (InstallFailed naming want), deleted the NodeClaim and released
// the server.
func (e *env) assertInstallFailed(claim string, want ...string) {
	e.t.Helper()
	// The event comes once the server is given back, after the NodeClaim's deletion.
	e.eventually("the nodeclaim of the failed install deleted, then its InstallFailed event", func() bool {
		return e.claimGone(claim) && len(e.events.find(claim, "InstallFailed")) > 0
	})
	evs := e.events.find(claim, "InstallFailed")
	if len(evs) == 0 {
		e.t.Fatalf("no InstallFailed event on %s", claim)
	}
	for _, w := range want {
		if !strings.Contains(evs[0].Message, w) {
			e.t.Errorf("InstallFailed %q does not say %q", evs[0].Message, w)
		}
	}
	e.waitReleased(claim)
}

// A corrupt object in the bucket: em-imager refuses it, the server is released.
func TestImageDigestMismatchReleasesServer(t *testing.T) {
	e := startEnv(t, nil)
	if err := e.w.CorruptImages(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.p.Images.Invalidate()
	claim := e.nodeClaim()
	e.launch(claim)
	e.assertInstallFailed(claim.Name, "imaging", "released")
	if msg := e.events.find(claim.Name, "InstallFailed")[0].Message; !strings.Contains(msg, "digest_mismatch") && !strings.Contains(msg, "corrupt_input") {
		t.Errorf("the event does not say what em-imager found: %s", msg)
	}
	e.assertNoDuplicatesNorLeaks()
}

// Rescue that never answers SSH: the phase times out and the server is released.
func TestRescueSSHNeverUpReleasesServer(t *testing.T) {
	e := startEnv(t, nil)
	e.opts.RescueSSHPort = closedPort(t) // nothing answers SSH there
	e.opts.RescueTimeout = 3 * time.Second
	e.p = e.newProvider()
	claim := e.nodeClaim()
	e.launch(claim)
	e.assertInstallFailed(claim.Name, "phase rescue", "rescue SSH")
	e.assertNoDuplicatesNorLeaks()
}

// Legacy delivery, a disk that never boots Talos (no API): the boot phase
// times out, released.
func TestTalosAPINeverUpReleasesServer(t *testing.T) {
	e := startLegacyEnv(t, nil)
	e.opts.TalosAPIPort = closedPort(t) // nothing answers the Talos API there
	e.opts.BootTimeout = 3 * time.Second
	e.p = e.newProvider()
	claim := e.nodeClaim()
	e.launch(claim)
	e.assertInstallFailed(claim.Name, "phase booting", "Talos API")
	e.assertNoDuplicatesNorLeaks()
}

// Delete during an install stops it and releases the server.
func TestDeleteDuringInstall(t *testing.T) {
	e := startEnv(t, nil)
	claim := e.nodeClaim()
	e.launch(claim)
	e.waitPhase(claim.Name, install.PhaseImaging)
	e.deleteClaim(claim)
	e.waitReleased(claim.Name)
	if n := e.creates(claim.Name); n != 1 {
		t.Errorf("%d orders", n)
	}
	if e.p.Installs.Running() != 0 {
		t.Errorf("%d installs still running after Delete", e.p.Installs.Running())
	}
	e.assertNoDuplicatesNorLeaks()
}

// List must fail, not return fewer nodes, when the API fails: Karpenter's
// garbage collection deletes NodeClaims whose server List does not return.
func TestListErrorIsAnErrorNotAnEmptyList(t *testing.T) {
	e := startEnv(t, nil)
	claim := e.nodeClaim()
	if _, err := e.p.CloudProvider.Create(e.ctx, claim); err != nil {
		t.Fatal(err)
	}
	e.w.Sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Method: "GET", Path: `/servers$`, Status: 503, Times: 1000})
	list, err := e.p.CloudProvider.List(e.ctx)
	if err == nil {
		t.Fatalf("List with the API down = %d nodeclaims and no error", len(list))
	}
	e.w.Sim.ClearFaults()
	list, err = e.p.CloudProvider.List(e.ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("List after recovery = %d, %v", len(list), err)
	}
}

func TestDriftOnNewImageAndNodeClassChange(t *testing.T) {
	e := startEnv(t, nil)
	claim := e.nodeClaim()
	got := e.launch(claim)
	// Mid-install, a claim is never drifted.
	if r, err := e.p.CloudProvider.IsDrifted(e.ctx, e.claim(claim.Name)); err != nil || r != "" {
		t.Fatalf("a claim mid-install drifted: %q, %v", r, err)
	}
	e.waitNode(got.Status.ProviderID)
	e.waitPhase(claim.Name, install.PhaseJoined)
	e.register(claim.Name)
	if r, err := e.p.CloudProvider.IsDrifted(e.ctx, e.claim(claim.Name)); err != nil || r != "" {
		t.Fatalf("fresh node drifted: %q, %v", r, err)
	}
	// A new Talos version published and named by the NodeClass.
	if _, err := e.w.PublishImage(e.ctx, "v1.12.9"); err != nil {
		t.Fatal(err)
	}
	e.updateNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) { nc.Spec.Image.TalosVersion = "v1.12.9" })
	r, err := e.p.CloudProvider.IsDrifted(e.ctx, e.claim(claim.Name))
	if err != nil || (r != cp.DriftNodeClass && r != cp.DriftImage) {
		t.Fatalf("IsDrifted after a new image = %q, %v", r, err)
	}
}

// The garbage collector releases a server whose NodeClaim is gone, and leaves
// a joined node's server alone.
func TestGarbageCollectionReleasesLeakedServersOnly(t *testing.T) {
	e := startEnv(t, nil)
	kept := e.nodeClaim()
	got := e.launch(kept)
	leaked := e.nodeClaim()
	e.launch(leaked)
	e.waitPhase(leaked.Name, install.PhaseRescue)
	// The NodeClaim vanishes without Delete (its finalizer removed by hand).
	if err := e.kube.Delete(e.ctx, e.claim(leaked.Name)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(e.opts.GCGracePeriod)
	gc := e.p.GarbageCollection
	gc.Clock = clock.RealClock{}
	e.eventually("the leaked server released", func() bool {
		if _, err := gc.Reconcile(e.ctx); err != nil {
			t.Fatal(err)
		}
		_, ok := e.serverOf(leaked.Name)
		return !ok
	})
	if _, err := e.p.CloudProvider.Get(e.ctx, got.Status.ProviderID); err != nil {
		t.Fatalf("the healthy node's server was collected: %v", err)
	}
	e.assertNoDuplicatesNorLeaks()
}

// closedPort is a port nothing listens on.
func closedPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// A NodeClass is Ready only when its image and join Secret are usable, says
// why when not, and Create refuses it with NodeClassNotReady.
func TestNodeClassNotReadyReasons(t *testing.T) {
	e := startEnv(t, nil)
	const legacyVersion = "v1.12.2"
	cases := []struct {
		name   string
		edit   func(*v1alpha1.ScalewayElasticMetalNodeClass)
		cond   string
		reason string
	}{
		{"missing join secret", func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
			nc.Spec.Talos.JoinSecretRef.Name = "does-not-exist"
		}, v1alpha1.ConditionTypeJoinConfigReady, "JoinConfigInvalid"},
		{"unpublished talos version", func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
			nc.Spec.Image.TalosVersion = "v1.12.99"
		}, v1alpha1.ConditionTypeImageReady, "ImageManifestMissing"},
		{"another project", func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
			nc.Spec.ProjectID = "11111111-1111-1111-1111-111111111111"
		}, v1alpha1.ConditionTypeProjectReady, "ProjectMismatch"},
		{"bad config patch", func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
			nc.Spec.Talos.ConfigPatches = []string{"machine: [this is not a machine config"}
		}, v1alpha1.ConditionTypeJoinConfigReady, "JoinConfigInvalid"},
		{"disk delivery with an image lacking talos.config=metal-iso", func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
			nc.Spec.Image.TalosVersion = legacyVersion
		}, v1alpha1.ConditionTypeImageReady, "ImageLacksMetalISO"},
	}
	// An image built without the kernel argument: fine for MaintenanceAPI only.
	if _, err := e.w.PublishImageWith(e.ctx, legacyVersion, diskimage.DefaultKernelArgs); err != nil {
		t.Fatal(err)
	}
	legacy := e.w.NodeClass("legacy-ok")
	legacy.Spec.Image.TalosVersion = legacyVersion
	legacy.Spec.Talos.ConfigDelivery = v1alpha1.ConfigDeliveryMaintenanceAPI
	if err := e.kube.Create(e.ctx, legacy); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.NodeClassStatus.Reconcile(e.ctx, legacy); err != nil {
		t.Fatal(err)
	}
	if c := e.nodeClass("legacy-ok").StatusConditions().Get(v1alpha1.ConditionTypeImageReady); c == nil || !c.IsTrue() {
		t.Fatalf("MaintenanceAPI delivery on an image without metal-iso: ImageReady %+v, want True", c)
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nc := e.w.NodeClass(fmt.Sprintf("broken-%d", i))
			tc.edit(nc)
			if err := e.kube.Create(e.ctx, nc); err != nil {
				t.Fatal(err)
			}
			if _, err := e.p.NodeClassStatus.Reconcile(e.ctx, nc); err != nil {
				t.Fatal(err)
			}
			got := &v1alpha1.ScalewayElasticMetalNodeClass{}
			if err := e.kube.Get(e.ctx, types.NamespacedName{Name: nc.Name}, got); err != nil {
				t.Fatal(err)
			}
			c := got.StatusConditions().Get(tc.cond)
			if c == nil || !c.IsFalse() || c.Reason != tc.reason || c.Message == "" {
				t.Fatalf("%s = %+v, want False/%s with a message", tc.cond, c, tc.reason)
			}
			if got.StatusConditions().Root().IsTrue() {
				t.Fatal("Ready although a sub-condition is false")
			}
			claim := e.nodeClaim()
			claim.Spec.NodeClassRef.Name = nc.Name
			if _, err := e.p.CloudProvider.Create(e.ctx, claim); !cloudprovider.IsNodeClassNotReadyError(err) {
				t.Fatalf("Create on a broken nodeclass = %v, want NodeClassNotReady", err)
			}
			if n := e.creates(claim.Name); n != 0 {
				t.Fatalf("%d servers ordered for a broken nodeclass", n)
			}
		})
	}
}

// TestCreateRetriesANodeClassWhoseReadinessIsNotKnown: a NodeClass created
// together with its NodeClaim (Karpenter's regression suite, "NodeClaim
// StandaloneNodeClaim should create a standard NodeClaim") has no status
// yet when Create first runs. Create orders nothing then, but with a
// retryable error, not NodeClassNotReady (on which Karpenter deletes the
// NodeClaim); once the status controller says Ready, the same claim orders.
func TestCreateRetriesANodeClassWhoseReadinessIsNotKnown(t *testing.T) {
	e := startEnv(t, nil)
	nc := e.w.NodeClass("fresh")
	if err := e.kube.Create(e.ctx, nc); err != nil {
		t.Fatal(err)
	}
	claim := e.nodeClaim()
	claim.Spec.NodeClassRef.Name = nc.Name
	_, err := e.p.CloudProvider.Create(e.ctx, claim)
	if err == nil || cloudprovider.IsNodeClassNotReadyError(err) || cloudprovider.IsInsufficientCapacityError(err) {
		t.Fatalf("Create on a NodeClass without status = %v, want a retryable error (Karpenter deletes the claim on NodeClassNotReady)", err)
	}
	var ce *cloudprovider.CreateError
	if !errors.As(err, &ce) || ce.ConditionReason != "NodeClassReadinessUnknown" {
		t.Errorf("Create error %v is not a CreateError with reason NodeClassReadinessUnknown", err)
	}
	if n := e.creates(claim.Name); n != 0 {
		t.Fatalf("%d servers ordered before the NodeClass was known to be Ready", n)
	}
	if _, err := e.p.NodeClassStatus.Reconcile(e.ctx, e.nodeClass(nc.Name)); err != nil {
		t.Fatal(err)
	}
	if !e.nodeClass(nc.Name).StatusConditions().Root().IsTrue() {
		t.Fatalf("NodeClass not Ready after its status reconcile: %+v", e.nodeClass(nc.Name).Status.Conditions)
	}
	if _, err := e.p.CloudProvider.Create(e.ctx, claim); err != nil {
		t.Fatalf("Create once the NodeClass is Ready: %v", err)
	}
	if n := e.creates(claim.Name); n != 1 {
		t.Fatalf("%d servers ordered for the claim once the NodeClass is Ready, want 1", n)
	}
}

// PerNodeClaim: the node joins with its own token, which expires at the
// end of the install window; the controller never deletes it (it may only
// create kube-system Secrets), neither before nor after the node registered.
func TestPerNodeClaimBootstrapToken(t *testing.T) {
	e := startEnv(t, nil)
	e.updateNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
		nc.Spec.Talos.BootstrapToken = v1alpha1.BootstrapTokenPerNodeClaim
	})
	claim := e.nodeClaim()
	before := time.Now().Add(-time.Second)
	got := e.launch(claim)
	e.waitNode(got.Status.ProviderID)
	tokens := func() []corev1.Secret {
		list := &corev1.SecretList{}
		if err := e.kube.List(e.ctx, list, client.InNamespace("kube-system"), client.MatchingLabels{bootstraptoken.LabelNodeClaim: claim.Name}); err != nil {
			t.Fatal(err)
		}
		return list.Items
	}
	list := tokens()
	if len(list) != 1 || list[0].Type != corev1.SecretTypeBootstrapToken {
		t.Fatalf("bootstrap token secrets of %s: %+v", claim.Name, list)
	}
	// Its expiration ends it: its creation plus the token TTL.
	ttl := e.p.Installer.Timeouts.TokenTTL()
	exp, err := time.Parse(time.RFC3339, string(list[0].Data["expiration"]))
	if err != nil || exp.Before(before.Add(ttl)) || exp.After(time.Now().Add(ttl)) {
		t.Fatalf("token expiration %q (%v), want its creation plus %s", list[0].Data["expiration"], err, ttl)
	}
	e.register(claim.Name)
	e.p.GarbageCollection.Clock = clock.RealClock{}
	if _, err := e.p.GarbageCollection.Reconcile(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(tokens()); n != 1 {
		t.Fatalf("%d tokens after the node registered, want the one left to expire", n)
	}
}

// A monthly server deleted while it is paid for is kept as a spare (by
// default: minimumLifetime unset means the paid month) and taken by the next
// NodeClaim of the same offer instead of a new order. Its rescue shows a new
// host key at each boot, as a real one does.
func TestMonthlyServerIsKeptAsSpareAndReused(t *testing.T) {
	e := startEnv(t, nil)
	e.updateNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) { nc.Spec.Billing.Periods = []string{"monthly"} })
	monthly := karpv1.NodeSelectorRequirementWithMinValues{Key: catalog.LabelBillingPeriod, Operator: corev1.NodeSelectorOpIn, Values: []string{"monthly"}}
	first := e.nodeClaim(monthly)
	got := e.launch(first)
	if got.Labels[catalog.LabelBillingPeriod] != "monthly" {
		t.Fatalf("billing period label %q", got.Labels[catalog.LabelBillingPeriod])
	}
	e.waitNode(got.Status.ProviderID)
	e.waitPhase(first.Name, install.PhaseJoined)
	// Item 8: a resumed monthly server is labelled monthly.
	if resumed, err := e.p.CloudProvider.Create(e.ctx, first); err != nil || resumed.Labels[catalog.LabelBillingPeriod] != "monthly" {
		t.Fatalf("resumed monthly server: %v, %v", resumed, err)
	}
	e.register(first.Name)
	firstClaim := e.claim(first.Name)
	if err := e.p.CloudProvider.Delete(e.ctx, firstClaim); !cloudprovider.IsNodeClaimNotFoundError(err) {
		t.Fatalf("Delete of a young monthly server = %v, want NodeClaimNotFound (kept as spare)", err)
	}
	_, id, _ := scaleway.ParseProviderID(got.Status.ProviderID)
	srv, ok := e.w.Sim.Server(id)
	if !ok || srv.Status == string(baremetal.ServerStatusDeleting) ||
		!scaleway.HasTags(srv.Tags, scaleway.Tag(scaleway.TagPhase, string(install.PhaseSpare))) {
		t.Fatalf("server not kept as a spare: %+v", srv)
	}
	if list, err := e.p.CloudProvider.List(e.ctx); err != nil || len(list) != 0 {
		t.Fatalf("List shows the spare as a node: %d, %v", len(list), err)
	}
	// #16: a spare waits in a rescue boot without the controller's key; the
	// key is not in IAM meanwhile.
	e.sweep()
	if n := e.iamKeys(); n != 0 {
		t.Fatalf("%d IAM SSH keys while the only server is a spare, want 0", n)
	}
	// Karpenter's termination would delete the old Node object; this test
	// runs without it, and keeping the spare deletes it (a Node with a
	// spare's providerID is stale: item 15 of #31).
	if nodes := e.nodesOf(got.Status.ProviderID); len(nodes) != 0 {
		t.Fatalf("node %q left on the spare", nodes[0].Name)
	}
	if err := e.kube.Delete(e.ctx, e.claim(first.Name)); err != nil {
		t.Fatal(err)
	}
	// Its disks still hold the first node's secrets: not offered until the
	// pre-imager erased them in its rescue.
	if s := e.server(id); !spare.ErasePending(s) || spare.Takeable(s) {
		t.Fatalf("kept spare: erase pending %v, takeable %v (tags %v)", spare.ErasePending(s), spare.Takeable(s), s.Tags)
	}
	e.waitSpareReady(id)
	e.preImage(e.ctx)
	if s := e.server(id); spare.ErasePending(s) || !spare.Takeable(s) {
		t.Fatalf("after pre-imaging: erase pending %v, takeable %v (tags %v)", spare.ErasePending(s), spare.Takeable(s), s.Tags)
	}
	second := e.nodeClaim(monthly, karpv1.NodeSelectorRequirementWithMinValues{
		Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{got.Labels[corev1.LabelInstanceTypeStable]}})
	again := e.launch(second)
	if again.Status.ProviderID != got.Status.ProviderID {
		t.Fatalf("ordered %s instead of reusing spare %s", again.Status.ProviderID, got.Status.ProviderID)
	}
	if n := e.creates(second.Name); n != 0 {
		t.Fatalf("%d new orders although a spare was there", n)
	}
	if node := e.waitNode(again.Status.ProviderID); node.Name != second.Name {
		t.Fatalf("reused server registered as %q, want %q", node.Name, second.Name)
	}
	if errs := e.events.find(second.Name, "InstallFailed"); len(errs) != 0 {
		t.Fatalf("the spare's install failed: %s", errs[0].Message)
	}
	// Item 7: core calls Delete again for the first (registered) claim: it
	// must leave the server the second claim took alone.
	rebootsBefore := len(e.w.Sim.History(id))
	if err := e.p.CloudProvider.Delete(e.ctx, firstClaim); !cloudprovider.IsNodeClaimNotFoundError(err) {
		t.Fatalf("a second Delete of the first claim = %v, want NodeClaimNotFound", err)
	}
	srv, _ = e.w.Sim.Server(id)
	if !scaleway.HasTags(srv.Tags, scaleway.Tag(scaleway.TagNodeClaim, second.Name)) || len(e.w.Sim.History(id)) != rebootsBefore {
		t.Fatalf("the second Delete of the first claim touched the second claim's server: %v, history %v", srv.Tags, e.w.Sim.History(id))
	}
	e.assertNoDuplicatesNorLeaks()
}
