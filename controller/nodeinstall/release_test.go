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
	timeout := apierrors.NewTimeoutError("the server was unable to return a response in the time allotted", 1)
	failing := true
	claim := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "claim-f", Finalizers: []string{"karpenter.sh/termination"}},
		Spec: karpv1.NodeClaimSpec{NodeClassRef: &karpv1.NodeClassReference{Group: v1alpha1.SchemeGroupVersion.Group, Kind: "ScalewayElasticMetalNodeClass", Name: nc.Name}}}
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nc, claim).
		WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*v1alpha1.ScalewayElasticMetalNodeClass); ok && failing {
				return timeout
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
	if outcome := w.release(ctx, srv, nil, timeout, ""); !strings.Contains(outcome, "left for Delete") {
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
	const zone = scw.Zone("fr-par-2")
	ctx := context.Background()
	sim, api, _ := simapi.StartURL(t, zone)
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "nc"}}
	claim := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "claim-h", Finalizers: []string{"karpenter.sh/termination"}},
		Spec: karpv1.NodeClaimSpec{NodeClassRef: &karpv1.NodeClassReference{Group: v1alpha1.SchemeGroupVersion.Group, Kind: "ScalewayElasticMetalNodeClass", Name: nc.Name}}}
	var srvID, atClaimDeletion string
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nc, claim).
		WithInterceptorFuncs(interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if _, ok := obj.(*karpv1.NodeClaim); ok {
				s, _ := sim.Server(srvID)
				atClaimDeletion = s.Status
			}
			return c.Delete(ctx, obj, opts...)
		}}).Build()
	w, srv := failingInstall(t, api, kube, nc.Name, claim.Name, catalog.BillingHourly)
	srvID = srv.ID

	w.fail(ctx, srv, errors.New("the install failed"))
	if atClaimDeletion == "" || atClaimDeletion == string(baremetal.ServerStatusDeleting) {
		t.Fatalf("when the nodeclaim was deleted the server was %q: released first, or the claim never deleted", atClaimDeletion)
	}
	if s, _ := sim.Server(srv.ID); s.Status != string(baremetal.ServerStatusDeleting) {
		t.Fatalf("the hourly server of the failed install is %s, want released (deleting)", s.Status)
	}
}

// A failed install whose NodeClaim deletion the API server refuses (a
// timeout on a loaded cluster) keeps trying, and releases the server only
// once the claim is deleted: released under a claim that lives and is not
// being deleted, the server would be taken from it (I2).
func TestFailedInstallReleasesItsServerOnlyOnceItsNodeClaimIsDeleted(t *testing.T) {
	const zone = scw.Zone("fr-par-2")
	ctx := context.Background()
	sim, api, _ := simapi.StartURL(t, zone)
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "nc"}}
	claim := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "claim-t", Finalizers: []string{"karpenter.sh/termination"}},
		Spec: karpv1.NodeClaimSpec{NodeClassRef: &karpv1.NodeClassReference{Group: v1alpha1.SchemeGroupVersion.Group, Kind: "ScalewayElasticMetalNodeClass", Name: nc.Name}}}
	var srvID string
	var refused []string // the server's status at each refused deletion
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nc, claim).
		WithInterceptorFuncs(interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if _, ok := obj.(*karpv1.NodeClaim); ok && len(refused) < 2 {
				s, _ := sim.Server(srvID)
				refused = append(refused, s.Status)
				return apierrors.NewTimeoutError("the server was unable to return a response in the time allotted", 1)
			}
			return c.Delete(ctx, obj, opts...)
		}}).Build()
	w, srv := failingInstall(t, api, kube, nc.Name, claim.Name, catalog.BillingHourly)
	srvID = srv.ID
	clk := clocktesting.NewFakeClock(time.Now())
	w.c.Clock = clk
	stepped := make(chan struct{})
	go func() { // time passes only while the worker waits to try again
		for {
			select {
			case <-stepped:
				return
			default:
			}
			if clk.HasWaiters() {
				clk.Step(time.Minute)
			}
			time.Sleep(time.Millisecond)
		}
	}()

	w.fail(ctx, srv, errors.New("the install failed"))
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
	if err := kube.Get(ctx, client.ObjectKeyFromObject(claim), &got); err != nil || got.DeletionTimestamp == nil {
		t.Fatalf("the nodeclaim is not being deleted (err %v)", err)
	}
	if s, _ := sim.Server(srv.ID); s.Status != string(baremetal.ServerStatusDeleting) {
		t.Fatalf("the hourly server of the failed install is %s, want released (deleting) once its claim was deleted", s.Status)
	}
}

// A failed install stopped (Delete, or the process ending) while its
// NodeClaim's deletion is refused releases nothing: the server stays the
// claim's, for Delete.
func TestFailedInstallStoppedBeforeItsNodeClaimIsDeletedLeavesTheServer(t *testing.T) {
	const zone = scw.Zone("fr-par-2")
	ctx, cancel := context.WithCancel(context.Background())
	sim, api, _ := simapi.StartURL(t, zone)
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "nc"}}
	claim := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "claim-s", Finalizers: []string{"karpenter.sh/termination"}},
		Spec: karpv1.NodeClaimSpec{NodeClassRef: &karpv1.NodeClassReference{Group: v1alpha1.SchemeGroupVersion.Group, Kind: "ScalewayElasticMetalNodeClass", Name: nc.Name}}}
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nc, claim).
		WithInterceptorFuncs(interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if _, ok := obj.(*karpv1.NodeClaim); ok {
				return apierrors.NewTimeoutError("the server was unable to return a response in the time allotted", 1)
			}
			return c.Delete(ctx, obj, opts...)
		}}).Build()
	w, srv := failingInstall(t, api, kube, nc.Name, claim.Name, catalog.BillingHourly)
	clk := clocktesting.NewFakeClock(time.Now())
	w.c.Clock = clk
	go func() { // Delete stops the worker while it waits to try again
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()

	w.fail(ctx, srv, errors.New("the install failed"))
	s, _ := sim.Server(srv.ID)
	if s.Status == string(baremetal.ServerStatusDeleting) || !scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagNodeClaim, claim.Name)) {
		t.Fatalf("a worker stopped before its claim was deleted released the server: %s %v", s.Status, s.Tags)
	}
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
