package nodeinstall

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/go-logr/logr"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/breaker"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/nodeclass"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/phaselabels"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/talosgen"
)

// worker runs one NodeClaim's install.
type worker struct {
	c          *Controller
	uid        types.UID
	name       string
	providerID string
	cancel     context.CancelFunc
	done       chan struct{}
	log        logr.Logger

	mu    sync.Mutex
	phase install.Phase
	since time.Time
	over  bool
	shown phaselabels.State // what the NodeClaim's labels show
}

// state is the phase the install is in and when it started ("" before the
// server was read).
func (w *worker) state() (install.Phase, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.phase, w.since
}

func (w *worker) setState(p install.Phase, since time.Time) {
	w.mu.Lock()
	w.phase, w.since = p, since
	w.mu.Unlock()
}

func (w *worker) finished() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.over
}

func (w *worker) run(ctx context.Context) {
	c := w.c
	c.Metrics.started()
	defer func() {
		w.mu.Lock()
		w.over = true
		w.mu.Unlock()
		c.Metrics.stopped()
		c.Metrics.forget(w.name)
		c.forget(w)
		close(w.done)
	}()
	for attempt := 0; ; attempt++ {
		done, err := w.attempt(ctx)
		if done || ctx.Err() != nil {
			return
		}
		wait := min(5*time.Second<<min(attempt, 4), time.Minute)
		w.log.Error(err, "install cannot go on yet; retrying", "wait", wait)
		select {
		case <-ctx.Done():
			return
		case <-c.clock().After(wait):
		}
	}
}

// attempt reads what the install needs and runs it; done is false when it
// should be tried again (something could not be read).
func (w *worker) attempt(ctx context.Context) (done bool, err error) {
	c := w.c
	srv, done, err := w.readServer(ctx)
	if srv == nil {
		return done, err
	}
	w.setState(install.PhaseOf(srv), install.PhaseSince(srv))
	if install.PhaseOf(srv) == install.PhaseJoined {
		w.show(phaselabels.State{Phase: install.PhaseJoined})
		return true, nil // the node is joining; core's registration window decides
	}
	claim, nc, done, err := w.claimAndNodeClass(ctx, srv)
	if nc == nil {
		return done, err
	}
	final, err := c.Installer.Run(ctx, w.job(claim, nc, srv))
	if ctx.Err() != nil {
		return true, nil // stopped: Delete, or the process ends
	}
	if err != nil {
		w.fail(ctx, final, err)
		return true, nil
	}
	w.joined(ctx, claim)
	return true, nil
}

// readServer reads the claim's server; nil (with what attempt returns) when
// there is nothing to install: not a server of ours, gone, another claim's
// or being released.
func (w *worker) readServer(ctx context.Context) (srv *baremetal.Server, done bool, err error) {
	zone, id, err := scaleway.ParseProviderID(w.providerID)
	if err != nil {
		return nil, true, nil // not a server of ours
	}
	srv, err = w.c.API.RecentServer(ctx, zone, id) // usually the state the order or the last write returned
	if scaleway.IsNotFound(err) {
		w.fail(ctx, nil, errors.New("the server is gone"))
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	tags := scaleway.ParseTags(srv.Tags)
	switch {
	case tags[scaleway.TagNodeClaim] != w.name:
		w.fail(ctx, srv, fmt.Errorf("server %s is no longer this nodeclaim's (phase %s)", srv.ID, install.PhaseOf(srv)))
		return nil, true, nil
	case srv.Status == baremetal.ServerStatusDeleting:
		w.fail(ctx, srv, fmt.Errorf("server %s is being released", srv.ID))
		return nil, true, nil
	}
	return srv, false, nil
}

// claimAndNodeClass reads the claim and its NodeClass; nc is nil (with what
// attempt returns) when either is gone or cannot be read.
func (w *worker) claimAndNodeClass(ctx context.Context, srv *baremetal.Server) (*karpv1.NodeClaim, *v1alpha1.ScalewayElasticMetalNodeClass, bool, error) {
	claim, err := w.c.getClaim(ctx, w.name)
	if apierrors.IsNotFound(err) {
		return nil, nil, true, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	nc, err := nodeclass.Get(ctx, w.c.Kube, claim.Spec.NodeClassRef)
	if apierrors.IsNotFound(err) {
		w.fail(ctx, srv, fmt.Errorf("nodeclass %s is gone", claim.Spec.NodeClassRef.Name))
		return nil, nil, true, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	return claim, nc, false, nil
}

// joined records a joined install: its phase label, its metric, and the
// breaker's close.
func (w *worker) joined(ctx context.Context, claim *karpv1.NodeClaim) {
	w.show(phaselabels.State{Phase: install.PhaseJoined})
	w.c.Metrics.finished(install.PhaseJoined, "joined")
	if w.c.Breaker != nil {
		if err := w.c.Breaker.Joined(ctx, claim); err != nil {
			w.log.Error(err, "closing the install-failure breaker")
		}
	}
}

// countFailure tells the install-failure breaker; a failure to record it is
// logged (the breaker errs on the side of ordering, as before it existed).
func (w *worker) countFailure(ctx context.Context, claim *karpv1.NodeClaim, srv *baremetal.Server, cause error) {
	c := w.c
	if c.Breaker == nil {
		return
	}
	billing := catalog.BillingHourly
	if srv != nil {
		billing = spare.Billing(c.Offerings, srv)
	}
	if err := c.Breaker.Failed(ctx, breaker.Failure{Claim: claim, Server: srv, Billing: billing, Err: cause}); err != nil {
		w.log.Error(err, "counting the install failure")
	}
}

func (w *worker) job(claim *karpv1.NodeClaim, nc *v1alpha1.ScalewayElasticMetalNodeClass, srv *baremetal.Server) *install.Job {
	c := w.c
	return &install.Job{
		Server:            srv,
		PrivateNetworkIDs: nc.Spec.PrivateNetworkIDs,
		// The image and the config follow the NodeClass as it is when they
		// are needed, not as it was when the install started.
		Image: func(ctx context.Context) (install.Image, error) {
			nc, err := w.nodeClass(ctx, claim)
			if err != nil {
				return install.Image{}, err
			}
			return ImageFor(ctx, c.Images, nc)
		},
		Imaged:      func(ctx context.Context, img install.Image) error { return w.recordImage(ctx, img) },
		RecordDisks: func(ctx context.Context, disks string) error { return w.recordDisks(ctx, disks) },
		Disks: func(ctx context.Context) (string, error) {
			claim, err := c.getClaim(ctx, w.name)
			if err != nil {
				return "", err
			}
			return claim.Annotations[v1alpha1.AnnotationDisks], nil
		},
		Render: func(ctx context.Context, hw *report.Report, network talosgen.Network) ([]byte, error) {
			nc, err := w.nodeClass(ctx, claim)
			if err != nil {
				return nil, err
			}
			return c.Config.Render(ctx, claim, nc, srv, hw, network)
		},
		Progress: func(p install.Phase, msg string) {
			c.publish(installProgress(claim, p, msg))
		},
		Phase: func(p install.Phase, since time.Time) {
			w.setState(p, since)
			c.Metrics.phaseStarted(w.name, claim.Spec.NodeClassRef.Name, p, since)
			w.show(phaselabels.State{Phase: p})
			w.holdWindow(p, since)
		},
		Imaging: func(pct int) { w.show(phaselabels.State{Phase: install.PhaseImaging, Percent: pct}) },
		Joined:  func(ctx context.Context) (bool, error) { return c.nodeRegistered(ctx, w.providerID) },
		// Read when booting starts: a NodeClass switched to Reboot stops
		// jumps that have not started.
		Kexec: func(ctx context.Context) bool {
			nc, err := w.nodeClass(ctx, claim)
			return err == nil && nc.Spec.KexecBoot()
		},
	}
}

// show puts s on the NodeClaim's labels unless they show it already. A
// failed write is logged and left: the next change writes again.
func (w *worker) show(s phaselabels.State) {
	w.mu.Lock()
	same := w.shown == s
	w.mu.Unlock()
	if same {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := phaselabels.Set(ctx, w.c.Kube, w.name, s); err != nil {
		if !apierrors.IsNotFound(err) {
			w.log.Error(err, "showing the install phase on the nodeclaim", "phase", s.Phase)
		}
		return
	}
	w.mu.Lock()
	w.shown = s
	w.mu.Unlock()
}

// nodeClass reads the claim's NodeClass now.
func (w *worker) nodeClass(ctx context.Context, claim *karpv1.NodeClaim) (*v1alpha1.ScalewayElasticMetalNodeClass, error) {
	nc, err := nodeclass.Get(ctx, w.c.Kube, claim.Spec.NodeClassRef)
	if err != nil {
		return nil, fmt.Errorf("nodeclass %s: %w", claim.Spec.NodeClassRef.Name, err)
	}
	return nc, nil
}

// holdWindow moves the registration window at once when a phase begins
// (Reconcile keeps it up to date after that).
func (w *worker) holdWindow(p install.Phase, since time.Time) {
	c := w.c
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	claim, err := c.getClaim(ctx, w.name)
	if apierrors.IsNotFound(err) {
		// Deleted without Delete (its finalizer removed by hand): stop; the
		// garbage collector ends the server's use.
		w.log.Info("the nodeclaim is gone; stopping its install")
		w.cancel()
		return
	}
	if err != nil {
		return
	}
	if p == install.PhaseBooting {
		_, err = c.Window.Booting(ctx, claim, since)
	} else {
		_, err = c.Window.Installing(ctx, claim, since.Add(c.Installer.Timeouts.Of(p)))
	}
	if err != nil && !isConflict(err) {
		w.log.Error(err, "holding the registration window")
	}
}

// recordImage puts what was written on the NodeClaim: drift compares it with
// the NodeClass's image.
func (w *worker) recordImage(ctx context.Context, img install.Image) error {
	claim, err := w.annotate(ctx, map[string]string{
		v1alpha1.AnnotationImageSHA256:  img.SHA256,
		v1alpha1.AnnotationTalosVersion: img.TalosVersion,
		v1alpha1.AnnotationSchematicID:  img.SchematicID,
	})
	if err != nil {
		return err
	}
	stored := claim.DeepCopy()
	claim.Status.ImageID = img.SHA256
	return w.c.Kube.Status().Patch(ctx, claim, client.MergeFrom(stored))
}

// recordDisks keeps em-imager's disk list on the NodeClaim: the config is
// rendered from it after a restart (the server's tags are too short).
func (w *worker) recordDisks(ctx context.Context, disks string) error {
	_, err := w.annotate(ctx, map[string]string{v1alpha1.AnnotationDisks: disks})
	return err
}

// annotate sets annotations on the NodeClaim and returns it as patched.
func (w *worker) annotate(ctx context.Context, kv map[string]string) (*karpv1.NodeClaim, error) {
	claim, err := w.c.getClaim(ctx, w.name)
	if err != nil {
		return nil, err
	}
	stored := claim.DeepCopy()
	if claim.Annotations == nil {
		claim.Annotations = map[string]string{}
	}
	maps.Copy(claim.Annotations, kv)
	return claim, w.c.Kube.Patch(ctx, claim, client.MergeFrom(stored))
}

// fail ends an install for good: the NodeClaim is deleted, so that Karpenter
// replaces it, then the server goes back under the spare policy (read
// fresh) and the NodeClaim gets an event. srv is nil when the server is gone.
// The claim goes first: a server released while its claim still lived and
// was not being deleted is what I2 forbids (the soak saw an hourly server
// deleted 20 ms before its claim). The failure is counted and a host fault
// quarantined before, since deleting the claim makes core call Delete,
// which stops this worker and releases the server itself.
func (w *worker) fail(ctx context.Context, srv *baremetal.Server, cause error) {
	c := w.c
	claim, err := c.getClaim(ctx, w.name)
	if err != nil {
		return // deleted already: Delete takes care of the server
	}
	phase := install.Phase("")
	outcome := "the server is gone"
	// Counted first: a release cut short by Delete must not lose the
	// count. The breaker counts a claim once, so Delete counting it too
	// changes nothing.
	w.countFailure(ctx, claim, srv, cause)
	var nc *v1alpha1.ScalewayElasticMetalNodeClass
	ncErr := error(nil)
	quarantined := ""
	if srv != nil {
		phase = install.PhaseOf(srv)
		// nil only when the NodeClass is gone (no policy: release).
		nc, ncErr = nodeclass.Lookup(ctx, c.Kube, claim.Spec.NodeClassRef)
		if ncErr == nil {
			quarantined = w.quarantine(ctx, srv, nc, cause)
		}
	}
	deleted := w.deleteClaim(ctx, claim)
	switch {
	case srv == nil:
	case !deleted:
		outcome = fmt.Sprintf("server %s left for Delete to release or keep (stopped before the nodeclaim was deleted)", srv.ID)
	default:
		outcome = w.release(ctx, srv, nc, ncErr, quarantined)
	}
	var pe *install.PhaseError
	if errors.As(cause, &pe) {
		phase, cause = pe.Phase, pe.Err
	}
	w.log.Info("install failed for good", "phase", phase, "error", cause.Error(), "server", outcome)
	c.publish(installFailed(claim, phase, cause, outcome))
	c.Metrics.finished(phase, "failed")
}

// deleteClaim deletes the claim of a failed install, trying again while the
// API server refuses (a timeout on a loaded cluster), since its server may
// be released only after: released under a claim still live and not being
// deleted, it is taken from that claim (I2). False when ctx ended first:
// Delete stopped this worker and acts on the server itself.
func (w *worker) deleteClaim(ctx context.Context, claim *karpv1.NodeClaim) bool {
	for try := 0; ; try++ {
		err := w.c.Kube.Delete(ctx, claim)
		if client.IgnoreNotFound(err) == nil {
			return true
		}
		if ctx.Err() != nil {
			return false // stopped mid-request: no failure of the API server's
		}
		wait := min(time.Second<<min(try, 5), 30*time.Second)
		w.log.Error(err, "deleting the nodeclaim of a failed install; trying again before the server is released", "wait", wait)
		select {
		case <-ctx.Done():
			return false
		case <-w.c.clock().After(wait):
		}
	}
}

// quarantine tags a server that failed for a reason of its own
// (spare.HostFault), so that if it is kept, no NodeClaim takes it again
// before a pre-imaging shows it healthy. It returns the reason ("" when none
// or when tagging failed).
func (w *worker) quarantine(ctx context.Context, srv *baremetal.Server, nc *v1alpha1.ScalewayElasticMetalNodeClass, cause error) string {
	reason := spare.HostFault(cause, diskSelector(nc))
	if reason == "" {
		return ""
	}
	ok, err := w.c.Spares.Quarantine(ctx, srv.Zone, srv.ID, w.name, reason)
	if err != nil {
		w.log.Error(err, "quarantining the server of a failed install", "server", srv.ID, "reason", reason)
		return ""
	}
	if !ok {
		return ""
	}
	return reason
}

// release gives the server back under nc's policy and says what happened
// to it. A failed NodeClass read (ncErr) releases nothing: core's
// termination calls Delete, which reads it again; so does a release cut
// short by that Delete.
func (w *worker) release(ctx context.Context, srv *baremetal.Server, nc *v1alpha1.ScalewayElasticMetalNodeClass, ncErr error, quarantined string) string {
	c := w.c
	fresh, err := c.API.GetServer(ctx, srv.Zone, srv.ID)
	if err == nil && fresh.Status == baremetal.ServerStatusOutOfStock {
		// Ordered, then never delivered: the next order must go elsewhere.
		c.Offerings.MarkUnavailable(string(fresh.Zone), fresh.OfferName, spare.Billing(c.Offerings, fresh), catalog.ReasonOutOfStock)
	}
	if ncErr != nil {
		return fmt.Sprintf("server %s left for Delete to release or keep (%v)", srv.ID, ncErr)
	}
	outcome, d, err := c.Spares.Release(ctx, srv.Zone, srv.ID, w.name, nc)
	if err != nil {
		// Core's termination calls Delete, which tries again.
		return fmt.Sprintf("server %s left for Delete to release or keep: %v", srv.ID, err)
	}
	switch outcome {
	case spare.Kept:
		if quarantined != "" {
			return fmt.Sprintf("server %s kept as a spare (%s) and quarantined (%s): not taken nor offered until a pre-imaging passes on it",
				srv.ID, d.Reason, quarantined)
		}
		return fmt.Sprintf("server %s kept as a spare (%s)", srv.ID, d.Reason)
	case spare.Released:
		return fmt.Sprintf("server %s released (%s)", srv.ID, d.Reason)
	case spare.NotOwned:
		return fmt.Sprintf("server %s left alone (not this nodeclaim's)", srv.ID)
	}
	return fmt.Sprintf("server %s is gone", srv.ID)
}

// diskSelector is nc's rescue.disk ("" when nc is gone).
func diskSelector(nc *v1alpha1.ScalewayElasticMetalNodeClass) string {
	if nc == nil {
		return ""
	}
	return nc.Spec.Rescue.Disk
}

func isConflict(err error) bool { return apierrors.IsConflict(err) }

// ImageFor is what an install of NodeClass nc writes now: its image as
// images resolves it, with the NodeClass's disk, read-back, wipe and config
// delivery settings (the pre-imager writes the same).
func ImageFor(ctx context.Context, images ImageSource, nc *v1alpha1.ScalewayElasticMetalNodeClass) (install.Image, error) {
	img, err := images.Resolve(ctx, nodeclass.ImageSettings(nc))
	if err != nil {
		return install.Image{}, err
	}
	delivery := install.DeliveryMaintenanceAPI
	if nc.Spec.Talos.DiskConfigDelivery() {
		// An image that ignores the metal-iso partition would boot
		// into maintenance mode: never write it in Disk mode.
		if err := img.DiskConfigDelivery(); err != nil {
			return install.Image{}, err
		}
		delivery = install.DeliveryDisk
	}
	return install.Image{URL: img.URL, SHA256: img.RawSHA256, Format: img.Format, RawSize: img.RawSize,
		Disk: nc.Spec.Rescue.Disk, VerifyReadback: nc.Spec.Rescue.VerifyReadback,
		WipeOtherDisks: localdisks.Policy(nc.Spec.LocalDisks).Wipes(),
		TalosVersion:   img.TalosVersion, SchematicID: img.SchematicID, Delivery: delivery}, nil
}
