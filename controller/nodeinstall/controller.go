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
// install stops the worker first and counts a NodeClaim deleted before its
// install joined as a failed install (Deleted).
package nodeinstall

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/breaker"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/clocks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/imagesource"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/phaselabels"
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

// Breaker is the install-failure breaker (*breaker.Store).
type Breaker interface {
	Failed(ctx context.Context, f breaker.Failure) error
	Joined(ctx context.Context, claim *karpv1.NodeClaim) error
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
	Config    *Configs
	Recorder  events.Recorder
	Clock     clock.Clock
	Log       logr.Logger
	Metrics   *Metrics
	// Breaker counts failed and joined installs per NodeClass (*breaker.Store; nil: none).
	Breaker Breaker
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
	if !claim.DeletionTimestamp.IsZero() || claim.Status.ProviderID == "" {
		// Deleting: CloudProvider.Delete stops the worker before acting.
		return reconcile.Result{}, nil
	}
	if claim.StatusConditions().Get(karpv1.ConditionTypeRegistered).IsTrue() {
		// The install is over (a worker still running sees the node and
		// records the joined phase itself).
		return reconcile.Result{}, client.IgnoreNotFound(phaselabels.Settle(ctx, c.Kube, claim))
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

// Deleted is what Delete does first: it stops the NodeClaim's install
// (Stop) and, when the NodeClaim is deleted before its install joined,
// counts that as a failed install for the breaker. Karpenter's registration
// timeout (15 minutes from the boot, a constant of core) deletes the
// NodeClaim at the instant the install's own boot timeout would fail it,
// and the Stop cuts the install's failure handling short: without this,
// a NodeClass whose nodes never register (a join Secret for another
// cluster) would never open its breaker and order servers forever, and a
// deleted probe would let the next order probe again at once.
//
// The server, read afresh, decides: still tagged for the NodeClaim and in
// phase rescue, imaging or booting (not the delivery, Scaleway's doing; not
// joined, nor already given back by the install's own failure handling,
// which counted it: the breaker counts a NodeClaim once). A NodeClaim
// whose NodePool is being deleted is not counted: its end is the
// NodePool's, not the install's. A server deleted while booting is
// quarantined like one whose boot timed out (spare.HostFault).
func (c *Controller) Deleted(ctx context.Context, claim *karpv1.NodeClaim) {
	c.Stop(claim.Name)
	if c.Breaker == nil || claim.Status.ProviderID == "" || claim.StatusConditions().Get(karpv1.ConditionTypeRegistered).IsTrue() {
		return
	}
	srv, log, ok := c.serverMidInstall(ctx, claim)
	if !ok {
		return
	}
	phase := install.PhaseOf(srv)
	if c.nodePoolEnding(ctx, claim) {
		log.Info("nodeclaim deleted with its nodepool before its install joined; not counted as an install failure", "phase", phase)
		return
	}
	c.countDeleted(ctx, claim, srv, log, phase)
}

// serverMidInstall is the deleted claim's server when it is still the
// claim's, not being deleted, and in an install phase past the order; ok is
// false otherwise (or when it cannot be read, which is logged).
func (c *Controller) serverMidInstall(ctx context.Context, claim *karpv1.NodeClaim) (*baremetal.Server, logr.Logger, bool) {
	zone, id, err := scaleway.ParseProviderID(claim.Status.ProviderID)
	if err != nil || c.API.SeenDeleting(zone, id) {
		// Karpenter calls Delete again every few seconds until the server
		// is gone: whoever deleted it has counted it already.
		return nil, logr.Logger{}, false
	}
	log := c.Log.WithValues("nodeclaim", claim.Name, "server", id)
	srv, err := c.API.GetServer(ctx, zone, id)
	if err != nil {
		if !scaleway.IsNotFound(err) {
			log.Error(err, "reading the server of a deleted nodeclaim; its install is not counted by the breaker")
		}
		return nil, log, false
	}
	phase := install.PhaseOf(srv)
	if srv.Status == baremetal.ServerStatusDeleting || scaleway.ParseTags(srv.Tags)[scaleway.TagNodeClaim] != claim.Name ||
		!phase.Active() || phase == install.PhaseOrdered {
		return nil, log, false
	}
	return srv, log, true
}

// countDeleted counts the install of a claim deleted before its node joined
// as a failure (quarantining the server when the phase points at it).
// Errors are logged, not returned: the server's release must not wait on
// the breaker's bookkeeping.
func (c *Controller) countDeleted(ctx context.Context, claim *karpv1.NodeClaim, srv *baremetal.Server, log logr.Logger, phase install.Phase) {
	cause := &install.PhaseError{Phase: phase, Err: install.ErrDeletedBeforeJoin}
	if reason := spare.HostFault(cause, ""); reason != "" {
		if _, err := c.Spares.Quarantine(ctx, srv.Zone, srv.ID, claim.Name, reason); err != nil {
			log.Error(err, "quarantining the server of a nodeclaim deleted before its node joined")
		}
	}
	log.Info("nodeclaim deleted before its install joined: counted as an install failure", "phase", phase)
	err := c.Breaker.Failed(ctx, breaker.Failure{Claim: claim, Server: srv, Billing: spare.Billing(c.Offerings, srv), Err: cause})
	if err != nil && !apierrors.IsNotFound(err) {
		log.Error(err, "counting the install failure of a deleted nodeclaim")
	}
}

// nodePoolEnding reports whether claim's NodePool is gone or being deleted.
func (c *Controller) nodePoolEnding(ctx context.Context, claim *karpv1.NodeClaim) bool {
	name := claim.Labels[karpv1.NodePoolLabelKey]
	if name == "" {
		return false
	}
	np := &karpv1.NodePool{}
	err := c.Kube.Get(ctx, types.NamespacedName{Name: name}, np)
	return apierrors.IsNotFound(err) || (err == nil && !np.DeletionTimestamp.IsZero())
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

func (c *Controller) clock() clock.Clock { return clocks.Or(c.Clock) }

// publish records ev (events.go) on the controller's recorder, if any.
func (c *Controller) publish(ev events.Event) {
	if c.Recorder != nil {
		c.Recorder.Publish(ev)
	}
}

// Register adds the controller to the manager; ctx bounds the workers.
func (c *Controller) Register(ctx context.Context, m manager.Manager) error {
	c.mu.Lock()
	c.base = ctx
	c.mu.Unlock()
	c.Metrics.timeouts(c.Installer.Timeouts)
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
