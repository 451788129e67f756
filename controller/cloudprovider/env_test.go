package cloudprovider_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
	"github.com/prometheus/client_golang/prometheus"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/events"
	coreoptions "sigs.k8s.io/karpenter/pkg/operator/options"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/kubeversion"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/operator"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/operator/options"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/invariants"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/diskimage"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// env is one simulated world plus the provider built in-process on it, the way
// the operator builds it (operator.NewProvider), with its install controller
// running in a controller-runtime manager. Core's launch is played by launch:
// Create, then the provider ID and conditions core would write. Each test can
// restart the "controller" by building a second provider.
type env struct {
	t      *testing.T
	w      *world.World
	kube   client.Client
	p      *operator.Provider
	nc     *v1alpha1.ScalewayElasticMetalNodeClass
	opts   *options.Options
	imgr   []byte
	ctx    context.Context
	events *eventLog
	reg    *prometheus.Registry // the running provider's metrics
	count  int
	stop   func()            // stops the running controller
	vars   map[string]string // the controller's environment (world.ControllerEnv)
	// wrap, when set, wraps each new provider's Talos client.
	wrap func(install.TalosApplier) install.TalosApplier
}

func startEnv(t *testing.T, simOpts func(*scwsim.Options)) *env {
	t.Helper()
	return startEnvWith(t, world.Options{Sim: simOpts}, nil)
}

// startLegacyEnv is startEnv with images lacking talos.config=metal-iso and
// a NodeClass with configDelivery: MaintenanceAPI (the config goes over
// the Talos maintenance API on :50000).
func startLegacyEnv(t *testing.T, simOpts func(*scwsim.Options)) *env {
	t.Helper()
	return startEnvWith(t, world.Options{Sim: simOpts, ImageKernelArgs: diskimage.DefaultKernelArgs},
		func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
			nc.Spec.Talos.ConfigDelivery = v1alpha1.ConfigDeliveryMaintenanceAPI
		})
}

func startEnvWith(t *testing.T, wopts world.Options, nodeClass func(*v1alpha1.ScalewayElasticMetalNodeClass)) *env {
	t.Helper()
	// A world is a test's own (API server, simulator, ports, controller
	// environment): tests with one spend most of their time waiting on its
	// delays and run beside each other, up to go test's -parallel.
	t.Parallel()
	w := world.Start(t, wopts)
	imager := os.Getenv("TEST_ASSET_EM_IMAGER")
	if imager == "" {
		p, err := world.FindBinary("em-imager")
		if err != nil {
			t.Fatalf("%v (run `make build`)", err)
		}
		imager = p
	}
	bin, err := os.ReadFile(imager)
	if err != nil {
		t.Fatalf("em-imager binary: %v (run `make build`)", err)
	}
	// The controller's variables go to its provider through a getenv of
	// its own, not the process's environment, so tests can run in parallel.
	vars := map[string]string{}
	for _, kv := range w.ControllerEnv() {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	e := &env{t: t, w: w, kube: w.Kube.Client, imgr: bin, ctx: context.Background(), events: &eventLog{}, vars: vars}
	e.opts = &options.Options{
		ClusterName: w.ClusterName, SystemNamespace: w.SystemNamespace, RescueSSHUser: "rescue",
		RescueSSHPort: w.Machines.SSHPort(), RescueKeySecret: "rescue-ssh", TalosAPIPort: w.Machines.TalosAPIPort(),
		DeliveryTimeout: time.Minute, RescueTimeout: time.Minute, ImagingTimeout: time.Minute, BootTimeout: time.Minute,
		RetryInterval: 100 * time.Millisecond, CatalogRefresh: time.Minute, GCGracePeriod: time.Second,
		GCInterval: time.Second, NodeClassRecheck: time.Minute, MaxConcurrentImaging: 4, ZoneSweepInterval: time.Minute,
	}
	// Karpenter's options are read from the context by parts of core the provider uses.
	e.ctx = coreoptions.ToContext(e.ctx, &coreoptions.Options{})
	e.p = e.newProvider()
	t.Cleanup(func() { e.stop() })
	e.nc = w.NodeClass("default")
	if nodeClass != nil {
		nodeClass(e.nc)
	}
	if err := e.kube.Create(e.ctx, e.nc); err != nil {
		t.Fatal(err)
	}
	e.reconcileNodeClass()
	return e
}

// newProvider is a controller (re)start: the previous one stops (its
// installs with it) and nothing is shared with it but the cluster and the
// simulated world.
func (e *env) newProvider() *operator.Provider {
	e.t.Helper()
	if e.stop != nil {
		e.stop()
	}
	e.reg = prometheus.NewRegistry()
	p, err := operator.NewProvider(e.ctx, e.opts, func(k string) string { return e.vars[k] }, e.kube, e.kube, e.events, e.reg, testlog.New(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	controlPlane, err := kubeversion.FromConfig(e.w.Kube.Config)
	if err != nil {
		e.t.Fatal(err)
	}
	p.SetControlPlane(controlPlane)
	p.Installer.Imager = e.imgr
	if e.wrap != nil {
		p.Installer.Talos = e.wrap(p.Installer.Talos)
	}
	// The simulator serves fewer zones than the catalogue knows: the refresh
	// reports those, and must still have refreshed the zone the tests use.
	_ = p.Catalog.Refresh(e.ctx)
	if origin, _ := p.Catalog.ZoneOrigin("fr-par-2"); origin != "live" {
		e.t.Fatalf("catalog did not refresh fr-par-2 from the simulator (origin %q)", origin)
	}
	mgr, err := controllerruntime.NewManager(e.w.Kube.Config, controllerruntime.Options{
		Scheme: e.w.Kube.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		// Each restart registers the controller again in this one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	if err := p.Installs.Register(ctx, mgr); err != nil {
		e.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			e.t.Errorf("manager: %v", err)
		}
	}()
	e.stop = func() {
		cancel()
		<-done
		p.Installer.Poller.Close()
	}
	return p
}

func (e *env) reconcileNodeClass() {
	e.t.Helper()
	if nc := e.reconcileNodeClassStatus(); !nc.StatusConditions().Root().IsTrue() {
		e.t.Fatalf("nodeclass not ready: %+v", nc.Status.Conditions)
	}
}

// reconcileNodeClassStatus reconciles the NodeClass's status once and
// returns what it wrote.
func (e *env) reconcileNodeClassStatus() *v1alpha1.ScalewayElasticMetalNodeClass {
	e.t.Helper()
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	// Again on a conflict, as controller-runtime would requeue it: the
	// installs write the NodeClass's status too (the breaker's records).
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := e.kube.Get(e.ctx, types.NamespacedName{Name: e.nc.Name}, nc); err != nil {
			return err
		}
		_, err := e.p.NodeClassStatus.Reconcile(e.ctx, nc)
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	if err := e.kube.Get(e.ctx, types.NamespacedName{Name: e.nc.Name}, nc); err != nil {
		e.t.Fatal(err)
	}
	e.nc = nc
	return nc
}

// updateNodeClass edits the NodeClass and reconciles its status.
func (e *env) updateNodeClass(edit func(*v1alpha1.ScalewayElasticMetalNodeClass)) {
	e.t.Helper()
	e.editNodeClass(edit)
	e.reconcileNodeClass()
}

// editNodeClass edits the latest NodeClass, again on a conflict: the
// controller writes it too (its status, the breaker's records).
func (e *env) editNodeClass(edit func(*v1alpha1.ScalewayElasticMetalNodeClass)) {
	e.t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
		if err := e.kube.Get(e.ctx, client.ObjectKeyFromObject(e.nc), nc); err != nil {
			return err
		}
		edit(nc)
		return e.kube.Update(e.ctx, nc)
	}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) nodeClaim(reqs ...karpv1.NodeSelectorRequirementWithMinValues) *karpv1.NodeClaim {
	e.count++
	nc := &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:   "claim-" + strings.ToLower(strings.ReplaceAll(e.t.Name(), "/", "-")) + "-" + string(rune('a'+e.count)),
			Labels: map[string]string{karpv1.NodePoolLabelKey: "default"},
		},
		Spec: karpv1.NodeClaimSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: v1alpha1.SchemeGroupVersion.Group, Kind: "ScalewayElasticMetalNodeClass", Name: e.nc.Name},
			Requirements: append([]karpv1.NodeSelectorRequirementWithMinValues{
				{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}},
			}, reqs...),
		},
	}
	if len(nc.Name) > 63 { // it becomes the node's hostname
		nc.Name = "c" + nc.Name[len(nc.Name)-62:]
	}
	if err := e.kube.Create(e.ctx, nc); err != nil {
		e.t.Fatal(err)
	}
	return nc
}

// launch is core's launch: Create, then the NodeClaim's provider ID,
// details and Launched condition, which start its install.
func (e *env) launch(claim *karpv1.NodeClaim) *karpv1.NodeClaim {
	e.t.Helper()
	got, err := e.p.CloudProvider.Create(e.ctx, claim)
	if err != nil {
		e.t.Fatalf("Create: %v", err)
	}
	e.launched(claim.Name, got)
	return got
}

// launched records Create's answer on the stored NodeClaim, as core does.
func (e *env) launched(name string, created *karpv1.NodeClaim) {
	e.t.Helper()
	stored := e.claim(name)
	nc := stored.DeepCopy()
	for k, v := range created.Labels {
		if nc.Labels[k] == "" {
			nc.Labels[k] = v
		}
	}
	if nc.Annotations == nil {
		nc.Annotations = map[string]string{}
	}
	for k, v := range created.Annotations {
		nc.Annotations[k] = v
	}
	if err := e.kube.Patch(e.ctx, nc, client.MergeFrom(stored)); err != nil {
		e.t.Fatal(err)
	}
	stored = nc.DeepCopy()
	nc.Status.ProviderID = created.Status.ProviderID
	nc.Status.Capacity, nc.Status.Allocatable = created.Status.Capacity, created.Status.Allocatable
	nc.StatusConditions().SetTrue(karpv1.ConditionTypeLaunched)
	if err := e.kube.Status().Patch(e.ctx, nc, client.MergeFrom(stored)); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) claim(name string) *karpv1.NodeClaim {
	e.t.Helper()
	nc := &karpv1.NodeClaim{}
	if err := e.kube.Get(e.ctx, types.NamespacedName{Name: name}, nc); err != nil {
		e.t.Fatal(err)
	}
	return nc
}

func (e *env) claimGone(name string) bool {
	nc := &karpv1.NodeClaim{}
	err := e.kube.Get(e.ctx, types.NamespacedName{Name: name}, nc)
	return client.IgnoreNotFound(err) == nil && (err != nil || !nc.DeletionTimestamp.IsZero())
}

// eventually polls cond until it holds or two minutes pass.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	e.poll(what, 100*time.Millisecond, cond)
}

func (e *env) poll(what string, every time.Duration, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(every)
	}
}

// waitNode waits for the simulated kubelet to register the node of providerID.
func (e *env) waitNode(providerID string) *corev1.Node {
	e.t.Helper()
	var node *corev1.Node
	e.eventually("a node with provider ID "+providerID, func() bool {
		nodes := &corev1.NodeList{}
		if err := e.kube.List(e.ctx, nodes); err != nil {
			e.t.Fatal(err)
		}
		for i := range nodes.Items {
			if nodes.Items[i].Spec.ProviderID == providerID {
				node = &nodes.Items[i]
				return true
			}
		}
		return false
	})
	return node
}

// register marks the claim Registered, as core does once its node is there.
func (e *env) register(name string) {
	e.t.Helper()
	stored := e.claim(name)
	nc := stored.DeepCopy()
	nc.StatusConditions().SetTrue(karpv1.ConditionTypeRegistered)
	if err := e.kube.Status().Patch(e.ctx, nc, client.MergeFrom(stored)); err != nil {
		e.t.Fatal(err)
	}
}

// deleteClaim plays core's termination: Delete until the server is gone
// (NodeClaimNotFound), then the NodeClaim object goes.
func (e *env) deleteClaim(claim *karpv1.NodeClaim) {
	e.t.Helper()
	c := e.claim(claim.Name)
	e.eventually("Delete to report the server gone", func() bool {
		err := e.p.CloudProvider.Delete(e.ctx, c)
		if err != nil && !cloudprovider.IsNodeClaimNotFoundError(err) {
			e.t.Fatalf("Delete: %v", err)
		}
		return err != nil
	})
	if err := e.kube.Delete(e.ctx, c); client.IgnoreNotFound(err) != nil {
		e.t.Fatal(err)
	}
}

func (e *env) creates(claim string) int {
	return e.w.Sim.CreatesByTag(scaleway.TagNodeClaim)[claim]
}

// serverOf is the live server tagged for claim in the simulator.
func (e *env) serverOf(claim string) (scwsim.ServerState, bool) {
	for _, s := range e.w.Sim.Servers() {
		if scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagNodeClaim, claim)) && s.Status != string(baremetal.ServerStatusDeleting) {
			return s, true
		}
	}
	return scwsim.ServerState{}, false
}

// waitPhase waits for the server of claim to be in phase (looked at often:
// with the test delays a phase lasts a fraction of a second).
func (e *env) waitPhase(claim string, phase install.Phase) {
	e.t.Helper()
	e.poll("the server of "+claim+" in phase "+string(phase), 5*time.Millisecond, func() bool {
		s, ok := e.serverOf(claim)
		return ok && scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagPhase, string(phase)))
	})
}

func (e *env) waitReleased(claim string) {
	e.t.Helper()
	e.eventually("the server of "+claim+" released", func() bool { _, ok := e.serverOf(claim); return !ok })
}

// assertNoDuplicatesNorLeaks: one order at most per NodeClaim, and every
// live server backs a NodeClaim that still exists (or is a spare).
func (e *env) assertNoDuplicatesNorLeaks() {
	e.t.Helper()
	// I1 over the simulator's ledger: orders whose answer was lost count,
	// and so do spares taken for a claim that already had a server.
	for _, v := range invariants.I1(e.w.Sim.Ledger(), invariants.Facts{}) {
		e.t.Error(v)
	}
	for _, s := range e.w.Sim.Servers() {
		if s.Status == string(baremetal.ServerStatusDeleting) || scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagPhase, string(install.PhaseSpare))) {
			continue
		}
		name := scaleway.ParseTags(s.Tags)[scaleway.TagNodeClaim]
		if name == "" || e.claimGone(name) {
			e.t.Errorf("server %s (%s, %s) leaked: nodeclaim %q is gone", s.ID, s.OfferName, s.Status, name)
		}
	}
}

// eventLog is the provider's event recorder in tests.
type eventLog struct {
	mu      sync.Mutex
	evs     []events.Event
	watcher func(events.Event)
}

func (l *eventLog) Publish(evs ...events.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, evs...)
	if l.watcher != nil {
		for _, ev := range evs {
			l.watcher(ev)
		}
	}
}

// onPublish calls f with each event as it is published, before the
// publisher goes on (f must not publish).
func (l *eventLog) onPublish(f func(events.Event)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watcher = f
}

// said reports whether an event of reason on claim says what.
func (l *eventLog) said(claim, reason, what string) bool {
	for _, ev := range l.find(claim, reason) {
		if strings.Contains(ev.Message, what) {
			return true
		}
	}
	return false
}

// find returns the events of reason on the NodeClaim named claim.
func (l *eventLog) find(claim, reason string) []events.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []events.Event
	for _, ev := range l.evs {
		if o, ok := ev.InvolvedObject.(client.Object); ok && ev.Reason == reason && o.GetName() == claim {
			out = append(out, ev)
		}
	}
	return out
}

// assertConfigFromDisk checks that server id's node got its config from the
// metal-iso partition (the simulated Talos read it) and that nothing ever
// talked to its Talos API on :50000.
func (e *env) assertConfigFromDisk(id string) {
	e.t.Helper()
	st, ok := e.w.Sim.Server(id)
	if !ok {
		e.t.Fatalf("server %s not in the simulator", id)
	}
	srv, err := e.p.API.GetServer(e.ctx, scw.Zone(st.Zone), id)
	if err != nil {
		e.t.Fatal(err)
	}
	if d := install.DeliveryOf(srv); d != install.DeliveryDisk {
		e.t.Errorf("server %s config delivery %q, want disk", id, d)
	}
	calls, err := e.w.Machines.TalosAPICalls(id)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(calls) != 0 {
		e.t.Errorf("server %s: %d calls to the Talos API on :50000 in Disk mode: %+v", id, len(calls), calls)
	}
	fromDisk := false
	for _, ev := range e.w.Machines.Events() {
		fromDisk = fromDisk || (ev.ServerID == id && ev.What == "config-from-disk")
	}
	if !fromDisk {
		e.t.Errorf("server %s never read its config from the metal-iso partition", id)
	}
}

// nodeClass reads a NodeClass now.
func (e *env) nodeClass(name string) *v1alpha1.ScalewayElasticMetalNodeClass {
	e.t.Helper()
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	if err := e.kube.Get(e.ctx, types.NamespacedName{Name: name}, nc); err != nil {
		e.t.Fatal(err)
	}
	return nc
}
