package cloudprovider_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/prometheus/client_golang/prometheus"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	coreoptions "sigs.k8s.io/karpenter/pkg/operator/options"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/bootstraptoken"
	cp "github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/cloudprovider"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/operator"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/operator/options"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// env is one simulated world plus the provider built in-process on it, the way
// the operator builds it (operator.NewProvider), so each test can restart the
// "controller" by building a second provider.
type env struct {
	t     *testing.T
	w     *world.World
	kube  client.Client
	p     *operator.Provider
	nc    *v1alpha1.ScalewayElasticMetalNodeClass
	opts  *options.Options
	imgr  []byte
	ctx   context.Context
	count int
}

func startEnv(t *testing.T, simOpts func(*scwsim.Options)) *env {
	t.Helper()
	w := world.Start(t, world.Options{Sim: simOpts})
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
	for _, kv := range w.ControllerEnv() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	e := &env{t: t, w: w, kube: w.Kube.Client, imgr: bin, ctx: context.Background()}
	e.opts = &options.Options{
		ClusterName: w.ClusterName, SystemNamespace: w.SystemNamespace, RescueSSHUser: "rescue",
		RescueSSHPort: w.Machines.SSHPort(), RescueKeySecret: "rescue-ssh", TalosAPIPort: w.Machines.TalosAPIPort(),
		DeliveryTimeout: time.Minute, RescueTimeout: time.Minute, ImagingTimeout: time.Minute, BootTimeout: time.Minute,
		RetryInterval: 100 * time.Millisecond, CatalogRefresh: time.Minute, GCGracePeriod: time.Second,
		GCInterval: time.Second, NodeClassRecheck: time.Minute,
	}
	// Karpenter's options are read from the context by parts of core the provider uses.
	e.ctx = coreoptions.ToContext(e.ctx, &coreoptions.Options{})
	e.p = e.newProvider()
	e.nc = w.NodeClass("default")
	if err := e.kube.Create(e.ctx, e.nc); err != nil {
		t.Fatal(err)
	}
	e.reconcileNodeClass()
	return e
}

// newProvider is a controller (re)start: nothing shared with the previous one
// but the cluster and the simulated world.
func (e *env) newProvider() *operator.Provider {
	e.t.Helper()
	p, err := operator.NewProvider(e.ctx, e.opts, e.kube, e.kube, nil, prometheus.NewRegistry(), testr.New(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	p.Installer.Imager = e.imgr
	// The simulator serves fewer zones than the catalogue knows: the refresh
	// reports those, and must still have refreshed the zone the tests use.
	_ = p.Catalog.Refresh(e.ctx)
	if origin, _ := p.Catalog.ZoneOrigin("fr-par-2"); origin != "live" {
		e.t.Fatalf("catalog did not refresh fr-par-2 from the simulator (origin %q)", origin)
	}
	return p
}

func (e *env) reconcileNodeClass() {
	e.t.Helper()
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	if err := e.kube.Get(e.ctx, types.NamespacedName{Name: e.nc.Name}, nc); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.p.NodeClassStatus.Reconcile(e.ctx, nc); err != nil {
		e.t.Fatal(err)
	}
	if err := e.kube.Get(e.ctx, types.NamespacedName{Name: e.nc.Name}, nc); err != nil {
		e.t.Fatal(err)
	}
	if !nc.StatusConditions().Root().IsTrue() {
		e.t.Fatalf("nodeclass not ready: %+v", nc.Status.Conditions)
	}
	e.nc = nc
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
	if err := e.kube.Create(e.ctx, nc); err != nil {
		e.t.Fatal(err)
	}
	return nc
}

// waitNode waits for the simulated kubelet to register the node of providerID.
func (e *env) waitNode(providerID string) *corev1.Node {
	e.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		nodes := &corev1.NodeList{}
		if err := e.kube.List(e.ctx, nodes); err != nil {
			e.t.Fatal(err)
		}
		for i := range nodes.Items {
			if nodes.Items[i].Spec.ProviderID == providerID {
				return &nodes.Items[i]
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.t.Fatalf("no node registered with provider ID %s", providerID)
	return nil
}

func (e *env) instanceTypes() []*cloudprovider.InstanceType {
	e.t.Helper()
	its, err := e.p.CloudProvider.GetInstanceTypes(e.ctx, &karpv1.NodePool{Spec: karpv1.NodePoolSpec{Template: karpv1.NodeClaimTemplate{
		Spec: karpv1.NodeClaimTemplateSpec{NodeClassRef: &karpv1.NodeClassReference{Name: e.nc.Name}}}}})
	if err != nil || len(its) == 0 {
		e.t.Fatalf("instance types: %d, %v", len(its), err)
	}
	return its
}

func (e *env) creates(claim string) int {
	return e.w.Sim.CreatesByTag(scaleway.TagNodeClaim)[claim]
}

func TestCreateRegistersMatchingNodeAndDeleteReleasesIt(t *testing.T) {
	e := startEnv(t, nil)
	claim := e.nodeClaim()
	got, err := e.p.CloudProvider.Create(e.ctx, claim)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	zone, id, err := scaleway.ParseProviderID(got.Status.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels[corev1.LabelInstanceTypeStable] == "" || got.Labels[corev1.LabelTopologyZone] != string(zone) ||
		got.Labels[catalog.LabelBillingPeriod] != string(catalog.BillingHourly) {
		t.Errorf("hydrated labels incomplete: %v", got.Labels)
	}
	if got.Annotations[v1alpha1.AnnotationImageSHA256] != e.nc.Status.Image.RawSHA256 {
		t.Errorf("image annotation %q, nodeclass image %q", got.Annotations[v1alpha1.AnnotationImageSHA256], e.nc.Status.Image.RawSHA256)
	}
	if got.Status.Allocatable.Cpu().IsZero() {
		t.Errorf("no allocatable cpu: %v", got.Status.Allocatable)
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
	srv, ok := e.w.Sim.Server(id)
	if !ok || !scaleway.HasTags(srv.Tags, scaleway.Tag(scaleway.TagPhase, string(install.PhaseJoined))) {
		t.Fatalf("server %s not tagged joined", id)
	}
	if n := e.creates(claim.Name); n != 1 {
		t.Errorf("%d orders for one nodeclaim", n)
	}
	list, err := e.p.CloudProvider.List(e.ctx)
	if err != nil || len(list) != 1 || list[0].Status.ProviderID != got.Status.ProviderID {
		t.Fatalf("List = %v, %v", list, err)
	}

	claim.Status.ProviderID = got.Status.ProviderID
	if err := e.p.CloudProvider.Delete(e.ctx, claim); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		err := e.p.CloudProvider.Delete(e.ctx, claim)
		if cloudprovider.IsNodeClaimNotFoundError(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server still there after a minute: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := e.p.CloudProvider.Get(e.ctx, got.Status.ProviderID); !cloudprovider.IsNodeClaimNotFoundError(err) {
		t.Errorf("Get after delete: %v, want NodeClaimNotFound", err)
	}
}

// A controller restart in any phase resumes the same server: never a second order.
func TestRestartInEachPhaseResumesWithoutReordering(t *testing.T) {
	e := startEnv(t, nil)
	for _, phase := range []install.Phase{install.PhaseOrdered, install.PhaseRescue, install.PhaseImaging, install.PhaseBooting} {
		t.Run(string(phase), func(t *testing.T) {
			claim := e.nodeClaim()
			ctx, cancel := context.WithCancel(e.ctx)
			done := make(chan error, 1)
			go func() { _, err := e.p.CloudProvider.Create(ctx, claim); done <- err }()
			// "Kill" the controller as soon as the server is in the phase.
			deadline := time.Now().Add(time.Minute)
			for !serverInPhase(e.w.Sim, claim.Name, phase) {
				if time.Now().After(deadline) {
					t.Fatalf("server of %s never reached phase %s", claim.Name, phase)
				}
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			<-done
			e.p = e.newProvider()
			got, err := e.p.CloudProvider.Create(e.ctx, claim)
			if err != nil {
				t.Fatalf("Create after restart in %s: %v", phase, err)
			}
			e.waitNode(got.Status.ProviderID)
			if n := e.creates(claim.Name); n != 1 {
				t.Errorf("restart in %s: %d orders for one nodeclaim", phase, n)
			}
		})
	}
}

func serverInPhase(sim *scwsim.Sim, claim string, phase install.Phase) bool {
	for _, s := range sim.Servers() {
		if scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagNodeClaim, claim), scaleway.Tag(scaleway.TagPhase, string(phase))) {
			return true
		}
	}
	return false
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

// A corrupt object in the bucket: em-imager refuses it, the server is released.
func TestImageDigestMismatchReleasesServer(t *testing.T) {
	e := startEnv(t, nil)
	corruptPublishedImages(t, e)
	e.p.Images.Invalidate()
	claim := e.nodeClaim()
	_, err := e.p.CloudProvider.Create(e.ctx, claim)
	var ce *cloudprovider.CreateError
	if err == nil || !errors.As(err, &ce) || ce.ConditionReason != "InstallFailed" {
		t.Fatalf("Create = %v, want a CreateError InstallFailed", err)
	}
	if !strings.Contains(err.Error(), "digest_mismatch") && !strings.Contains(err.Error(), "corrupt_input") {
		t.Errorf("error does not say what em-imager found: %v", err)
	}
	waitReleased(t, e, claim.Name)
}

func waitReleased(t *testing.T, e *env, claim string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		live := 0
		for _, s := range e.w.Sim.Servers() {
			if scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagNodeClaim, claim)) && s.Status != string(baremetal.ServerStatusDeleting) {
				live++
			}
		}
		if live == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the server of %s was not released", claim)
}

// Rescue that never answers SSH: the phase times out and the server is released.
func TestRescueSSHNeverUpReleasesServer(t *testing.T) {
	e := startEnv(t, nil)
	e.opts.RescueSSHPort = closedPort(t) // nothing answers SSH there
	e.opts.RescueTimeout = 3 * time.Second
	e.p = e.newProvider()
	claim := e.nodeClaim()
	_, err := e.p.CloudProvider.Create(e.ctx, claim)
	if err == nil || !strings.Contains(err.Error(), "rescue") {
		t.Fatalf("Create = %v, want a rescue failure", err)
	}
	waitReleased(t, e, claim.Name)
}

// A disk that never boots Talos (no API): the boot phase times out, released.
func TestTalosAPINeverUpReleasesServer(t *testing.T) {
	e := startEnv(t, nil)
	e.opts.TalosAPIPort = closedPort(t) // nothing answers the Talos API there
	e.opts.BootTimeout = 3 * time.Second
	e.p = e.newProvider()
	claim := e.nodeClaim()
	_, err := e.p.CloudProvider.Create(e.ctx, claim)
	if err == nil || !strings.Contains(err.Error(), "Talos API") {
		t.Fatalf("Create = %v, want a Talos API failure", err)
	}
	waitReleased(t, e, claim.Name)
}

func TestDeleteWhileCreateInFlight(t *testing.T) {
	e := startEnv(t, nil)
	claim := e.nodeClaim()
	done := make(chan error, 1)
	go func() { _, err := e.p.CloudProvider.Create(e.ctx, claim); done <- err }()
	deadline := time.Now().Add(time.Minute)
	for !serverInPhase(e.w.Sim, claim.Name, install.PhaseImaging) {
		if time.Now().After(deadline) {
			t.Fatal("never reached imaging")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The NodeClaim has no provider ID yet: Delete finds the server by its tag.
	if err := e.p.CloudProvider.Delete(e.ctx, claim); err != nil {
		t.Fatalf("Delete during Create: %v", err)
	}
	if err := <-done; err == nil {
		t.Fatal("Create succeeded although its NodeClaim was deleted")
	}
	waitReleased(t, e, claim.Name)
	if n := e.creates(claim.Name); n != 1 {
		t.Errorf("%d orders", n)
	}
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
	got, err := e.p.CloudProvider.Create(e.ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	claim.Annotations = got.Annotations
	if r, err := e.p.CloudProvider.IsDrifted(e.ctx, claim); err != nil || r != "" {
		t.Fatalf("fresh node drifted: %q, %v", r, err)
	}
	// A new Talos version published and named by the NodeClass.
	if _, err := e.w.PublishImage(e.ctx, "v1.12.9"); err != nil {
		t.Fatal(err)
	}
	nc := e.nc.DeepCopy()
	nc.Spec.Image.TalosVersion = "v1.12.9"
	if err := e.kube.Update(e.ctx, nc); err != nil {
		t.Fatal(err)
	}
	e.reconcileNodeClass()
	r, err := e.p.CloudProvider.IsDrifted(e.ctx, claim)
	if err != nil || (r != cp.DriftNodeClass && r != cp.DriftImage) {
		t.Fatalf("IsDrifted after a new image = %q, %v", r, err)
	}
}

// The garbage collector releases a server whose NodeClaim is gone, and leaves
// a joined node's server alone.
func TestGarbageCollectionReleasesLeakedServersOnly(t *testing.T) {
	e := startEnv(t, nil)
	kept := e.nodeClaim()
	got, err := e.p.CloudProvider.Create(e.ctx, kept)
	if err != nil {
		t.Fatal(err)
	}
	leaked := e.nodeClaim()
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(e.ctx)
	go func() { _, err := e.p.CloudProvider.Create(ctx, leaked); done <- err }()
	for !serverInPhase(e.w.Sim, leaked.Name, install.PhaseRescue) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if err := e.kube.Delete(e.ctx, leaked); err != nil {
		t.Fatal(err)
	}
	time.Sleep(e.opts.GCGracePeriod)
	gc := e.p.GarbageCollection
	gc.Clock = clock.RealClock{}
	if _, err := gc.Reconcile(e.ctx); err != nil {
		t.Fatal(err)
	}
	waitReleased(t, e, leaked.Name)
	if _, err := e.p.CloudProvider.Get(e.ctx, got.Status.ProviderID); err != nil {
		t.Fatalf("the healthy node's server was collected: %v", err)
	}
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

// corruptPublishedImages flips a byte in the middle of every compressed image
// of the bucket, keeping size and metadata: only em-imager's own checks
// (format checksums, the raw digest) can notice.
func corruptPublishedImages(t *testing.T, e *env) {
	t.Helper()
	u, err := url.Parse(e.w.S3.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(e.w.S3.AccessKey, e.w.S3.SecretKey, ""),
		Secure: u.Scheme == "https", Region: e.w.S3.Region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for obj := range mc.ListObjects(e.ctx, e.w.Bucket, minio.ListObjectsOptions{Recursive: true, WithMetadata: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		if !strings.Contains(obj.Key, ".raw.") {
			continue
		}
		r, err := mc.GetObject(e.ctx, e.w.Bucket, obj.Key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		st, err := mc.StatObject(e.ctx, e.w.Bucket, obj.Key, minio.StatObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 0x5a
		if _, err := mc.PutObject(e.ctx, e.w.Bucket, obj.Key, bytes.NewReader(data), int64(len(data)),
			minio.PutObjectOptions{UserMetadata: st.UserMetadata}); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no published image to corrupt")
	}
}

// A NodeClass is Ready only when its image and join Secret are usable, says
// why when not, and Create refuses it with NodeClassNotReady.
func TestNodeClassNotReadyReasons(t *testing.T) {
	e := startEnv(t, nil)
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

// PerNodeClaim: the node joins with its own token, which the garbage
// collection deletes once the NodeClaim registered.
func TestPerNodeClaimBootstrapToken(t *testing.T) {
	e := startEnv(t, nil)
	nc := e.nc.DeepCopy()
	nc.Spec.Talos.BootstrapToken = v1alpha1.BootstrapTokenPerNodeClaim
	if err := e.kube.Update(e.ctx, nc); err != nil {
		t.Fatal(err)
	}
	e.reconcileNodeClass()
	claim := e.nodeClaim()
	got, err := e.p.CloudProvider.Create(e.ctx, claim)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	e.waitNode(got.Status.ProviderID)
	tokens := func() []corev1.Secret {
		list := &corev1.SecretList{}
		if err := e.kube.List(e.ctx, list, client.InNamespace("kube-system"), client.MatchingLabels{bootstraptoken.LabelNodeClaim: claim.Name}); err != nil {
			t.Fatal(err)
		}
		return list.Items
	}
	list := tokens()
	if len(list) != 1 || list[0].Type != corev1.SecretTypeBootstrapToken || len(list[0].Data["expiration"]) == 0 {
		t.Fatalf("bootstrap token secrets of %s: %+v", claim.Name, list)
	}
	// Not registered yet: the sweep keeps it.
	e.p.GarbageCollection.Clock = clock.RealClock{}
	if _, err := e.p.GarbageCollection.Reconcile(e.ctx); err != nil {
		t.Fatal(err)
	}
	if len(tokens()) != 1 {
		t.Fatal("token deleted before the node registered")
	}
	stored := claim.DeepCopy()
	claim.StatusConditions().SetTrue(karpv1.ConditionTypeRegistered)
	if err := e.kube.Status().Patch(e.ctx, claim, client.MergeFrom(stored)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.GarbageCollection.Reconcile(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(tokens()); n != 0 {
		t.Fatalf("%d tokens left after the node registered", n)
	}
}

// A monthly server deleted before its minimum lifetime is kept as a spare and
// taken by the next NodeClaim of the same offer instead of a new order.
func TestMonthlyServerIsKeptAsSpareAndReused(t *testing.T) {
	e := startEnv(t, nil)
	nc := e.nc.DeepCopy()
	nc.Spec.Billing.Periods = []string{"monthly"}
	nc.Spec.Billing.MinimumLifetime = &metav1.Duration{Duration: time.Hour}
	if err := e.kube.Update(e.ctx, nc); err != nil {
		t.Fatal(err)
	}
	e.reconcileNodeClass()
	monthly := karpv1.NodeSelectorRequirementWithMinValues{Key: catalog.LabelBillingPeriod, Operator: corev1.NodeSelectorOpIn, Values: []string{"monthly"}}
	first := e.nodeClaim(monthly)
	got, err := e.p.CloudProvider.Create(e.ctx, first)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if got.Labels[catalog.LabelBillingPeriod] != "monthly" {
		t.Fatalf("billing period label %q", got.Labels[catalog.LabelBillingPeriod])
	}
	first.Status.ProviderID = got.Status.ProviderID
	if err := e.p.CloudProvider.Delete(e.ctx, first); !cloudprovider.IsNodeClaimNotFoundError(err) {
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
	// Karpenter's termination would delete the old Node object; this test runs without it.
	old := e.waitNode(got.Status.ProviderID)
	if err := e.kube.Delete(e.ctx, old); err != nil {
		t.Fatal(err)
	}
	second := e.nodeClaim(monthly, karpv1.NodeSelectorRequirementWithMinValues{
		Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{got.Labels[corev1.LabelInstanceTypeStable]}})
	again, err := e.p.CloudProvider.Create(e.ctx, second)
	if err != nil {
		t.Fatalf("Create reusing the spare: %v", err)
	}
	if again.Status.ProviderID != got.Status.ProviderID {
		t.Fatalf("ordered %s instead of reusing spare %s", again.Status.ProviderID, got.Status.ProviderID)
	}
	if n := e.creates(second.Name); n != 0 {
		t.Fatalf("%d new orders although a spare was there", n)
	}
	if node := e.waitNode(again.Status.ProviderID); node.Name != second.Name {
		t.Fatalf("reused server registered as %q, want %q", node.Name, second.Name)
	}
}
