package nodeinstall

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/simapi"
)

// Issue 31 item 6: a failed install gives its server back under the spare
// policy, which releases a monthly server whose NodeClass is gone. A
// NodeClass read that fails (here a timeout) is no deletion: the monthly
// server stays the claim's, for Delete to keep as a spare.
func TestFailedInstallReleasesNothingWhenTheNodeClassCannotBeRead(t *testing.T) {
	const zone = scw.Zone("fr-par-2")
	ctx := context.Background()
	sim, api, _ := simapi.StartURL(t, zone)
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "nc"}}
	failing := true
	claim := claimOf("claim-f", nc.Name)
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nc, claim).
		WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*v1alpha1.ScalewayElasticMetalNodeClass); ok && failing {
				return errTimeout
			}
			return c.Get(ctx, key, obj, opts...)
		}}).Build()
	w, srv := failingInstall(t, api, kube, nc.Name, claim.Name, catalog.BillingMonthly)
	claimTag := scaleway.Tag(scaleway.TagNodeClaim, claim.Name)

	w.fail(ctx, srv, errors.New("the install failed"))
	s, _ := sim.Server(srv.ID)
	if s.Status == string(baremetal.ServerStatusDeleting) || !scaleway.HasTags(s.Tags, claimTag) {
		t.Fatalf("a nodeclass read that timed out released the monthly server: %s %v", s.Status, s.Tags)
	}
	if outcome := w.release(ctx, srv, nil, errTimeout, ""); !strings.Contains(outcome, "left for Delete") {
		t.Errorf("outcome %q does not say the server is left for Delete", outcome)
	}

	failing = false
	if outcome := w.release(ctx, srv, nc, nil, ""); !strings.Contains(outcome, "kept as a spare") {
		t.Fatalf("once the nodeclass reads: %q, want the monthly server kept as a spare", outcome)
	}
	if s, _ := sim.Server(srv.ID); !scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagPhase, string(install.PhaseSpare))) {
		t.Fatalf("not tagged as a spare: %v", s.Tags)
	}
}

// Issue 31, found by the soak (I2, seeds 1 and 19): a failed install deletes
// its NodeClaim before it gives the server back, so no server is released
// while its claim lives and is not being deleted.
func TestFailedInstallDeletesItsNodeClaimBeforeItsServer(t *testing.T) {
	var atClaimDeletion []string
	f := newClaimDeletion(t, "claim-h", func(status string) error {
		atClaimDeletion = append(atClaimDeletion, status)
		return nil
	})

	f.w.fail(context.Background(), f.srv, errors.New("the install failed"))
	if len(atClaimDeletion) != 1 || atClaimDeletion[0] == string(baremetal.ServerStatusDeleting) {
		t.Fatalf("when the nodeclaim was deleted the server was %q: released first, or the claim never deleted", atClaimDeletion)
	}
	if st := f.status(); st != string(baremetal.ServerStatusDeleting) {
		t.Fatalf("the hourly server of the failed install is %s, want released (deleting)", st)
	}
}

// A failed install whose NodeClaim deletion the API server refuses (a
// timeout on a loaded cluster) keeps trying, and releases the server only
// once the claim is deleted: released under a claim that lives and is not
// being deleted, the server would be taken from it (I2).
func TestFailedInstallReleasesItsServerOnlyOnceItsNodeClaimIsDeleted(t *testing.T) {
	var refused []string // the server's status at each refused deletion
	f := newClaimDeletion(t, "claim-t", func(status string) error {
		if len(refused) == 2 {
			return nil
		}
		refused = append(refused, status)
		return errTimeout
	})
	stepped := make(chan struct{})
	go func() { // time passes only while the worker waits to try again
		for {
			select {
			case <-stepped:
				return
			default:
			}
			if f.clock.HasWaiters() {
				f.clock.Step(time.Minute)
			}
			time.Sleep(time.Millisecond)
		}
	}()

	f.w.fail(context.Background(), f.srv, errors.New("the install failed"))
	close(stepped)
	if len(refused) != 2 {
		t.Fatalf("the nodeclaim's deletion was refused %d times, want 2 (tried again after each)", len(refused))
	}
	for i, st := range refused {
		if st == string(baremetal.ServerStatusDeleting) {
			t.Fatalf("refused deletion %d: the server was already released (%s) under a claim not being deleted", i+1, st)
		}
	}
	var got karpv1.NodeClaim
	if err := f.kube.Get(context.Background(), client.ObjectKey{Name: "claim-t"}, &got); err != nil || got.DeletionTimestamp == nil {
		t.Fatalf("the nodeclaim is not being deleted (err %v)", err)
	}
	if st := f.status(); st != string(baremetal.ServerStatusDeleting) {
		t.Fatalf("the hourly server of the failed install is %s, want released (deleting) once its claim was deleted", st)
	}
}

// A failed install stopped (Delete, or the process ending) while its
// NodeClaim's deletion is refused releases nothing: the server stays the
// claim's, for Delete.
func TestFailedInstallStoppedBeforeItsNodeClaimIsDeletedLeavesTheServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f := newClaimDeletion(t, "claim-s", func(string) error { return errTimeout })
	go func() { // Delete stops the worker while it waits to try again
		for !f.clock.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()

	f.w.fail(ctx, f.srv, errors.New("the install failed"))
	s, _ := f.sim.Server(f.srv.ID)
	if s.Status == string(baremetal.ServerStatusDeleting) || !scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagNodeClaim, "claim-s")) {
		t.Fatalf("a worker stopped before its claim was deleted released the server: %s %v", s.Status, s.Tags)
	}
}

var errTimeout = apierrors.NewTimeoutError("the server was unable to return a response in the time allotted", 1)

// claimDeletion is the failing install of an hourly server for a NodeClaim
// whose deletions the test decides on, with the worker on a fake clock.
type claimDeletion struct {
	sim   *scwsim.Sim
	kube  client.Client
	w     *worker
	srv   *baremetal.Server
	clock *clocktesting.FakeClock
}

// newClaimDeletion makes NodeClass nc and NodeClaim claim of it in a fake
// cluster where each deletion of the NodeClaim first calls decide with the
// server's status at that moment: an error refuses the deletion, nil lets
// it through.
func newClaimDeletion(t *testing.T, claim string, decide func(serverStatus string) error) *claimDeletion {
	t.Helper()
	f := &claimDeletion{clock: clocktesting.NewFakeClock(time.Now())}
	var api *scaleway.Client
	f.sim, api, _ = simapi.StartURL(t, scw.Zone("fr-par-2"))
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "nc"}}
	f.kube = fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nc, claimOf(claim, nc.Name)).
		WithInterceptorFuncs(interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if _, ok := obj.(*karpv1.NodeClaim); ok {
				if err := decide(f.status()); err != nil {
					return err
				}
			}
			return c.Delete(ctx, obj, opts...)
		}}).Build()
	f.w, f.srv = failingInstall(t, api, f.kube, nc.Name, claim, catalog.BillingHourly)
	f.w.c.Clock = f.clock
	return f
}

// status is the server's status in the simulated Scaleway now.
func (f *claimDeletion) status() string {
	s, _ := f.sim.Server(f.srv.ID)
	return s.Status
}

// claimOf is a NodeClaim named name of NodeClass nodeClass, with core's
// termination finalizer.
func claimOf(name, nodeClass string) *karpv1.NodeClaim {
	return &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{"karpenter.sh/termination"}},
		Spec: karpv1.NodeClaimSpec{NodeClassRef: &karpv1.NodeClassReference{Group: v1alpha1.SchemeGroupVersion.Group, Kind: "ScalewayElasticMetalNodeClass", Name: nodeClass}}}
}

// failingInstall orders an EM-B112X-SSD server of billing for the claim of
// NodeClass nodeClass, and returns the claim's install worker and the server.
func failingInstall(t *testing.T, api *scaleway.Client, kube client.Client, nodeClass, claim string, billing catalog.BillingPeriod) (*worker, *baremetal.Server) {
	t.Helper()
	const zone = scw.Zone("fr-par-2")
	ctx := context.Background()
	log := testlog.New(t)
	owner := &identity.Owner{Identity: identity.Identity{Name: "c1", ID: "uid-c1"}, API: api, Kube: kube, Log: log}
	cat := catalog.New(catalog.Options{Client: api.SDK(), Zones: []scw.Zone{zone}})
	if err := cat.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	offer, ok := cat.Offer(string(zone), "EM-B112X-SSD", billing)
	if !ok {
		t.Fatalf("no %s EM-B112X-SSD", billing)
	}
	claimTag := scaleway.Tag(scaleway.TagNodeClaim, claim)
	srv, _, err := api.CreateServer(ctx, scaleway.CreateServerRequest{Zone: zone, OfferID: offer.ID, Name: claim,
		Tags:           append(owner.Tags(), scaleway.Tag(scaleway.TagNodeClass, nodeClass), claimTag, scaleway.Tag(scaleway.TagBilling, string(billing))),
		IdempotencyTag: claimTag})
	if err != nil {
		t.Fatal(err)
	}
	return &worker{name: claim, log: log, c: &Controller{Kube: kube, API: api, Offerings: cat, Log: log,
		Spares: &spare.Keeper{API: api, Offers: cat, Rescue: &rescue.Dialer{}, Owner: owner, Log: log}}}, srv
}
