package cloudprovider_test

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// monthlySpare runs a monthly NodeClaim to a node, deletes it (the server
// is kept as a spare, rebooted into a keyless rescue) and returns the
// spare's ID and instance type.
func (e *env) monthlySpare() (id, instanceType string) {
	e.t.Helper()
	e.updateNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) { nc.Spec.Billing.Periods = []string{"monthly"} })
	first := e.nodeClaim(monthlyReq)
	got := e.launch(first)
	node := e.waitNode(got.Status.ProviderID)
	e.waitPhase(first.Name, install.PhaseJoined)
	e.register(first.Name)
	_, id, _ = scaleway.ParseProviderID(got.Status.ProviderID)
	boots := e.rescueBoots(id)
	if err := e.p.CloudProvider.Delete(e.ctx, e.claim(first.Name)); !cloudprovider.IsNodeClaimNotFoundError(err) {
		e.t.Fatalf("Delete of a young monthly server = %v, want NodeClaimNotFound (kept as spare)", err)
	}
	// Keeping the spare deleted its node (Karpenter's termination would have).
	if err := e.kube.Delete(e.ctx, node); client.IgnoreNotFound(err) != nil {
		e.t.Fatal(err)
	}
	if err := e.kube.Delete(e.ctx, e.claim(first.Name)); err != nil {
		e.t.Fatal(err)
	}
	e.eventually("the spare's keyless reboot into rescue", func() bool { return e.rescueBoots(id) > boots })
	e.waitSpareReady(id)
	return id, got.Labels[corev1.LabelInstanceTypeStable]
}

// preImagedSpare is monthlySpare, pre-imaged by one sweep.
func (e *env) preImagedSpare() (id, instanceType string) {
	e.t.Helper()
	id, instanceType = e.monthlySpare()
	e.preImage(e.ctx)
	if !spare.PreImaged(e.server(id), e.currentImage()) {
		e.t.Fatalf("spare not pre-imaged: tags %v", e.server(id).Tags)
	}
	return id, instanceType
}

// preImageAgain runs a sweep on spare id and expects it pre-imaged with
// wantBoots rescue boots since boots (why: which ones), and the key gone
// from IAM afterwards.
func (e *env) preImageAgain(id string, boots, wantBoots int, why string) {
	e.t.Helper()
	e.preImage(e.ctx)
	if !spare.PreImaged(e.server(id), e.currentImage()) {
		e.t.Fatalf("spare not pre-imaged: tags %v", e.server(id).Tags)
	}
	if got := e.rescueBoots(id) - boots; got != wantBoots {
		e.t.Fatalf("%d rescue boots, want %d: %s", got, wantBoots, why)
	}
	e.assertNoIAMKey("after pre-imaging")
}

// waitSpareReady waits until spare id is delivered in rescue (the keep's reboot done).
func (e *env) waitSpareReady(id string) {
	e.t.Helper()
	e.eventually("spare "+id+" ready in rescue", func() bool {
		s, ok := e.w.Sim.Server(id)
		return ok && s.Status == "ready" && s.BootType == "rescue" &&
			scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagPhase, string(install.PhaseSpare)))
	})
}

// assertNoIAMKey runs a garbage-collection sweep and expects the rescue key gone from IAM.
func (e *env) assertNoIAMKey(when string) {
	e.t.Helper()
	e.sweep()
	if n := e.iamKeys(); n != 0 {
		e.t.Fatalf("%d IAM SSH keys %s, want 0", n, when)
	}
}

// preImage runs one sweep of the pre-imager and waits for what it started.
func (e *env) preImage(ctx context.Context) {
	e.t.Helper()
	if _, err := e.p.PreImage.Reconcile(ctx); err != nil {
		e.t.Fatal(err)
	}
	e.p.PreImage.Wait()
}

// imagerRuns counts the em-imager runs of command ("write", "write-config",
// "inspect") on server id, from the reports the rescue systems sent back.
func (e *env) imagerRuns(id, command string) int {
	e.t.Helper()
	files, _ := filepath.Glob(filepath.Join(e.w.Dir, "machines", "transcripts", id, "*.stdout"))
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			e.t.Fatal(err)
		}
		if strings.Contains(string(b), `"command": "`+command+`"`) {
			n++
		}
	}
	return n
}

func (e *env) server(id string) *baremetal.Server {
	e.t.Helper()
	s, ok := e.w.Sim.Server(id)
	if !ok {
		e.t.Fatalf("server %s is gone", id)
	}
	return &baremetal.Server{ID: s.ID, Tags: s.Tags, Status: baremetal.ServerStatus(s.Status), BootType: baremetal.ServerBootType(s.BootType)}
}

func (e *env) currentImage() string {
	e.t.Helper()
	nc := e.nodeClass(e.nc.Name)
	if nc.Status.Image == nil {
		e.t.Fatal("the nodeclass has no resolved image")
	}
	return nc.Status.Image.RawSHA256
}

func (e *env) preImaged() float64 {
	return metricValue(e, "karpenter_scaleway_em_spares_preimaged_total", nil)
}

func metricValue(e *env, name string, labels map[string]string) float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
		}
	}
	return 0
}

// A monthly spare is pre-imaged in the background (keyed rescue, image
// only, key released and unregistered afterwards); the next NodeClaim takes
// it and boots with no reboot into rescue and no image write: only the
// config is written. Then a new NodeClass image makes a spare stale: it is
// imaged again.
func TestPreImagedSpareIsReusedWithConfigAndRebootOnly(t *testing.T) {
	e := startEnv(t, nil)
	id, instanceType := e.monthlySpare()
	e.assertNoIAMKey("while the only server is an idle spare")
	if spare.PreImaged(e.server(id), e.currentImage()) {
		t.Fatal("a spare whose disk ran a node counts as pre-imaged")
	}
	boots, writes := e.rescueBoots(id), e.imagerRuns(id, "write")
	e.preImage(e.ctx)
	if !spare.PreImaged(e.server(id), e.currentImage()) {
		t.Fatalf("spare not pre-imaged: tags %v", e.server(id).Tags)
	}
	if got := e.rescueBoots(id) - boots; got != 1 {
		t.Fatalf("%d rescue boots to pre-image, want 1 (the keyless spare rescue cannot be logged into)", got)
	}
	if got := e.imagerRuns(id, "write") - writes; got != 1 {
		t.Fatalf("%d image writes to pre-image, want 1", got)
	}
	if got := e.imagerRuns(id, "write-config"); got != 1 {
		t.Fatalf("%d config writes on the server, want the first install's only (pre-imaging writes no config)", got)
	}
	if e.preImaged() != 1 || e.p.RescueKeys.Holders() != 0 {
		t.Fatalf("preimaged_total %v, rescue key holders %d", e.preImaged(), e.p.RescueKeys.Holders())
	}
	e.assertNoIAMKey("after pre-imaging")
	// Nothing to do for a spare already holding the current image.
	e.preImage(e.ctx)
	if e.preImaged() != 1 || e.rescueBoots(id)-boots != 1 {
		t.Fatalf("a pre-imaged spare imaged again: preimaged_total %v", e.preImaged())
	}
	// Taken: no reboot into rescue, no image write; write-config only.
	boots, writes, configs := e.rescueBoots(id), e.imagerRuns(id, "write"), e.imagerRuns(id, "write-config")
	second := e.nodeClaim(monthlyReq, karpv1.NodeSelectorRequirementWithMinValues{
		Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{instanceType}})
	again := e.launch(second)
	if _, got, _ := scaleway.ParseProviderID(again.Status.ProviderID); got != id {
		t.Fatalf("took %s instead of pre-imaged spare %s", got, id)
	}
	if node := e.waitNode(again.Status.ProviderID); node.Name != second.Name {
		t.Fatalf("reused server registered as %q, want %q", node.Name, second.Name)
	}
	if errs := e.events.find(second.Name, "InstallFailed"); len(errs) != 0 {
		t.Fatalf("the spare's install failed: %s", errs[0].Message)
	}
	if got := e.rescueBoots(id) - boots; got != 0 {
		t.Fatalf("%d reboots into rescue taking a pre-imaged spare, want 0", got)
	}
	if got := e.imagerRuns(id, "write") - writes; got != 0 {
		t.Fatalf("%d image writes taking a pre-imaged spare, want 0", got)
	}
	if got := e.imagerRuns(id, "write-config") - configs; got != 1 {
		t.Fatalf("%d config writes taking a pre-imaged spare, want 1", got)
	}
	// The disk list the config renders from was read in rescue (inspect).
	if e.claim(second.Name).Annotations[v1alpha1.AnnotationDisks] == "" || e.imagerRuns(id, "inspect") != 1 {
		t.Fatalf("no disk list recorded for the pre-imaged spare's claim (%d inspects)", e.imagerRuns(id, "inspect"))
	}
	e.assertConfigFromDisk(id)
	if n := e.creates(second.Name); n != 0 {
		t.Fatalf("%d new orders although a pre-imaged spare was there", n)
	}
	e.assertNoDuplicatesNorLeaks()
}

// A spare holding an image older than its NodeClass's is imaged again.
func TestStaleSpareIsImagedAgain(t *testing.T) {
	e := startEnv(t, nil)
	id, _ := e.preImagedSpare()
	old := e.currentImage()
	if _, err := e.w.PublishImage(e.ctx, "v1.12.9"); err != nil {
		t.Fatal(err)
	}
	e.updateNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) { nc.Spec.Image.TalosVersion = "v1.12.9" })
	e.reconcileNodeClass()
	current := e.currentImage()
	if current == old || spare.PreImaged(e.server(id), current) {
		t.Fatalf("the nodeclass image did not change (%s) or the stale spare counts as pre-imaged", current)
	}
	boots, writes := e.rescueBoots(id), e.imagerRuns(id, "write")
	e.preImage(e.ctx)
	if !spare.PreImaged(e.server(id), current) {
		t.Fatalf("stale spare not imaged again: tags %v", e.server(id).Tags)
	}
	// Still in the keyed rescue boot of the first pre-imaging: no reboot.
	if e.rescueBoots(id) != boots || e.imagerRuns(id, "write")-writes != 1 {
		t.Fatalf("re-imaging: %d rescue boots, %d writes; want 0 and 1", e.rescueBoots(id)-boots, e.imagerRuns(id, "write")-writes)
	}
	e.assertNoIAMKey("after re-imaging")
}

// A controller restart mid-pre-imaging: the new process (no holds) removes
// the key from IAM, and its pre-imager finishes the spare from its keyed
// rescue boot; the spare never stops being a spare.
func TestRestartMidPreImagingResumesWithoutLeakingTheKey(t *testing.T) {
	e := startEnv(t, nil)
	id, _ := e.monthlySpare()
	ctx, cancel := context.WithCancel(e.ctx)
	boots := e.rescueBoots(id)
	if _, err := e.p.PreImage.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	// Stopped once the keyed rescue boot is up (the image write under way or about to be).
	e.poll("the pre-imaging's rescue boot", 5*time.Millisecond, func() bool { return e.rescueBoots(id) > boots })
	cancel()
	e.p.PreImage.Wait()
	if install.PhaseOf(e.server(id)) != install.PhaseSpare {
		t.Fatalf("phase %s mid-pre-imaging, want spare", install.PhaseOf(e.server(id)))
	}
	e.p = e.newProvider()
	e.assertNoIAMKey("after a restart mid-pre-imaging")
	e.waitSpareReady(id)
	e.preImageAgain(id, boots, 1, "the restarted pre-imager logs into the keyed boot the first one made")
}

// A pre-imaged spare whose rescue shows another key than the one pinned on
// it is not trusted: the install taking it fails closed, without a new
// rescue boot, and the server stays a spare (paid) without its pre-imaged
// tags.
func TestPreImagedSpareWithChangedHostKeyIsNotTrusted(t *testing.T) {
	e := startEnv(t, nil)
	id, instanceType := e.preImagedSpare()
	other := rescue.HostKeyPin("SHA256:" + base64.RawStdEncoding.EncodeToString(make([]byte, 32)))
	if _, err := e.p.API.EditTags(e.ctx, "fr-par-2", id, func(tags []string) ([]string, bool) {
		tags, _ = scaleway.SetTagIn(tags, install.TagRescueHostKey, string(other))
		return tags, true
	}); err != nil {
		t.Fatal(err)
	}
	e.p = e.newProvider() // nothing pinned in memory: the tag is all it knows
	boots, writes := e.rescueBoots(id), e.imagerRuns(id, "write")
	claim := e.nodeClaim(monthlyReq, karpv1.NodeSelectorRequirementWithMinValues{
		Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{instanceType}})
	e.launch(claim)
	e.eventually("the nodeclaim of the failed install deleted, then its InstallFailed event", func() bool {
		return e.claimGone(claim.Name) && len(e.events.find(claim.Name, "InstallFailed")) > 0
	})
	evs := e.events.find(claim.Name, "InstallFailed")
	if len(evs) == 0 || !strings.Contains(evs[0].Message, install.ReasonRescueHostKeyChanged) || !strings.Contains(evs[0].Message, "kept as a spare") {
		t.Fatalf("InstallFailed events %v, want %s and kept as a spare", evs, install.ReasonRescueHostKeyChanged)
	}
	// Nothing was sent to the host that showed the other key.
	if e.imagerRuns(id, "write") != writes || e.imagerRuns(id, "write-config") != 1 {
		t.Fatalf("em-imager ran on an untrusted rescue: %d writes, %d config writes", e.imagerRuns(id, "write")-writes, e.imagerRuns(id, "write-config"))
	}
	srv := e.server(id)
	if install.PhaseOf(srv) != install.PhaseSpare || spare.PreImaged(srv, e.currentImage()) {
		t.Fatalf("after the failure: phase %s, pre-imaged %v", install.PhaseOf(srv), spare.PreImaged(srv, e.currentImage()))
	}
	// The keep's keyless reboot is the one rescue boot since: none trusted the other key.
	e.eventually("the spare's keyless reboot", func() bool { return e.rescueBoots(id) > boots })
	e.waitSpareReady(id)
	if got := e.rescueBoots(id) - boots; got != 1 {
		t.Fatalf("%d rescue boots, want 1 (the spare's keyless one)", got)
	}
	e.assertNoDuplicatesNorLeaks()
}

// API faults during the pre-imaging's reboot: retried 5xx and bare 429s
// are absorbed; a persistent 5xx fails the pre-imaging (metric, backoff),
// the spare stays (paid, not released, not imaged) and is imaged once the
// API recovers. A corrupt image leaves the spare un-imaged too.
func TestPreImagingFaultsLeaveTheSpareUnimaged(t *testing.T) {
	e := startEnv(t, nil)
	id, _ := e.monthlySpare()
	failures := func(phase string) float64 {
		return metricValue(e, "karpenter_scaleway_em_spare_preimage_failures_total", map[string]string{"phase": phase})
	}
	down := e.w.Sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Status: 503, Method: "POST", Path: `/reboot$`})
	e.preImage(e.ctx)
	if failures(string(install.PhaseRescue)) != 1 || spare.PreImaged(e.server(id), e.currentImage()) {
		t.Fatalf("with the reboot refused: failures %v, pre-imaged %v", failures(string(install.PhaseRescue)), spare.PreImaged(e.server(id), e.currentImage()))
	}
	if s := e.server(id); s.Status != baremetal.ServerStatusReady || install.PhaseOf(s) != install.PhaseSpare {
		t.Fatalf("the spare after a failed pre-imaging: %s, phase %s", s.Status, install.PhaseOf(s))
	}
	e.w.Sim.RemoveFault(down)
	e.w.Sim.MustInject(scwsim.Fault{Kind: scwsim.FaultRateLimit, Method: "POST", Path: `/reboot$`, Times: 2})
	e.w.Sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Status: 500, Method: "POST", Path: `/reboot$`, Times: 1})
	e.eventually("the spare pre-imaged once the API recovers", func() bool {
		e.preImage(e.ctx)
		return spare.PreImaged(e.server(id), e.currentImage())
	})
	// A corrupt image: the verified write fails, the image tag is not set.
	if _, err := e.w.PublishImage(e.ctx, "v1.12.9"); err != nil {
		t.Fatal(err)
	}
	if err := e.w.CorruptImages(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.p.Images.Invalidate()
	e.updateNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) { nc.Spec.Image.TalosVersion = "v1.12.9" })
	e.reconcileNodeClass()
	e.preImage(e.ctx)
	if failures(string(install.PhaseImaging)) != 1 || spare.PreImaged(e.server(id), e.currentImage()) {
		t.Fatalf("a corrupt image: imaging failures %v, pre-imaged %v", failures(string(install.PhaseImaging)), spare.PreImaged(e.server(id), e.currentImage()))
	}
	if s, ok := e.w.Sim.Server(id); !ok || s.Status != "ready" {
		t.Fatalf("the spare after a corrupt image: %+v", s)
	}
	e.assertNoIAMKey("after failed pre-imagings")
}

// A pre-imaged spare whose rescue went away (rebooted into its disk by
// hand) is imaged again from a new keyed rescue boot; when that rewrite
// fails (a corrupt image), em-imager has already wiped the disk's
// partition table, so the spare must not keep an image tag that says it
// holds the image: it is not pre-imaged, and a NodeClaim taking it writes
// the image again instead of only a config onto a wiped disk.
func TestFailedRewriteOfAPreImagedSpareDropsItsImageTag(t *testing.T) {
	e := startEnv(t, nil)
	id, _ := e.preImagedSpare()
	img := e.currentImage()
	if _, err := e.p.API.RebootServer(e.ctx, "fr-par-2", id, baremetal.ServerBootTypeNormal, nil); err != nil {
		t.Fatal(err)
	}
	e.eventually("the spare booted from its disk", func() bool {
		s := e.server(id)
		return s.Status == baremetal.ServerStatusReady && s.BootType == baremetal.ServerBootTypeNormal
	})
	if err := e.w.CorruptImages(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.p.Images.Invalidate()
	writes := e.imagerRuns(id, "write")
	e.preImage(e.ctx)
	if e.imagerRuns(id, "write") != writes+1 {
		t.Fatalf("%d image writes, want 1 (the rewrite that fails)", e.imagerRuns(id, "write")-writes)
	}
	srv := e.server(id)
	if spare.PreImaged(srv, img) || install.Imaged(srv, img) {
		t.Fatalf("after a failed rewrite the spare still says it holds the image: tags %v", srv.Tags)
	}
	if install.PhaseOf(srv) != install.PhaseSpare {
		t.Fatalf("phase %s, want spare", install.PhaseOf(srv))
	}
}

// A rescue-boot mark whose keyed reboot never came (a restart or an API
// failure between the mark and the reboot) sits on a spare that runs the
// keyless rescue the spare policy booted: the controller cannot log in.
// The pre-imager notices within a short probe and boots a keyed rescue,
// instead of knocking until the rescue and imaging deadlines end.
func TestStaleRescueBootMarkIsRebootedNotWaitedOut(t *testing.T) {
	e := startEnv(t, nil)
	id, _ := e.monthlySpare()
	if _, err := e.p.API.EditTags(e.ctx, "fr-par-2", id, func(tags []string) ([]string, bool) {
		tags, _ = scaleway.SetTagIn(tags, install.TagRescueBoot, "install")
		return tags, true
	}); err != nil {
		t.Fatal(err)
	}
	if !install.InKeyedRescue(e.server(id)) {
		t.Fatal("the test needs the spare's keyless rescue to look keyed")
	}
	e.preImageAgain(id, e.rescueBoots(id), 1, "the keyed one")
}
