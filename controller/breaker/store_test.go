package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/breaker"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

type marks struct {
	mu  sync.Mutex
	got []string
}

func (m *marks) MarkUnavailable(zone, offer string, billing catalog.BillingPeriod, reason catalog.UnavailableReason) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.got = append(m.got, fmt.Sprintf("%s/%s/%s:%s", zone, offer, billing, reason))
}

type world struct {
	ctx   context.Context
	kube  *testenv.Kube
	clock *clocktesting.FakeClock
	marks *marks
}

func (w *world) store() *breaker.Store {
	return &breaker.Store{Kube: w.kube.Client, Secrets: w.kube.Client, Offerings: w.marks, Clock: w.clock,
		Policy: breaker.Policy{Threshold: 2, Window: time.Hour, Backoff: 10 * time.Minute}}
}

func (w *world) nodeClass(t *testing.T, name, disk string) *v1alpha1.ScalewayElasticMetalNodeClass {
	t.Helper()
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ScalewayElasticMetalNodeClassSpec{
			Image:  v1alpha1.ImageSpec{SchematicID: strings.Repeat("a", 64), TalosVersion: "v1.12.4"},
			Talos:  v1alpha1.TalosSpec{JoinSecretRef: v1alpha1.SecretReference{Namespace: "karpenter", Name: "join-" + name}},
			Rescue: v1alpha1.RescueSpec{Disk: disk},
		},
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "karpenter", Name: "join-" + name}, StringData: map[string]string{"token": "x"}}
	if err := w.kube.Client.Create(w.ctx, sec); err != nil {
		t.Fatal(err)
	}
	if err := w.kube.Client.Create(w.ctx, nc); err != nil {
		t.Fatal(err)
	}
	return w.get(t, name)
}

func (w *world) get(t *testing.T, name string) *v1alpha1.ScalewayElasticMetalNodeClass {
	t.Helper()
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	if err := w.kube.Client.Get(w.ctx, types.NamespacedName{Name: name}, nc); err != nil {
		t.Fatal(err)
	}
	return nc
}

func (w *world) claim(t *testing.T, name, nodeClass string, create bool) *karpv1.NodeClaim {
	t.Helper()
	c := &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: karpv1.NodeClaimSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: v1alpha1.SchemeGroupVersion.Group, Kind: "ScalewayElasticMetalNodeClass", Name: nodeClass},
			Requirements: []karpv1.NodeSelectorRequirementWithMinValues{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"fr-par-2"}}},
		},
	}
	if create {
		if err := w.kube.Client.Create(w.ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func diskNotFound(claim *karpv1.NodeClaim) breaker.Failure {
	return breaker.Failure{
		Claim:   claim,
		Server:  &baremetal.Server{ID: "srv-" + claim.Name, Zone: "fr-par-2", OfferName: "EM-A116X-SSD"},
		Billing: catalog.BillingHourly,
		Err: &install.PhaseError{Phase: install.PhaseImaging, Release: true,
			Err: fmt.Errorf("em-imager write: %w", &report.Error{Code: report.CodeDiskNotFound, Message: "no disk matches"})},
	}
}

func installsHealthy(nc *v1alpha1.ScalewayElasticMetalNodeClass) string {
	c := nc.StatusConditions().Get(v1alpha1.ConditionTypeInstallsHealthy)
	if c == nil {
		return "<none>"
	}
	return string(c.Status) + " " + c.Reason + ": " + c.Message
}

func start(t *testing.T) *world {
	kube := testenv.StartKube(t, testenv.KubeOptions{CRDs: apis.CRDs})
	w := &world{ctx: context.Background(), kube: kube, clock: clocktesting.NewFakeClock(time.Now().Truncate(time.Second)), marks: &marks{}}
	if err := kube.Client.Create(w.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "karpenter"}}); err != nil {
		t.Fatal(err)
	}
	return w
}

// The breaker's state is in the NodeClass: a controller restarted while it
// is open (a new Store, nothing in memory) still orders nothing, then lets
// one probe through after the backoff; a new generation resets it at once.
func TestRestartWhileOpenThenProbeThenReset(t *testing.T) {
	w := start(t)
	w.nodeClass(t, "failing", "/dev/nvme9n1")
	first := w.store()
	for _, name := range []string{"a", "b"} {
		if err := first.Failed(w.ctx, diskNotFound(w.claim(t, name, "failing", false))); err != nil {
			t.Fatal(err)
		}
	}
	nc := w.get(t, "failing")
	if got := installsHealthy(nc); !strings.HasPrefix(got, "False "+breaker.ReasonInstallsFailing) || !strings.Contains(got, "disk_not_found") {
		t.Fatalf("InstallsHealthy = %q, want False %s naming disk_not_found", got, breaker.ReasonInstallsFailing)
	}
	if nc.StatusConditions().Root().IsTrue() {
		t.Errorf("Ready is True while the breaker is open")
	}
	if len(w.marks.got) != 0 {
		t.Errorf("offering marked %v although rescue.disk names a path (the NodeClass's fault, not the hardware's)", w.marks.got)
	}

	restarted := w.store()
	err := restarted.Admit(w.ctx, nc, "c")
	if !cloudprovider.IsNodeClassNotReadyError(err) {
		t.Fatalf("Admit after a restart while open = %v, want a NodeClassNotReadyError", err)
	}

	w.clock.Step(10*time.Minute + time.Second)
	w.claim(t, "probe", "failing", true)
	if err := restarted.Admit(w.ctx, w.get(t, "failing"), "probe"); err != nil {
		t.Fatalf("Admit after the backoff = %v, want the probe allowed", err)
	}
	nc = w.get(t, "failing")
	if nc.Status.Installs.ProbeNodeClaim != "probe" || !strings.HasPrefix(installsHealthy(nc), "False "+breaker.ReasonInstallProbing) {
		t.Fatalf("after admitting the probe: probe %q, InstallsHealthy %q", nc.Status.Installs.ProbeNodeClaim, installsHealthy(nc))
	}
	if err := restarted.Admit(w.ctx, nc, "other"); !cloudprovider.IsNodeClassNotReadyError(err) {
		t.Errorf("a second order while the probe runs: %v, want refused", err)
	}
	if err := restarted.Admit(w.ctx, nc, "probe"); err != nil {
		t.Errorf("the probe's own Create again: %v, want allowed", err)
	}

	// A fixed spec (new generation) resets the breaker at once.
	nc.Spec.Rescue.Disk = "auto"
	if err := w.kube.Client.Update(w.ctx, nc); err != nil {
		t.Fatal(err)
	}
	nc = w.get(t, "failing")
	restarted.Sync(w.ctx, nc)
	if nc.Status.Installs != nil || !strings.HasPrefix(installsHealthy(nc), "True") {
		t.Errorf("after a new generation: installs %+v, InstallsHealthy %q; want reset and True", nc.Status.Installs, installsHealthy(nc))
	}
	if err := restarted.Admit(w.ctx, nc, "d"); err != nil {
		t.Errorf("Admit after the fix: %v", err)
	}
}

// A failed probe opens the breaker again for twice the backoff; a joined
// install closes it; a change of the join Secret resets it.
func TestFailedProbeJoinedAndSecretChange(t *testing.T) {
	w := start(t)
	w.nodeClass(t, "flaky", "auto")
	s := w.store()
	for _, name := range []string{"a", "b"} {
		if err := s.Failed(w.ctx, diskNotFound(w.claim(t, name, "flaky", false))); err != nil {
			t.Fatal(err)
		}
	}
	if want := "fr-par-2/EM-A116X-SSD/hourly:install_failed"; len(w.marks.got) == 0 || w.marks.got[0] != want {
		t.Errorf("marks %v, want %s (disk auto: the hardware has no usable disk)", w.marks.got, want)
	}
	w.clock.Step(11 * time.Minute)
	probe := w.claim(t, "probe", "flaky", true)
	if err := s.Admit(w.ctx, w.get(t, "flaky"), "probe"); err != nil {
		t.Fatal(err)
	}
	if err := s.Failed(w.ctx, diskNotFound(probe)); err != nil {
		t.Fatal(err)
	}
	nc := w.get(t, "flaky")
	if got := nc.Status.Installs.NextAttempt.Sub(w.clock.Now()); got != 20*time.Minute {
		t.Errorf("backoff after a failed probe %s, want 20m", got)
	}
	if err := s.Admit(w.ctx, nc, "e"); !cloudprovider.IsNodeClassNotReadyError(err) {
		t.Errorf("Admit after a failed probe: %v, want refused", err)
	}

	// Not install failures: the NodeClass is not blamed.
	for _, err := range []error{
		errors.New("the server is gone"),
		&install.PhaseError{Phase: install.PhaseOrdered, Release: true, Err: errors.New("phase ordered did not finish within 30m0s")},
	} {
		if err := s.Failed(w.ctx, breaker.Failure{Claim: probe, Err: err}); err != nil {
			t.Fatal(err)
		}
	}
	if n := w.get(t, "flaky").Status.Installs.ConsecutiveFailures; n != 3 {
		t.Errorf("count %d after a non-install failure, want 3", n)
	}

	sec := &corev1.Secret{}
	if err := w.kube.Client.Get(w.ctx, types.NamespacedName{Namespace: "karpenter", Name: "join-flaky"}, sec); err != nil {
		t.Fatal(err)
	}
	sec.StringData = map[string]string{"token": "y"}
	if err := w.kube.Client.Update(w.ctx, sec); err != nil {
		t.Fatal(err)
	}
	if err := s.Admit(w.ctx, w.get(t, "flaky"), "f"); err != nil {
		t.Errorf("Admit after the join Secret changed: %v, want allowed", err)
	}

	if err := s.Failed(w.ctx, diskNotFound(w.claim(t, "g", "flaky", false))); err != nil {
		t.Fatal(err)
	}
	if err := s.Joined(w.ctx, w.claim(t, "h", "flaky", false)); err != nil {
		t.Fatal(err)
	}
	nc = w.get(t, "flaky")
	if nc.Status.Installs != nil || !strings.HasPrefix(installsHealthy(nc), "True") {
		t.Errorf("after a joined install: installs %+v, InstallsHealthy %q", nc.Status.Installs, installsHealthy(nc))
	}
}

// Create hands Admit the NodeClass from the informer's cache, which may not
// show yet the failure that has just opened the breaker: Admit reads the
// NodeClass afresh and refuses the order all the same.
func TestAdmitDoesNotTrustAStaleNodeClass(t *testing.T) {
	w := start(t)
	w.nodeClass(t, "failing", "/dev/nvme9n1")
	stale := w.get(t, "failing")
	s := w.store()
	for _, name := range []string{"a", "b"} {
		if err := s.Failed(w.ctx, diskNotFound(w.claim(t, name, "failing", false))); err != nil {
			t.Fatal(err)
		}
	}
	if stale.Status.Installs != nil {
		t.Fatal("the stale copy shows the failures: the test proves nothing")
	}
	if err := s.Admit(w.ctx, stale, "c"); !cloudprovider.IsNodeClassNotReadyError(err) {
		t.Fatalf("Admit with a copy read before the breaker opened = %v, want a NodeClassNotReadyError", err)
	}
}

// failingReader fails every read, as an API server that cannot be reached.
type failingReader struct{ client.Reader }

func (failingReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("connection refused")
}

// A join Secret that cannot be read for a moment is not a changed Secret:
// the open breaker stays open (Create refuses, the status keeps its state).
func TestUnreadableSecretDoesNotResetTheBreaker(t *testing.T) {
	w := start(t)
	w.nodeClass(t, "failing", "/dev/nvme9n1")
	s := w.store()
	for _, name := range []string{"a", "b"} {
		if err := s.Failed(w.ctx, diskNotFound(w.claim(t, name, "failing", false))); err != nil {
			t.Fatal(err)
		}
	}
	blind := w.store()
	blind.Secrets = failingReader{}
	if err := blind.Admit(w.ctx, w.get(t, "failing"), "c"); err == nil {
		t.Fatal("Admit ordered while the join Secret could not be read and the breaker was open")
	}
	nc := w.get(t, "failing")
	blind.Sync(w.ctx, nc)
	if nc.Status.Installs == nil {
		t.Fatal("Sync dropped the breaker's state because the join Secret could not be read")
	}
	if w.get(t, "failing").Status.Installs == nil {
		t.Fatal("the breaker's state was removed from the status")
	}
}

func deletedBeforeJoin(claim *karpv1.NodeClaim) breaker.Failure {
	return breaker.Failure{
		Claim:   claim,
		Server:  &baremetal.Server{ID: "srv-" + claim.Name, Zone: "fr-par-2", OfferName: "EM-A116X-SSD"},
		Billing: catalog.BillingHourly,
		Err:     &install.PhaseError{Phase: install.PhaseBooting, Err: install.ErrDeletedBeforeJoin},
	}
}

// A NodeClaim whose node never registers is reported twice: by its install
// (the boot timeout) and by Delete (Karpenter's registration timeout, at
// the same instant). It counts once, also when another failure came in
// between, and also for a restarted controller (the status names the last
// failure's NodeClaim). A probe deleted before it joined doubles the
// backoff like a failed one.
func TestAClaimCountsOnceAndADeletedProbeDoublesTheBackoff(t *testing.T) {
	w := start(t)
	w.nodeClass(t, "elsewhere", "auto")
	s := w.store()
	a, b := w.claim(t, "a", "elsewhere", false), w.claim(t, "b", "elsewhere", false)
	bootTimeout := deletedBeforeJoin(a)
	bootTimeout.Err = &install.PhaseError{Phase: install.PhaseBooting, Release: true, Err: errors.New("the node's registration did not happen in time")}
	for _, f := range []breaker.Failure{bootTimeout, deletedBeforeJoin(a)} {
		if err := s.Failed(w.ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	if n := w.get(t, "elsewhere").Status.Installs.ConsecutiveFailures; n != 1 {
		t.Fatalf("one nodeclaim reported by its install and by Delete counts %d failures, want 1", n)
	}
	for _, f := range []breaker.Failure{deletedBeforeJoin(b), deletedBeforeJoin(a)} {
		if err := s.Failed(w.ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.store().Failed(w.ctx, deletedBeforeJoin(b)); err != nil { // a restarted controller
		t.Fatal(err)
	}
	nc := w.get(t, "elsewhere")
	if n := nc.Status.Installs.ConsecutiveFailures; n != 2 {
		t.Fatalf("two nodeclaims, each reported more than once, count %d failures, want 2", n)
	}
	if got := installsHealthy(nc); !strings.HasPrefix(got, "False "+breaker.ReasonInstallsFailing) || !strings.Contains(got, breaker.CodeDeletedBeforeJoin) {
		t.Fatalf("InstallsHealthy = %q, want False %s naming %s", got, breaker.ReasonInstallsFailing, breaker.CodeDeletedBeforeJoin)
	}

	w.clock.Step(10*time.Minute + time.Second)
	probe := w.claim(t, "probe", "elsewhere", true)
	if err := s.Admit(w.ctx, w.get(t, "elsewhere"), "probe"); err != nil {
		t.Fatal(err)
	}
	if err := s.Failed(w.ctx, deletedBeforeJoin(probe)); err != nil {
		t.Fatal(err)
	}
	nc = w.get(t, "elsewhere")
	if got := nc.Status.Installs.NextAttempt.Sub(w.clock.Now()); got != 20*time.Minute {
		t.Errorf("backoff after the probe was deleted before joining: %s, want 20m", got)
	}
	if err := s.Admit(w.ctx, nc, "next"); !cloudprovider.IsNodeClassNotReadyError(err) {
		t.Errorf("Admit after the probe was deleted: %v, want refused", err)
	}
}
