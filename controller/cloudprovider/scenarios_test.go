package cloudprovider_test

// Money-safety scenarios (issue 12): each failed before the lifecycle
// change, and each ends with no duplicate order and nothing leaked.

import (
	"context"
	"encoding/base64"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	cp "github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/cloudprovider"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/talosapi"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

var monthlyReq = karpv1.NodeSelectorRequirementWithMinValues{Key: catalog.LabelBillingPeriod, Operator: corev1.NodeSelectorOpIn, Values: []string{"monthly"}}

// breakNodeClass makes the NodeClass not Ready (its join Secret is gone).
func (e *env) breakNodeClass() {
	e.t.Helper()
	e.editNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) { nc.Spec.Talos.JoinSecretRef.Name = "gone" })
	if got := e.reconcileNodeClassStatus(); got.StatusConditions().Root().IsTrue() {
		e.t.Fatalf("the nodeclass is still Ready: %+v", got.Status.Conditions)
	}
}

// createAgain is Karpenter retrying Create: it must return the server it
// returned first, and order nothing.
func (e *env) createAgain(claim, first *karpv1.NodeClaim, when string) {
	e.t.Helper()
	again, err := e.p.CloudProvider.Create(e.ctx, claim)
	if err != nil || again.Status.ProviderID != first.Status.ProviderID {
		e.t.Fatalf("retried Create %s = %v, %v; want the server %s", when, again, err, first.Status.ProviderID)
	}
	if n := e.creates(claim.Name); n != 1 {
		e.t.Fatalf("%d orders for %s", n, claim.Name)
	}
}

// Item 2: once a server carries the claim's tag, a retried Create returns it,
// whatever happened to the NodeClass meanwhile (not Ready, even deleted):
// never NodeClassNotReady, which makes Karpenter drop the claim and abandon
// the server.
func TestRetriedCreateReturnsTheServerWhateverTheNodeClass(t *testing.T) {
	e := startEnv(t, nil)
	claim := e.nodeClaim()
	first, err := e.p.CloudProvider.Create(e.ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	e.breakNodeClass()
	e.createAgain(claim, first, "with the nodeclass not Ready")
	if err := e.kube.Delete(e.ctx, e.nc); err != nil {
		t.Fatal(err)
	}
	e.createAgain(claim, first, "with the nodeclass gone")
	e.assertNoDuplicatesNorLeaks()
}

// Item 3: a zone removed from the NodeClass while a Create retries (across
// a controller restart): the server ordered there is found, not ordered
// again elsewhere; List and the garbage collector still see it.
func TestZoneRemovedFromTheNodeClassKeepsItsServer(t *testing.T) {
	e := startEnv(t, nil)
	e.updateNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) { nc.Spec.Zones = []string{"fr-par-1"} })
	claim := e.nodeClaim()
	first, err := e.p.CloudProvider.Create(e.ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	if z := first.Labels[corev1.LabelTopologyZone]; z != "fr-par-1" {
		t.Fatalf("ordered in %s, want fr-par-1", z)
	}
	e.updateNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) { nc.Spec.Zones = []string{"nl-ams-1"} })
	e.p = e.newProvider() // nothing remembered: the zone sweep must find it
	e.createAgain(claim, first, "after the zone was removed")
	list, err := e.p.CloudProvider.List(e.ctx)
	if err != nil || len(list) != 1 || list[0].Status.ProviderID != first.Status.ProviderID {
		t.Fatalf("List after the zone was removed = %v, %v", list, err)
	}
	e.assertNoDuplicatesNorLeaks()
}

// Item 4: monthly only when both the NodeClass and the NodePool allow it,
// even when monthly is cheaper; minimumLifetime defaults to the paid month
// (TestMonthlyServerIsKeptAsSpareAndReused keeps a spare without it).
func TestMonthlyOnlyWhenTheNodePoolAsks(t *testing.T) {
	e := startEnv(t, nil)
	e.updateNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
		nc.Spec.Billing.Periods = []string{"hourly", "monthly"}
		nc.Spec.Billing.MonthlyCommitmentMonths = 36 // monthly turns cheaper
	})
	pool := func(reqs ...karpv1.NodeSelectorRequirementWithMinValues) *karpv1.NodePool {
		return &karpv1.NodePool{Spec: karpv1.NodePoolSpec{Template: karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
			NodeClassRef: &karpv1.NodeClassReference{Name: e.nc.Name}, Requirements: reqs}}}}
	}
	periods := func(np *karpv1.NodePool) (hourly, monthly float64) {
		its, err := e.p.CloudProvider.GetInstanceTypes(e.ctx, np)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range its {
			for _, of := range it.Offerings.Available() {
				p := &hourly
				if of.Requirements.Get(catalog.LabelBillingPeriod).Any() == string(catalog.BillingMonthly) {
					p = &monthly
				}
				if *p == 0 || of.Price < *p {
					*p = of.Price
				}
			}
		}
		return hourly, monthly
	}
	if h, m := periods(pool(karpv1.NodeSelectorRequirementWithMinValues{Key: catalog.LabelBillingPeriod, Operator: corev1.NodeSelectorOpIn,
		Values: []string{"hourly", "monthly"}})); m == 0 || m >= h {
		t.Fatalf("cheapest monthly %v, hourly %v: the test needs monthly to be cheaper", m, h)
	}
	if _, m := periods(pool()); m != 0 {
		t.Fatal("a NodePool that never asked for monthly is offered monthly offerings")
	}
	claim := e.nodeClaim()
	got, err := e.p.CloudProvider.Create(e.ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	_, id, _ := scaleway.ParseProviderID(got.Status.ProviderID)
	srv, _ := e.w.Sim.Server(id)
	if offerID, _ := e.w.Sim.OfferID(srv.Zone, srv.OfferName, "hourly"); got.Labels[catalog.LabelBillingPeriod] != "hourly" || srv.OfferID != offerID {
		t.Fatalf("a claim that never asked for monthly got %s (offer %s)", got.Labels[catalog.LabelBillingPeriod], srv.OfferID)
	}
	e.assertNoDuplicatesNorLeaks()
}

// Item 6a: a monthly server that breaks while delivered is released, never
// kept as a spare: the decision reads its state after the failure.
func TestBrokenMonthlyServerIsNeverKeptAsSpare(t *testing.T) {
	e := startEnv(t, nil)
	e.updateNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) { nc.Spec.Billing.Periods = []string{"monthly"} })
	claim := e.nodeClaim(monthlyReq)
	e.w.Sim.MustInject(scwsim.Fault{Kind: scwsim.FaultServerError, Tag: scaleway.Tag(scaleway.TagNodeClaim, claim.Name), State: "delivering"})
	got := e.launch(claim)
	if got.Labels[catalog.LabelBillingPeriod] != "monthly" {
		t.Fatalf("billing %q", got.Labels[catalog.LabelBillingPeriod])
	}
	e.assertInstallFailed(claim.Name, "phase ordered", "released", "in error")
	for _, s := range e.w.Sim.Servers() {
		if scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagPhase, string(install.PhaseSpare))) {
			t.Fatalf("the broken server %s was kept as a spare", s.ID)
		}
	}
	e.assertNoDuplicatesNorLeaks()
}

// Item 6b: an order accepted and then left out of stock: its offering is
// marked unavailable, so the replacement NodeClaim orders another one.
func TestOutOfStockAfterOrderingMovesTheNextOrderElsewhere(t *testing.T) {
	e := startEnv(t, func(o *scwsim.Options) { o.Stockout = scwsim.StockoutServer })
	first := cheapestAvailable(e.instanceTypes())
	if err := e.w.Sim.SetStock("fr-par-2", first, 0); err != nil {
		t.Fatal(err)
	}
	claim := e.nodeClaim()
	got := e.launch(claim)
	if got.Labels[corev1.LabelInstanceTypeStable] != first {
		t.Fatalf("ordered %s, want %s (accepted, then out of stock)", got.Labels[corev1.LabelInstanceTypeStable], first)
	}
	e.assertInstallFailed(claim.Name, "out_of_stock")
	if _, marked := e.p.Catalog.Unavailable("fr-par-2", first, catalog.BillingHourly); !marked {
		t.Fatalf("%s not marked unavailable after its order stayed out of stock", first)
	}
	replacement := e.nodeClaim()
	again, err := e.p.CloudProvider.Create(e.ctx, replacement)
	if err != nil {
		t.Fatal(err)
	}
	if again.Labels[corev1.LabelInstanceTypeStable] == first && again.Labels[corev1.LabelTopologyZone] == "fr-par-2" {
		t.Fatalf("the replacement ordered %s in fr-par-2 again", first)
	}
	e.assertNoDuplicatesNorLeaks()
}

// Item 8b: the image annotation is what the install wrote: a NodeClass
// whose image changes between Create and imaging gets the new image
// written, and no drift is invented.
func TestImageAnnotationIsWhatWasWritten(t *testing.T) {
	e := startEnv(t, nil)
	claim := e.nodeClaim()
	hold := e.w.Sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStuck, Tag: scaleway.Tag(scaleway.TagNodeClaim, claim.Name), State: "delivering"})
	got := e.launch(claim)
	img, err := e.w.PublishImage(e.ctx, "v1.12.9")
	if err != nil {
		t.Fatal(err)
	}
	e.updateNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) { nc.Spec.Image.TalosVersion = "v1.12.9" })
	e.w.Sim.RemoveFault(hold)
	e.waitNode(got.Status.ProviderID)
	e.waitPhase(claim.Name, install.PhaseJoined)
	e.register(claim.Name)
	stored := e.claim(claim.Name)
	if have := stored.Annotations[v1alpha1.AnnotationImageSHA256]; have != img.RawSHA256 {
		t.Fatalf("image annotation %q, the install wrote %s", have, img.RawSHA256)
	}
	if r, err := e.p.CloudProvider.IsDrifted(e.ctx, stored); err != nil || r == cp.DriftImage {
		t.Fatalf("IsDrifted = %q, %v: drift invented for a node running the NodeClass's image", r, err)
	}
	e.assertNoDuplicatesNorLeaks()
}

// Item 8c: an install resumes in imaging while rescue is gone behind the
// API's back (it still shows the server ready in rescue): the install boots
// rescue again and finishes, instead of waiting for an SSH that never comes.
func TestImagingRebootsIntoRescueWhenRescueIsGone(t *testing.T) {
	e := startEnv(t, nil)
	claim := e.nodeClaim()
	got, _, id := e.imagingInRescue(claim)
	// ...and the rescue system died since (the API still says ready, rescue).
	e.w.Machines.PowerOff(id)
	e.launched(claim.Name, got)
	e.waitNode(got.Status.ProviderID)
	if fails := e.events.find(claim.Name, "InstallFailed"); len(fails) != 0 {
		t.Fatalf("install failed: %s", fails[0].Message)
	}
	if n := e.rescueBoots(id); n != 2 {
		t.Fatalf("%d rescue boots, want 2 (by hand, then the install's)", n)
	}
	e.assertNoDuplicatesNorLeaks()
}

// A rescue host showing another key than the one pinned for its boot is
// not trusted again by rebooting it into a new rescue: the install fails
// and the server goes back.
func TestChangedRescueHostKeyReleasesWithoutReboot(t *testing.T) {
	e := startEnv(t, nil)
	claim := e.nodeClaim()
	got, zone, id := e.imagingInRescue(claim)
	srv, err := e.p.API.GetServer(e.ctx, zone, id)
	if err != nil {
		t.Fatal(err)
	}
	// As if this controller had dialled this boot and been shown another key.
	other := rescue.HostKeyPin("SHA256:" + base64.RawStdEncoding.EncodeToString(make([]byte, 32)))
	e.p.Installer.Dialer.Pin(scaleway.IPv4Of(srv), other)
	e.launched(claim.Name, got)
	e.assertInstallFailed(claim.Name, "phase imaging", "host key", "released")
	if n := e.rescueBoots(id); n != 1 {
		t.Fatalf("%d rescue boots, want 1 (by hand): a changed key must not be answered by a new rescue", n)
	}
	e.assertNoDuplicatesNorLeaks()
}

// #16: the pin of a rescue boot lives on the server: a restarted controller
// (no pin in memory) that is shown another key than the one a previous
// process pinned for this boot fails with RescueHostKeyChanged and releases
// the server, without a new rescue boot.
func TestRestartKeepsTheRescueHostKeyPin(t *testing.T) {
	e := startEnv(t, nil)
	claim := e.nodeClaim()
	got, zone, id := e.imagingInRescue(claim)
	other := rescue.HostKeyPin("SHA256:" + base64.RawStdEncoding.EncodeToString(make([]byte, 32)))
	if _, err := e.p.API.EditTags(e.ctx, zone, id, func(tags []string) ([]string, bool) {
		tags, _ = scaleway.SetTagIn(tags, install.TagRescueHostKey, string(other))
		return tags, true
	}); err != nil {
		t.Fatal(err)
	}
	e.p = e.newProvider() // nothing pinned in this process
	e.launched(claim.Name, got)
	e.assertInstallFailed(claim.Name, "phase imaging", install.ReasonRescueHostKeyChanged, "released")
	if n := e.rescueBoots(id); n != 1 {
		t.Fatalf("%d rescue boots, want 1 (by hand)", n)
	}
	e.assertNoDuplicatesNorLeaks()
}

// The pin a normal install records is the key the machine's rescue boot has.
func TestRescueHostKeyPinIsRecordedOnTheServer(t *testing.T) {
	e := startEnv(t, nil)
	claim := e.nodeClaim()
	got := e.launch(claim)
	e.waitPhase(claim.Name, install.PhaseBooting)
	zone, id, _ := scaleway.ParseProviderID(got.Status.ProviderID)
	srv, err := e.p.API.GetServer(e.ctx, zone, id)
	if err != nil {
		t.Fatal(err)
	}
	key, err := e.w.Machines.HostKey(id)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := scaleway.TagValue(srv.Tags, install.TagRescueHostKey); v != string(rescue.PinOf(key)) {
		t.Fatalf("rescue host key tag %q, the machine's key is %s", v, rescue.PinOf(key))
	}
	e.waitNode(got.Status.ProviderID)
}

// imagingInRescue orders claim's server (not launched yet: no install runs),
// boots it into rescue by hand and tags it as an install stopped in imaging.
func (e *env) imagingInRescue(claim *karpv1.NodeClaim) (*karpv1.NodeClaim, scw.Zone, string) {
	e.t.Helper()
	got, err := e.p.CloudProvider.Create(e.ctx, claim)
	if err != nil {
		e.t.Fatal(err)
	}
	zone, id, _ := scaleway.ParseProviderID(got.Status.ProviderID)
	ready := func(boot string) func() bool {
		return func() bool { s, _ := e.w.Sim.Server(id); return s.Status == "ready" && s.BootType == boot }
	}
	e.eventually("delivery", ready("normal"))
	keys, err := e.p.RescueKeys.Acquire(e.ctx, id) // the install's hold, released when it ends
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.p.API.RebootServer(e.ctx, zone, id, baremetal.ServerBootTypeRescue, keys); err != nil {
		e.t.Fatal(err)
	}
	e.eventually("rescue", ready("rescue"))
	// The API shows rescue as soon as the boot is queued for the host; wait
	// for the host's own boot too, so that what the test does to the
	// machine next (a power-off) comes after it rather than before. Seen
	// with tests in parallel: the power-off came first and rescue came up.
	e.eventually("rescue booted on the host", func() bool { return e.rescueBoots(id) == 1 })
	// As if an install had got to imaging when its controller stopped.
	if _, err := e.p.API.EditTags(e.ctx, zone, id, func(tags []string) ([]string, bool) {
		return install.SetPhaseIn(tags, install.PhaseImaging, time.Now()), true
	}); err != nil {
		e.t.Fatal(err)
	}
	return got, zone, id
}

// rescueBoots counts the simulated machine's boots into rescue.
func (e *env) rescueBoots(id string) int {
	n := 0
	for _, ev := range e.w.Machines.Events() {
		if ev.ServerID == id && ev.What == "rescue" {
			n++
		}
	}
	return n
}

// lostReply applies the config and then never answers, as when the
// connection dies after Talos took it.
type lostReply struct {
	install.TalosApplier
	applies atomic.Int32
}

func (l *lostReply) ApplyTo(ctx context.Context, peer talosapi.Peer, cfg []byte) error {
	if err := l.TalosApplier.ApplyTo(ctx, peer, cfg); err != nil {
		return err
	}
	if l.applies.Add(1) == 1 {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// Item 8d: a lost Apply answer does not burn the boot timeout: the node
// joining ends the phase.
func TestLostApplyAnswerEndsWhenTheNodeJoins(t *testing.T) {
	e := startLegacyEnv(t, nil)
	lost := &lostReply{}
	e.wrap = func(a install.TalosApplier) install.TalosApplier { lost.TalosApplier = a; return lost }
	e.opts.BootTimeout = time.Hour // a wait for the timeout would outlast the test
	e.p = e.newProvider()
	claim := e.nodeClaim()
	got := e.launch(claim)
	e.waitNode(got.Status.ProviderID)
	e.waitPhase(claim.Name, install.PhaseJoined)
	if n := lost.applies.Load(); n != 1 {
		t.Fatalf("%d applies, want 1 (Talos takes one config)", n)
	}
	e.assertNoDuplicatesNorLeaks()
}

// Item 9: the API takes the order, its answer is lost, and the server shows
// in listings only 20 s later: Karpenter's retries of Create find it; one
// server in the end.
func TestLostOrderAnswerWithSlowListingsOrdersOnce(t *testing.T) {
	e := startEnv(t, func(o *scwsim.Options) { o.ListLag = 20 * time.Second })
	e.w.Sim.MustInject(scwsim.Fault{Kind: scwsim.FaultAnswerLost, Method: "POST", Path: `/servers$`, Times: 1})
	claim := e.nodeClaim()
	var got *karpv1.NodeClaim
	failures := 0
	e.eventually("Create to find the server of the lost order", func() bool {
		var err error
		got, err = e.p.CloudProvider.Create(e.ctx, claim)
		if err != nil {
			if cloudprovider.IsInsufficientCapacityError(err) || cloudprovider.IsNodeClassNotReadyError(err) {
				t.Fatalf("Create = %v: Karpenter would drop the claim", err)
			}
			failures++
			time.Sleep(time.Second) // Karpenter's retry backoff
			return false
		}
		return true
	})
	if failures == 0 {
		t.Fatal("Create succeeded at once: the test did not lose the order's answer")
	}
	if n := len(e.w.Sim.Servers()); n != 1 {
		t.Fatalf("%d servers, want 1", n)
	}
	if n := e.creates(claim.Name); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
	if evs := e.events.find(claim.Name, "OrderInFlight"); len(evs) == 0 {
		t.Error("no OrderInFlight event said why the claim waited")
	}
	if _, id, _ := scaleway.ParseProviderID(got.Status.ProviderID); !strings.HasPrefix(e.w.Sim.Servers()[0].ID, id) {
		t.Fatalf("Create returned %s, the server is %s", got.Status.ProviderID, e.w.Sim.Servers()[0].ID)
	}
	e.assertNoDuplicatesNorLeaks()
}
