// Package removal is the NodeClass's finalizer. A NodeClass's spares
// (monthly servers kept for its next NodeClaims) are paid for and belong to
// no NodeClaim: without the finalizer, deleting the NodeClass left them to
// garbage collection, and uninstalling left them paid with nobody to
// release them. Deleting a NodeClass now waits until no NodeClaim uses it,
// then releases its spares (or hands them over, spec.billing.sparesOnDeletion:
// Keep), then lets the NodeClass go. A Scaleway API that does not answer
// holds the NodeClass with a Warning event saying why, retried with
// controller-runtime's exponential backoff.
package removal

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"k8s.io/apimachinery/pkg/types"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
)

// Finalizer on every NodeClass.
const Finalizer = "karpenter-scaleway-em.io/termination"

// WaitInterval between checks while NodeClaims still use the NodeClass
// (their deletion also triggers one).
const WaitInterval = 30 * time.Second

// Controller holds the finalizer.
type Controller struct {
	Kube client.Client
	// Servers lists every server of the cluster (inventory.Servers).
	Servers func(ctx context.Context) ([]*baremetal.Server, error)
	Spares  *spare.Keeper
	// Records, when set, remembers the NodeClasses deleted with
	// sparesOnDeletion: Keep, for the spares this finalizer's listing
	// missed (the garbage collector reads it).
	Records *Records
	// Recorder may be nil.
	Recorder events.Recorder
	Log      logr.Logger
}

// Reconcile implements reconcile.ObjectReconciler.
func (c *Controller) Reconcile(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass) (reconcile.Result, error) {
	if nc.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, c.guard(ctx, nc)
	}
	if !controllerutil.ContainsFinalizer(nc, Finalizer) {
		return reconcile.Result{}, nil
	}
	claims, err := c.claimsOf(ctx, nc.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(claims) > 0 {
		c.publish(waitingForNodeClaims(nc, claims))
		return reconcile.Result{RequeueAfter: WaitInterval}, nil
	}
	// Recorded before the listing: a spare it misses (kept moments ago,
	// not listed yet) is handed over later by the garbage collector.
	if c.Records != nil && nc.Spec.Billing.KeepSparesOnDeletion() {
		if err := c.Records.Keep(ctx, nc.Name, nc.DeletionTimestamp.Time); err != nil {
			c.publish(recordBlocked(nc, err))
			return reconcile.Result{}, err
		}
	}
	ended, err := c.endSpares(ctx, nc)
	if err != nil {
		c.publish(sparesBlocked(nc, err))
		return reconcile.Result{}, err
	}
	c.reportEnded(nc, ended)
	stored := nc.DeepCopy()
	controllerutil.RemoveFinalizer(nc, Finalizer)
	if err := c.Kube.Patch(ctx, nc, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	c.Log.Info("nodeclass deleted: no nodeclaim uses it and its spares are ended", "nodeclass", nc.Name, "spares", len(ended),
		"sparesOnDeletion", nc.Spec.Billing.SparesOnDeletion)
	return reconcile.Result{}, nil
}

// guard puts the finalizer on a NodeClass that does not have it yet. A
// NodeClass new under this name gets it after the records of an earlier one
// are forgotten: the spares tagged with the name are its own.
func (c *Controller) guard(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass) error {
	if controllerutil.ContainsFinalizer(nc, Finalizer) {
		return nil
	}
	if c.Records != nil {
		if err := c.Records.Forget(ctx, nc.Name); err != nil {
			return err
		}
	}
	stored := nc.DeepCopy()
	controllerutil.AddFinalizer(nc, Finalizer)
	return client.IgnoreNotFound(c.Kube.Patch(ctx, nc, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})))
}

// reportEnded tells, on the NodeClass, which spares its deletion ended and
// how: released, or handed over as the billing policy asks.
func (c *Controller) reportEnded(nc *v1alpha1.ScalewayElasticMetalNodeClass, ended []string) {
	if len(ended) == 0 {
		return
	}
	c.publish(sparesEnded(nc, c.Spares.Owner.Name, ended))
}

// claimsOf names the NodeClaims that use NodeClass name.
func (c *Controller) claimsOf(ctx context.Context, name string) ([]string, error) {
	list := &karpv1.NodeClaimList{}
	if err := c.Kube.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing nodeclaims: %w", err)
	}
	var out []string
	for i := range list.Items {
		if usesNodeClass(&list.Items[i], name) {
			out = append(out, list.Items[i].Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

func usesNodeClass(claim *karpv1.NodeClaim, name string) bool {
	ref := claim.Spec.NodeClassRef
	return ref != nil && ref.Name == name && ref.Group == v1alpha1.SchemeGroupVersion.Group
}

// endSpares releases (or hands over) every spare of nc, and returns the
// IDs it ended. Any failure is an error: the NodeClass stays until a pass
// ends them all.
func (c *Controller) endSpares(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass) ([]string, error) {
	srvs, err := c.Servers(ctx)
	if err != nil {
		return nil, err
	}
	var ended []string
	var errs []string
	for _, s := range srvs {
		if v, _ := scaleway.TagValue(s.Tags, scaleway.TagNodeClass); v != nc.Name || install.PhaseOf(s) != install.PhaseSpare ||
			s.Status == baremetal.ServerStatusDeleting {
			continue
		}
		// Only a monthly spare is handed over: an hourly one (a warm-pool
		// server) would bill its new owner by the hour for nothing.
		outcome, err := c.Spares.EndSpare(ctx, s.Zone, s.ID, nc.Spec.Billing.KeepSparesOnDeletion() && spare.Monthly(c.Spares.Offers, s))
		switch {
		case err != nil:
			errs = append(errs, err.Error())
		case outcome == spare.Released || outcome == spare.HandedOver:
			ended = append(ended, string(s.Zone)+"/"+s.ID)
		}
	}
	if len(errs) > 0 {
		return ended, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return ended, nil
}

// publish records ev (events.go) on the controller's recorder, if any.
func (c *Controller) publish(ev events.Event) {
	if c.Recorder != nil {
		c.Recorder.Publish(ev)
	}
}

// Register adds the controller: NodeClasses, and the deletion of their NodeClaims.
func (c *Controller) Register(_ context.Context, m manager.Manager) error {
	return controllerruntime.NewControllerManagedBy(m).
		Named("nodeclass.removal").
		For(&v1alpha1.ScalewayElasticMetalNodeClass{}).
		Watches(&karpv1.NodeClaim{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			claim, ok := o.(*karpv1.NodeClaim)
			if !ok || claim.Spec.NodeClassRef == nil || claim.Spec.NodeClassRef.Group != v1alpha1.SchemeGroupVersion.Group {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: claim.Spec.NodeClassRef.Name}}}
		})).
		Complete(reconcile.AsReconciler(m.GetClient(), c))
}
