// Package nodeinstall runs the installs of the servers Create ordered.
//
// Create returns as soon as a NodeClaim's server exists (Karpenter core
// schedules and consolidates nothing while a NodeClaim lacks a provider ID).
// This controller then reconciles every NodeClaim of the provider that has a
// provider ID and has not registered: one worker per NodeClaim drives the
// server through install.Installer from its phase tag (so a restart resumes
// it), images are written a bounded number at a time (Installer.ImagingSlots),
// and each phase has its deadline. While the install runs, the controller
// holds Karpenter's registration window (package registration) so that core
// does not time out an install that is making progress, and lets core's own
// 15 minutes start when the server boots its OS.
//
// An install that fails for good (a phase deadline, a broken server, a bad
// image) gives the server back under the spare policy (package spare, read
// fresh: monthly servers are kept, broken ones never; an order that ended
// out of stock marks its offering unavailable), publishes InstallFailed on
// the NodeClaim and deletes it, so Karpenter replaces it. Delete during an
// install stops the worker first (Stop).
package nodeinstall

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/imagesource"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/registration"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
)

// ImageSource resolves a NodeClass's image (*imagesource.Source).
type ImageSource interface {
	Resolve(ctx context.Context, s imagesource.Settings) (*imagesource.Image, error)
}

// Offerings is what a failed install needs of the catalogue.
type Offerings interface {
	spare.Offers
	MarkUnavailable(zone, offerName string, billing catalog.BillingPeriod, reason catalog.UnavailableReason)
}

// Controller reconciles NodeClaims mid-install.
type Controller struct {
	Kube      client.Client
	API       *scaleway.Client
	Installer *install.Installer
	Spares    *spare.Keeper
	Window    *registration.Window
	Offerings Offerings
	Images    ImageSource
	Keys      func(ctx context.Context) ([]string, error)
	Config    *Configs
	Recorder  events.Recorder
	Clock     clock.Clock
	Log       logr.Logger
	Metrics   *Metrics
	// Resync is how often a NodeClaim mid-install is reconciled (the
	// registration window's refresh; default 1m).
	Resync time.Duration

	mu      sync.Mutex
	base    context.Context // lives as long as the process
	workers map[string]*worker
}

// Reconcile starts (or keeps) the NodeClaim's worker and holds its
// registration window.
func (c *Controller) Reconcile(ctx context.Context, claim *karpv1.NodeClaim) (reconcile.Result, error) {
	if !claim.DeletionTimestamp.IsZero() || claim.Status.ProviderID == "" ||
		claim.StatusConditions().Get(karpv1.ConditionTypeRegistered).IsTrue() {
		// Deleting: CloudProvider.Delete stops the worker before acting.
		// Registered: the install is over (a worker still running sees the
		// node and records the joined phase itself).
		return reconcile.Result{}, nil
	}
	w := c.ensure(claim)
	phase, since := w.state()
	var err error
	switch {
	case phase == install.PhaseBooting:
		_, err = c.Window.Booting(ctx, claim, since)
	case phase.Active():
		_, err = c.Window.Installing(ctx, claim, since.Add(c.Installer.Timeouts.Of(phase)))
	}
	if err != nil {
		// A conflict (core wrote the NodeClaim meanwhile) is retried soon.
		return reconcile.Result{RequeueAfter: time.Second}, client.IgnoreNotFound(ignoreConflict(err))
	}
	return reconcile.Result{RequeueAfter: c.resync()}, nil
}

// Stop ends NodeClaim name's worker, if any, and waits until it has stopped
// touching the server: Delete acts only after it.
func (c *Controller) Stop(name string) {
	c.mu.Lock()
	w := c.workers[name]
	delete(c.workers, name)
	c.mu.Unlock()
	if w != nil {
		w.cancel()
		<-w.done
	}
}

// Running is the number of installs in progress.
func (c *Controller) Running() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.workers)
}

// ensure returns the NodeClaim's worker, starting it if needed.
func (c *Controller) ensure(claim *karpv1.NodeClaim) *worker {
	c.mu.Lock()
	if w := c.workers[claim.Name]; w != nil && w.uid == claim.UID && !w.finished() {
		c.mu.Unlock()
		return w
	}
	if c.workers == nil {
		c.workers = map[string]*worker{}
	}
	base := c.base
	if base == nil {
		base = context.Background()
	}
	ctx, cancel := context.WithCancel(base)
	w := &worker{c: c, uid: claim.UID, name: claim.Name, providerID: claim.Status.ProviderID,
		cancel: cancel, done: make(chan struct{}), log: c.Log.WithValues("nodeclaim", claim.Name, "providerID", claim.Status.ProviderID)}
	old := c.workers[claim.Name]
	c.workers[claim.Name] = w
	c.mu.Unlock()
	if old != nil {
		old.cancel()
		<-old.done
	}
	go w.run(ctx)
	return w
}

// forget drops w from the table once it ended on its own.
func (c *Controller) forget(w *worker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.workers[w.name] == w {
		delete(c.workers, w.name)
	}
}

func (c *Controller) resync() time.Duration {
	if c.Resync > 0 {
		return c.Resync
	}
	return time.Minute
}

func (c *Controller) clock() clock.Clock {
	if c.Clock == nil {
		return clock.RealClock{}
	}
	return c.Clock
}

// publish records an event on the NodeClaim.
func (c *Controller) publish(claim *karpv1.NodeClaim, typ, reason, msg string) {
	if c.Recorder == nil {
		return
	}
	c.Recorder.Publish(events.Event{InvolvedObject: claim, Type: typ, Reason: reason, Message: msg,
		DedupeValues: []string{claim.Name, reason, msg}})
}

// Register adds the controller to the manager; ctx bounds the workers.
func (c *Controller) Register(ctx context.Context, m manager.Manager) error {
	c.mu.Lock()
	c.base = ctx
	c.mu.Unlock()
	return controllerruntime.NewControllerManagedBy(m).
		Named("scaleway-em.nodeinstall").
		For(&karpv1.NodeClaim{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return Managed(o.(*karpv1.NodeClaim))
		}))).
		WithOptions(controller.Options{MaxConcurrentReconciles: 10}).
		Complete(reconcile.AsReconciler(m.GetClient(), c))
}

// Managed reports whether claim is built by this provider's NodeClass.
func Managed(claim *karpv1.NodeClaim) bool {
	ref := claim.Spec.NodeClassRef
	return ref != nil && ref.Group == v1alpha1.SchemeGroupVersion.Group && ref.Kind == "ScalewayElasticMetalNodeClass"
}

func (c *Controller) getClaim(ctx context.Context, name string) (*karpv1.NodeClaim, error) {
	claim := &karpv1.NodeClaim{}
	if err := c.Kube.Get(ctx, types.NamespacedName{Name: name}, claim); err != nil {
		return nil, err
	}
	return claim, nil
}

// nodeRegistered reports whether a Node with providerID exists.
func (c *Controller) nodeRegistered(ctx context.Context, providerID string) (bool, error) {
	nodes := &corev1.NodeList{}
	if err := c.Kube.List(ctx, nodes, client.MatchingFields{"spec.providerID": providerID}); err != nil {
		// Without the field index (a plain client), scan.
		if err := c.Kube.List(ctx, nodes); err != nil {
			return false, err
		}
	}
	for _, n := range nodes.Items {
		if n.Spec.ProviderID == providerID {
			return true, nil
		}
	}
	return false, nil
}

func ignoreConflict(err error) error {
	if err != nil && isConflict(err) {
		return nil
	}
	return err
}
