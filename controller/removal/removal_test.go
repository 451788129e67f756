package removal

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/inventory"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/eventlog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/simapi"
)

const zone = scw.Zone("fr-par-2")

var c1 = identity.Identity{Name: "c1", ID: "uid-c1"}

type fixture struct {
	sim  *scwsim.Sim
	api  *scaleway.Client
	kube client.Client
	rec  *eventlog.Recorder
	c    *Controller
}

func setup(t *testing.T, nc *v1alpha1.ScalewayElasticMetalNodeClass, objs ...client.Object) *fixture {
	sim, api := simapi.Start(t, zone)
	_ = v1alpha1.SchemeGroupVersion
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(append(objs, nc)...).Build()
	owner := &identity.Owner{Identity: c1, API: api, Kube: kube, Log: testlog.New(t)}
	inv := &inventory.Inventory{API: api, Kube: kube, Owner: owner, DefaultZone: string(zone), Log: testlog.New(t)}
	cat := catalog.New(catalog.Options{Client: api.SDK(), Zones: []scw.Zone{zone}})
	if err := cat.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	keeper := &spare.Keeper{API: api, Offers: cat, Rescue: &rescue.Dialer{}, Owner: owner, Log: testlog.New(t)}
	rec := &eventlog.Recorder{}
	f := &fixture{sim: sim, api: api, kube: kube, rec: rec,
		c: &Controller{Kube: kube, Servers: inv.Servers, Spares: keeper, Recorder: rec, Log: testlog.New(t)}}
	f.reconcile(t, nc.Name) // adds the finalizer
	return f
}

func nodeClass(name, onDeletion string) *v1alpha1.ScalewayElasticMetalNodeClass {
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
	nc.Spec.Billing.SparesOnDeletion = onDeletion
	return nc
}

func claimOf(name, nodeClass string) *karpv1.NodeClaim {
	return &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: karpv1.NodeClaimSpec{
		NodeClassRef: &karpv1.NodeClassReference{Group: v1alpha1.SchemeGroupVersion.Group, Kind: "ScalewayElasticMetalNodeClass", Name: nodeClass}}}
}

// reconcile runs the controller on the stored NodeClass (false: it is gone).
func (f *fixture) reconcile(t *testing.T, name string) (bool, error) {
	t.Helper()
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	if err := f.kube.Get(context.Background(), types.NamespacedName{Name: name}, nc); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return false, nil
		}
		t.Fatal(err)
	}
	_, err := f.c.Reconcile(context.Background(), nc)
	return true, err
}

func (f *fixture) exists(t *testing.T, name string) bool {
	t.Helper()
	err := f.kube.Get(context.Background(), types.NamespacedName{Name: name}, &v1alpha1.ScalewayElasticMetalNodeClass{})
	if client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	return err == nil
}

func (f *fixture) delete(t *testing.T, obj client.Object) {
	t.Helper()
	if err := f.kube.Delete(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

// order a monthly server of this cluster for nodeClass, a spare or in use by claim.
func (f *fixture) order(t *testing.T, nodeClass, claim string) *baremetal.Server {
	t.Helper()
	offerID, ok := f.sim.OfferID(string(zone), "EM-A115X-SSD", "monthly")
	if !ok {
		t.Fatal("no monthly offer")
	}
	tags := append(c1.Tags(), scaleway.Tag(scaleway.TagNodeClass, nodeClass))
	if claim == "" {
		tags = install.SetPhaseIn(append(tags, "order="+nodeClass+"-spare"), install.PhaseSpare, time.Now())
	} else {
		tags = install.SetPhaseIn(append(tags, scaleway.Tag(scaleway.TagNodeClaim, claim)), install.PhaseJoined, time.Now())
	}
	idem := tags[len(tags)-1]
	for _, tag := range tags {
		if strings.HasPrefix(tag, "order=") || strings.HasPrefix(tag, scaleway.TagNodeClaim+"=") {
			idem = tag
		}
	}
	srv, _, err := f.api.CreateServer(context.Background(), scaleway.CreateServerRequest{
		Zone: zone, OfferID: offerID, Name: "n", Tags: tags, IdempotencyTag: idem})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func (f *fixture) server(t *testing.T, id string) scwsim.ServerState {
	t.Helper()
	s, ok := f.sim.Server(id)
	if !ok {
		t.Fatalf("server %s gone from the simulator", id)
	}
	return s
}

// managedFor lists the live servers still tagged as this cluster's for nodeClass.
func (f *fixture) managedFor(nodeClass string) []string {
	var out []string
	for _, s := range f.sim.Servers() {
		if s.Status != string(baremetal.ServerStatusDeleting) && scaleway.HasTags(s.Tags, c1.Tags()[0]) &&
			scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagNodeClass, nodeClass)) {
			out = append(out, s.ID)
		}
	}
	return out
}

// Deleting a NodeClass waits for its NodeClaims, then releases its spares
// (and only its), then lets it go: nothing of it stays tagged as managed.
func TestDeletionWaitsForNodeClaimsThenReleasesSpares(t *testing.T) {
	claim := claimOf("in-use", "gp")
	f := setup(t, nodeClass("gp", ""), claim, nodeClass("other", ""))
	inUse := f.order(t, "gp", "in-use")
	sp := f.order(t, "gp", "")
	otherSpare := f.order(t, "other", "")

	f.delete(t, nodeClass("gp", ""))
	if _, err := f.reconcile(t, "gp"); err != nil {
		t.Fatal(err)
	}
	if !f.exists(t, "gp") {
		t.Fatal("nodeclass gone while a nodeclaim uses it")
	}
	if s := f.server(t, sp.ID); s.Status == string(baremetal.ServerStatusDeleting) {
		t.Fatal("spare released while a nodeclaim still uses the nodeclass")
	}
	if got := f.rec.Reasons(); got != ReasonWaitingForNodeClaims {
		t.Errorf("events %q, want %s", got, ReasonWaitingForNodeClaims)
	}

	// Karpenter deletes the NodeClaim; its server goes through Delete (here: by hand).
	f.delete(t, claim)
	if _, err := f.api.DeleteServer(context.Background(), zone, inUse.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.reconcile(t, "gp"); err != nil {
		t.Fatal(err)
	}
	if f.exists(t, "gp") {
		t.Fatal("nodeclass still there once its nodeclaims are gone and its spares released")
	}
	if s := f.server(t, sp.ID); s.Status != string(baremetal.ServerStatusDeleting) {
		t.Errorf("spare %s not released: %s", sp.ID, s.Status)
	}
	if left := f.managedFor("gp"); len(left) != 0 {
		t.Errorf("servers of the deleted nodeclass still managed: %v", left)
	}
	if s := f.server(t, otherSpare.ID); s.Status == string(baremetal.ServerStatusDeleting) {
		t.Error("another nodeclass's spare released")
	}
	if got := f.rec.Reasons(); !strings.HasSuffix(got, ReasonSparesReleased) {
		t.Errorf("events %q, want the last %s", got, ReasonSparesReleased)
	}
}

// sparesOnDeletion: Keep hands the spare over: it stays, with none of the
// cluster's tags, tagged handed-over-by, and the cluster never lists it again.
func TestDeletionWithKeepHandsSparesOver(t *testing.T) {
	f := setup(t, nodeClass("gp", v1alpha1.SparesKeep))
	sp := f.order(t, "gp", "")
	f.delete(t, nodeClass("gp", ""))
	if _, err := f.reconcile(t, "gp"); err != nil {
		t.Fatal(err)
	}
	if f.exists(t, "gp") {
		t.Fatal("nodeclass still there")
	}
	s := f.server(t, sp.ID)
	if s.Status == string(baremetal.ServerStatusDeleting) {
		t.Fatal("kept spare released")
	}
	for _, key := range []string{scaleway.TagManagedBy, scaleway.TagClusterID, scaleway.TagPhase, install.TagPhaseSince} {
		if v, ok := scaleway.TagValue(s.Tags, key); ok {
			t.Errorf("handed-over server still tagged %s=%s", key, v)
		}
	}
	if !scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagHandedOverBy, "c1")) {
		t.Errorf("handed-over server tags %v lack %s", s.Tags, scaleway.Tag(scaleway.TagHandedOverBy, "c1"))
	}
	srvs, err := f.c.Servers(context.Background())
	if err != nil || len(srvs) != 0 {
		t.Errorf("the cluster still lists %d servers (%v)", len(srvs), err)
	}
	if got := f.rec.Reasons(); got != ReasonSparesHandedOver {
		t.Errorf("events %q, want %s", got, ReasonSparesHandedOver)
	}
}

// The Scaleway API down: the NodeClass stays (the spare would leak
// otherwise), each attempt fails with an error (controller-runtime retries
// with backoff) and a Warning event saying why; once the API answers, the
// deletion completes.
func TestDeletionWaitsForTheAPIAndSaysWhy(t *testing.T) {
	f := setup(t, nodeClass("gp", ""))
	sp := f.order(t, "gp", "")
	f.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Path: `/servers`, Status: 503, Times: 1000})
	f.delete(t, nodeClass("gp", ""))
	for i := 0; i < 3; i++ {
		if _, err := f.reconcile(t, "gp"); err == nil {
			t.Fatal("reconcile succeeded with the API down")
		}
	}
	if !f.exists(t, "gp") {
		t.Fatal("nodeclass gone with its spare unreleased")
	}
	last := f.rec.Last()
	if last.Reason != ReasonRemovalBlocked || last.Type != "Warning" || !strings.Contains(last.Message, "503") {
		t.Errorf("last event %+v, want a Warning %s naming the API's answer", last, ReasonRemovalBlocked)
	}
	f.sim.ClearFaults()
	if _, err := f.reconcile(t, "gp"); err != nil {
		t.Fatal(err)
	}
	if f.exists(t, "gp") {
		t.Fatal("nodeclass still there once the API answers")
	}
	if s := f.server(t, sp.ID); s.Status != string(baremetal.ServerStatusDeleting) {
		t.Errorf("spare not released: %s", s.Status)
	}
}
