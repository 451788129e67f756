// Package install takes an ordered Elastic Metal server from delivery to a
// Talos node booting with its machine config: wait for delivery, attach
// private networks, reboot into rescue, run em-imager over SSH to write the
// image (and, with Disk delivery, the machine config into the metal-iso
// partition), reboot into Talos and wait for the Node (or, with the legacy
// MaintenanceAPI delivery, apply the config over :50000 first).
//
// It is a state machine whose phase lives on the server itself (the
// karpenter-scaleway-em/phase tag, with the time the phase started in
// karpenter-scaleway-em/phase-since), so a controller restart, a crash or a
// transient failure resumes where it stopped instead of ordering again or
// starting over, and a phase's deadline survives restarts. Phases only move
// forward; within a phase, transient failures are retried until the phase's
// deadline. A phase that times out or fails for good ends Run with a
// *PhaseError with Release set, and the caller gives the server back.
package install

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"k8s.io/utils/clock"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/clocks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/talosapi"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/talosgen"
)

// Phase is the value of the phase tag.
type Phase string

const (
	// PhaseOrdered: the order was accepted (or a spare taken); waiting for
	// delivery, then private networks.
	PhaseOrdered Phase = "ordered"
	// PhaseRescue: rebooting into rescue; waiting for SSH.
	PhaseRescue Phase = "rescue"
	// PhaseImaging: em-imager runs (or ran) in rescue: the image, then
	// (Disk delivery) the machine config.
	PhaseImaging Phase = "imaging"
	// PhaseBooting: the disk holds the verified image (and the config);
	// reboot into Talos, apply the config over the maintenance API only
	// with MaintenanceAPI delivery, wait for the Node. Karpenter's
	// registration window starts here.
	PhaseBooting Phase = "booting"
	// PhaseJoined: the config was applied; the node boots and registers.
	PhaseJoined Phase = "joined"
	// PhaseSpare: a monthly server kept after its NodeClaim ended, for reuse.
	PhaseSpare Phase = "spare"
)

// ActivePhases are the phases an install runs in, in order.
var ActivePhases = []Phase{PhaseOrdered, PhaseRescue, PhaseImaging, PhaseBooting}

// Active reports whether p is a phase an install runs in.
func (p Phase) Active() bool { return slices.Contains(ActivePhases, p) }

// Timeouts per phase, each counted from the phase's start (the phase-since
// tag). Real Scaleway: delivery 4-5 min (up to an hour at worst), a reboot
// 2-4 min, imaging ~1 min per GB at the slowest.
type Timeouts struct {
	Delivery time.Duration
	Rescue   time.Duration
	Imaging  time.Duration
	Boot     time.Duration
}

// DefaultTimeouts suit real Elastic Metal servers.
var DefaultTimeouts = Timeouts{
	Delivery: 30 * time.Minute,
	Rescue:   15 * time.Minute,
	Imaging:  20 * time.Minute,
	Boot:     15 * time.Minute,
}

// Total is the worst case of one install.
func (t Timeouts) Total() time.Duration { return t.Delivery + t.Rescue + t.Imaging + t.Boot }

// TokenClockSkew is the margin TokenTTL gives for the controller's and the
// API server's clocks disagreeing: the API server judges the expiration by
// its own clock.
const TokenClockSkew = 5 * time.Minute

// TokenTTL is the lifetime of a per-NodeClaim bootstrap token, counted from
// the render of the machine config that carries it. A config is rendered in
// the imaging phase (Disk delivery: write-config) or the booting phase
// (MaintenanceAPI delivery), never before. The imaging phase's deadline is
// at most Imaging after the render (the render happens after the phase
// started), and the booting phase, which starts no later than that
// deadline, ends within Boot: a node that has not registered by then is
// released and its token is of no use to anyone. The kubelet needs the
// token only until its client certificate is issued, which comes before
// its Node registers. Hence Imaging + Boot, plus the clock skew margin
// (40 minutes with DefaultTimeouts, where the whole install may take 80).
func (t Timeouts) TokenTTL() time.Duration { return t.Imaging + t.Boot + TokenClockSkew }

// Of is the timeout of phase p (0 for a phase that has none).
func (t Timeouts) Of(p Phase) time.Duration {
	switch p {
	case PhaseOrdered:
		return t.Delivery
	case PhaseRescue:
		return t.Rescue
	case PhaseImaging:
		return t.Imaging
	case PhaseBooting:
		return t.Boot
	}
	return 0
}

// Deadline is when srv's current phase times out (ok false outside an install).
func (t Timeouts) Deadline(srv *baremetal.Server) (time.Time, bool) {
	p := PhaseOf(srv)
	if !p.Active() {
		return time.Time{}, false
	}
	return PhaseSince(srv).Add(t.Of(p)), true
}

// Image is what em-imager writes.
type Image struct {
	URL            string // may be presigned: never logged
	SHA256         string // of the raw image
	Format         string
	Disk           string
	RawSize        int64
	VerifyReadback bool
	TalosVersion   string
	SchematicID    string
	// WipeOtherDisks has em-imager erase the old signatures of every other
	// disk once the image is verified (the local-disk policy wipes).
	WipeOtherDisks bool
	// Delivery is how the node gets its machine config; recorded on the
	// server (TagConfigDelivery) when imaging ends, so booting follows what
	// imaging did whatever the NodeClass says by then.
	Delivery ConfigDelivery
}

// ConfigDelivery is how a node gets its machine config.
type ConfigDelivery string

const (
	// DeliveryDisk: imaging writes the config into the disk's metal-iso
	// partition (em-imager write-config); the image boots with
	// talos.config=metal-iso, reads it, and never opens the maintenance
	// API. Booting only waits for the Node.
	DeliveryDisk ConfigDelivery = "disk"
	// DeliveryMaintenanceAPI: booting applies the config over the Talos
	// maintenance API on :50000 (legacy; has an exposure window).
	DeliveryMaintenanceAPI ConfigDelivery = "maintenance-api"
)

// Installer runs the pipeline. One Installer serves all servers.
type Installer struct {
	API    *scaleway.Client
	Poller *scaleway.Poller
	Dialer *rescue.Dialer
	Talos  TalosApplier
	// Keys registers the IAM SSH key a rescue reboot names only while an
	// install logs into rescue (*rescuekey.Store).
	Keys     RescueKeys
	Imager   []byte // the static em-imager binary
	Timeouts Timeouts
	// RetryInterval between SSH/Talos connection attempts and between
	// retries of a phase after a transient failure.
	RetryInterval time.Duration
	// ImagingSlots bounds the images written at once (each uploads
	// em-imager over SFTP and holds an SSH session); 0: DefaultImagingSlots.
	ImagingSlots int
	// KexecGrace is how long a node booted by kexec may take to register
	// before the install reboots it through the API (0: Timeouts.Boot/3).
	KexecGrace time.Duration
	// KexecJumpDelay, when positive, is em-imager kexec's wait between its
	// report and the jump (em-imager's default otherwise).
	KexecJumpDelay time.Duration
	Clock          clock.Clock
	Log            logr.Logger
	Metrics        *Metrics

	slotsOnce sync.Once
	slots     chan struct{}
}

// ImagingStep is the granularity (percent) of Job.Imaging.
const ImagingStep = 10

// DefaultImagingSlots is the default of Installer.ImagingSlots.
const DefaultImagingSlots = 8

// RescueKeys holds the IAM SSH key for a server's rescue logins: Acquire
// right before each reboot into rescue (it returns the ssh_key_ids), Release
// once the install no longer logs into that server's rescue.
type RescueKeys interface {
	Acquire(ctx context.Context, holder string) ([]string, error)
	Release(holder string)
}

// NeedsRescue reports whether an install in phase p logs into rescue (and
// so needs the rescue key registered): the phases between the reboot into
// rescue and the end of imaging.
func (p Phase) NeedsRescue() bool { return p == PhaseRescue || p == PhaseImaging }

// TalosApplier is the Talos maintenance API (talosapi.Applier in
// production), used by the legacy MaintenanceAPI delivery only.
type TalosApplier interface {
	// WaitMaintenance returns the API once it proves maintenance mode.
	WaitMaintenance(ctx context.Context, host string, interval time.Duration) (talosapi.Peer, error)
	// ApplyTo sends the config to that API only (its key pinned).
	ApplyTo(ctx context.Context, peer talosapi.Peer, cfg []byte) error
}

// Job is one server's install.
type Job struct {
	Server *baremetal.Server
	// Image resolves what to write when imaging starts (the NodeClass's image then).
	Image func(ctx context.Context) (Image, error)
	// Imaged records what was written (the NodeClaim's image annotations);
	// called before the server moves on to booting, again after a restart.
	Imaged func(ctx context.Context, img Image) error
	// PrivateNetworkIDs to attach after delivery.
	PrivateNetworkIDs []string
	// RecordDisks keeps em-imager's disk list (EncodeDisks) where a restart
	// finds it (the NodeClaim), before the server's tags say the image is
	// written; Disks reads it back ("" when none). Nil: the config is
	// rendered from the tags alone (install disk and uplink).
	RecordDisks func(ctx context.Context, disks string) error
	Disks       func(ctx context.Context) (string, error)
	// Render returns the node's machine config from what em-imager found.
	Render func(ctx context.Context, hw *report.Report, net talosgen.Network) ([]byte, error)
	// Progress is told of phase changes and imaging progress, for events.
	Progress func(phase Phase, message string)
	// Imaging is told how far the image is written, in percent, each time
	// it passes a multiple of ImagingStep (not per MiB).
	Imaging func(percent int)
	// Phase is told the phase the server is in and when it started, each
	// time a phase begins or resumes (the registration window follows it).
	Phase func(phase Phase, since time.Time)
	// Joined reports whether the node registered (the config was applied
	// but its answer lost, or a restart after the apply).
	Joined func(ctx context.Context) (bool, error)
	// Kexec reports whether the booting phase may boot the written image
	// with em-imager kexec from rescue (the NodeClass's spec.boot Auto);
	// nil or false: always Scaleway's reboot. Read when imaging ends (the
	// jump's record goes with phase booting's write).
	Kexec func(ctx context.Context) bool

	// holder holds the rescue key for this job (Keys.Acquire); "": the
	// server's ID, as every install does.
	holder string
}

func (j *Job) keyHolder() string {
	if j.holder != "" {
		return j.holder
	}
	return j.Server.ID
}

// ReasonRescueHostKeyChanged starts the error of an install given up
// because a rescue system presented another host key than the one pinned
// for its boot.
const ReasonRescueHostKeyChanged = "RescueHostKeyChanged"

// ReasonRescueSudoRefused starts the error of an install given up because
// the rescue user could not run em-imager as root: sudo wants a password
// and refused the one the API shows for the rescue boot, or the API shows
// none.
const ReasonRescueSudoRefused = "RescueSudoRefused"

// PhaseError is a failure in one phase. Release means the server cannot go
// on (a timeout, an error state, a bad image) and should be given back.
type PhaseError struct {
	Phase   Phase
	Release bool
	Err     error
}

func (e *PhaseError) Error() string {
	return fmt.Sprintf("install phase %s: %v", e.Phase, e.Err)
}

func (e *PhaseError) Unwrap() error { return e.Err }

// ErrDeletedBeforeJoin is the cause of an install whose NodeClaim was
// deleted (by Karpenter's registration timeout or otherwise) before its
// node joined: in a PhaseError with the phase the server was in.
var ErrDeletedBeforeJoin = errors.New("the nodeclaim was deleted before its node joined")

// Run drives job.Server from its current phase to PhaseJoined. Transient
// failures are retried within the phase's deadline; it returns nil once
// the server is joined, a *PhaseError with Release when the install cannot
// go on, an error wrapping ErrNotOwned (and no more writes) once the server
// is no longer tagged for the NodeClaim it was, or ctx's error when
// cancelled. The server returned is the last one
// seen (callers deciding on its state read it again).
func (i *Installer) Run(ctx context.Context, job *Job) (*baremetal.Server, error) {
	srv := job.Server
	s := &scope{run: ctx, log: i.Log.WithValues("server", srv.ID, "zone", string(srv.Zone), "name", srv.Name), job: job, state: &runState{}}
	// However the run ends, it no longer logs into this server's rescue.
	defer i.Keys.Release(srv.ID)
	for attempt := 0; ; {
		phase := PhaseOf(srv)
		if phase == PhaseJoined {
			return srv, nil
		}
		since, deadline, err := i.checkPhase(srv, phase)
		if err != nil {
			return srv, err
		}
		next, err := i.runPhase(s, srv, phase, since, deadline)
		if err == nil {
			srv, attempt = next, 0
			if !PhaseOf(srv).NeedsRescue() {
				i.Keys.Release(srv.ID) // imaging done: no more rescue logins
			}
			continue
		}
		pe, terr := retryable(ctx, phase, err)
		if terr != nil {
			return srv, terr
		}
		attempt++
		if srv, err = i.retryWait(s, srv, phase, pe, err, attempt); err != nil {
			return srv, err
		}
	}
}

// checkPhase refuses a phase an install cannot resume from, or one past
// its deadline; otherwise it returns when the phase began and its deadline.
func (i *Installer) checkPhase(srv *baremetal.Server, phase Phase) (since, deadline time.Time, err error) {
	if !phase.Active() {
		return since, deadline, &PhaseError{Phase: phase, Err: fmt.Errorf("server is in phase %q, which an install cannot resume from", phase)}
	}
	since = PhaseSince(srv)
	deadline = since.Add(i.Timeouts.Of(phase))
	if !i.clock().Now().Before(deadline) {
		return since, deadline, &PhaseError{Phase: phase, Release: true,
			Err: fmt.Errorf("phase %s did not finish within %s (started %s)", phase, i.Timeouts.Of(phase), since.UTC().Format(time.RFC3339))}
	}
	return since, deadline, nil
}

// runPhase runs one attempt of phase within its deadline, reported to the
// job and measured.
func (i *Installer) runPhase(s *scope, srv *baremetal.Server, phase Phase, since, deadline time.Time) (*baremetal.Server, error) {
	if s.job.Phase != nil {
		s.job.Phase(phase, since)
	}
	start := i.clock().Now()
	s.log.Info("install phase", "phase", phase, "since", since, "deadline", deadline)
	attempt := *s
	var cancel context.CancelFunc
	attempt.phase, cancel = context.WithDeadline(s.run, deadline)
	next, err := i.step(&attempt, srv, phase)
	cancel()
	i.Metrics.observePhase(phase, start, i.clock().Now(), err)
	return next, err
}

// retryable sorts a failed attempt of phase: the PhaseError to retry after,
// or the error that ends the run (stopping, a server no longer this
// claim's, a failure that releases the server).
func retryable(ctx context.Context, phase Phase, err error) (*PhaseError, error) {
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if errors.Is(err, ErrNotOwned) {
		return nil, err
	}
	var pe *PhaseError
	if !errors.As(err, &pe) {
		pe = &PhaseError{Phase: phase, Err: err}
	}
	if pe.Release {
		return nil, pe
	}
	return pe, nil
}

// retryWait waits before the next attempt of phase (a transient failure:
// the same phase resumes, its deadline does not move) and reads the server
// again; it ends the run when the server is gone or another claim's.
func (i *Installer) retryWait(s *scope, srv *baremetal.Server, phase Phase, pe *PhaseError, err error, attempt int) (*baremetal.Server, error) {
	wait := min(i.retryInterval()<<min(attempt-1, 5), time.Minute)
	s.log.Info("install phase failed, retrying", "phase", phase, "attempt", attempt, "wait", wait, "error", err.Error())
	i.progress(s.job, phase, fmt.Sprintf("retrying after: %v", pe.Err))
	select {
	case <-s.run.Done():
		return srv, s.run.Err()
	case <-i.clock().After(wait):
	}
	fresh, gerr := i.API.GetServer(s.run, srv.Zone, srv.ID)
	if gerr == nil {
		if claimOf(fresh.Tags) != claimOf(srv.Tags) {
			return fresh, fmt.Errorf("install phase %s, server %s: %w", phase, srv.ID, ErrNotOwned)
		}
		return fresh, nil
	}
	if scaleway.IsNotFound(gerr) {
		return srv, &PhaseError{Phase: phase, Release: true, Err: fmt.Errorf("the server is gone: %w", gerr)}
	}
	return srv, nil
}

func (i *Installer) step(s *scope, srv *baremetal.Server, phase Phase) (*baremetal.Server, error) {
	switch phase {
	case PhaseOrdered:
		return i.deliver(s, srv)
	case PhaseRescue:
		return i.rescue(s, srv)
	case PhaseImaging:
		return i.image(s, srv)
	default:
		return i.boot(s, srv)
	}
}

func (i *Installer) progress(job *Job, p Phase, msg string) {
	if job.Progress != nil {
		job.Progress(p, msg)
	}
}

func (i *Installer) clock() clock.Clock { return clocks.Or(i.Clock) }

func (i *Installer) retryInterval() time.Duration {
	if i.RetryInterval > 0 {
		return i.RetryInterval
	}
	return 5 * time.Second
}

// ErrNotOwned ends an install whose server is no longer tagged for the
// NodeClaim it ran for (released, kept as a spare, taken by another): the
// install stops and writes nothing more on it. It is never in a
// *PhaseError: no install failed (the breaker counts none).
var ErrNotOwned = errors.New("the server is no longer tagged for this install's nodeclaim")

func claimOf(tags []string) string {
	v, _ := scaleway.TagValue(tags, scaleway.TagNodeClaim)
	return v
}

// setPhase records phase p, started now, on the server, only while it is
// still tagged for the NodeClaim srv was (the install's): a phase written
// on a server the garbage collector or a release made a spare meanwhile
// would set it installing again for nobody.
func (i *Installer) setPhase(ctx context.Context, srv *baremetal.Server, p Phase, more ...func([]string) []string) (*baremetal.Server, error) {
	now := i.clock().Now()
	owner := claimOf(srv.Tags)
	lost := false
	updated, err := i.API.EditTags(ctx, srv.Zone, srv.ID, func(tags []string) ([]string, bool) {
		if claimOf(tags) != owner {
			lost = true
			return tags, false
		}
		for _, m := range more {
			tags = m(tags)
		}
		return SetPhaseIn(tags, p, now), true
	})
	if err != nil {
		return srv, &PhaseError{Phase: PhaseOf(srv), Err: fmt.Errorf("recording phase %s: %w", p, err)}
	}
	if lost {
		// Not a PhaseError: the install did not fail, and the breaker
		// counts no failure for a server taken away.
		return srv, fmt.Errorf("recording phase %s on server %s: %w", p, srv.ID, ErrNotOwned)
	}
	return updated, nil
}

// waitError turns a failed wait into a PhaseError: a timeout of the phase (not
// of the caller), a server in error or a changed rescue host key releases
// the server.
func waitError(ctx context.Context, p Phase, what string, err error) error {
	var se *scaleway.ServerStateError
	var noAddr *scaleway.NoAddressError
	var changed *rescue.HostKeyChangedError
	switch {
	case errors.As(err, &noAddr):
		// Delivered but no IPv4 listed yet: not a reason to give it back.
		return &PhaseError{Phase: p, Err: err}
	case errors.As(err, &changed):
		// Someone else answers on its address, or it rebooted behind our
		// back: never trusted again by rebooting it, given back.
		return &PhaseError{Phase: p, Release: true, Err: fmt.Errorf("%s: %w", ReasonRescueHostKeyChanged, err)}
	case errors.As(err, &se):
		return &PhaseError{Phase: p, Release: true, Err: err}
	case scaleway.IsNotFound(err):
		return &PhaseError{Phase: p, Release: true, Err: fmt.Errorf("the server disappeared while waiting for %s: %w", what, err)}
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return &PhaseError{Phase: p, Release: true, Err: fmt.Errorf("%s did not happen in time: %w", what, err)}
	}
	return &PhaseError{Phase: p, Err: err}
}

// acquireSlot takes an imaging slot, or gives up with ctx.
func (i *Installer) acquireSlot(ctx context.Context) (func(), error) {
	i.slotsOnce.Do(func() {
		n := i.ImagingSlots
		if n <= 0 {
			n = DefaultImagingSlots
		}
		i.slots = make(chan struct{}, n)
	})
	select {
	case i.slots <- struct{}{}:
		return func() { <-i.slots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
