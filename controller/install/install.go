// Package install takes an ordered Elastic Metal server from delivery to a
// Talos node booting with its machine config: wait for delivery, attach
// private networks, reboot into rescue, run em-imager over SSH, reboot into
// Talos and apply the config.
//
// It is a state machine whose phase lives on the server itself (the
// karpenter-scaleway-em/phase tag), so a controller restart, a crash or a
// transient failure resumes where it stopped instead of ordering again or
// starting over. Each phase has a timeout; a phase that times out or fails
// for good returns a *PhaseError with Release set, and the caller gives the
// server back.
package install

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/talosgen"
)

// Phase is the value of the phase tag.
type Phase string

const (
	// PhaseOrdered: the order was accepted; waiting for delivery.
	PhaseOrdered Phase = "ordered"
	// PhaseRescue: a reboot into rescue was requested; waiting for SSH.
	PhaseRescue Phase = "rescue"
	// PhaseImaging: em-imager runs (or ran) in rescue.
	PhaseImaging Phase = "imaging"
	// PhaseBooting: the disk holds the verified image; reboot into Talos and apply the config.
	PhaseBooting Phase = "booting"
	// PhaseJoined: the config was applied; the node boots and registers. Create is done.
	PhaseJoined Phase = "joined"
	// PhaseSpare: a monthly server kept after its NodeClaim ended, for reuse.
	PhaseSpare Phase = "spare"
)

// Tags that carry what em-imager found, so a restart after imaging can render
// the config without rescue (which is gone once the server boots Talos).
const (
	TagUplinkMAC  = "karpenter-scaleway-em/uplink-mac"
	TagDisk       = "karpenter-scaleway-em/disk"
	TagDiskSerial = "karpenter-scaleway-em/disk-serial"
)

// Timeouts per phase. Real Scaleway: delivery 4-5 min (sometimes far more),
// a reboot 2-4 min, imaging ~1 min per GB at the slowest.
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

// Total is the worst case of one install, for Karpenter's launch timeout.
func (t Timeouts) Total() time.Duration { return t.Delivery + t.Rescue + t.Imaging + t.Boot }

// Image is what em-imager writes.
type Image struct {
	URL            string // may be presigned: never logged
	SHA256         string // of the raw image
	Format         string
	Disk           string
	RawSize        int64
	VerifyReadback bool
}

// Installer runs the pipeline. One Installer serves all servers.
type Installer struct {
	API      *scaleway.Client
	Poller   *scaleway.Poller
	Dialer   *rescue.Dialer
	Talos    TalosApplier
	Imager   []byte // the static em-imager binary
	Timeouts Timeouts
	// RetryInterval between SSH/Talos connection attempts.
	RetryInterval time.Duration
	Log           logr.Logger
	Metrics       *Metrics
}

// TalosApplier is the Talos maintenance API (talosapi.Applier in production).
type TalosApplier interface {
	WaitReady(ctx context.Context, host string, interval time.Duration) error
	Apply(ctx context.Context, host string, cfg []byte) error
}

// Job is one server's install.
type Job struct {
	Server    *baremetal.Server
	SSHKeyIDs []string // IAM keys rescue accepts (the controller's own)
	Image     Image
	// PrivateNetworkIDs to attach after delivery.
	PrivateNetworkIDs []string
	// Render returns the node's machine config from what em-imager found.
	Render func(ctx context.Context, hw *report.Report, net talosgen.Network) ([]byte, error)
	// Progress is told of phase changes and imaging progress, for events.
	Progress func(phase Phase, message string)
	// Joined reports whether the node already registered (a restart after the
	// config was applied, when the maintenance API is gone for good).
	Joined func(ctx context.Context) (bool, error)
}

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

// PhaseOf reads the phase tag (ordered when the server has none).
func PhaseOf(s *baremetal.Server) Phase {
	if v, ok := scaleway.TagValue(s.Tags, scaleway.TagPhase); ok && v != "" {
		return Phase(v)
	}
	return PhaseOrdered
}

// Run drives job.Server from its current phase to PhaseJoined.
func (i *Installer) Run(ctx context.Context, job *Job) (*baremetal.Server, error) {
	srv := job.Server
	log := i.Log.WithValues("server", srv.ID, "zone", string(srv.Zone), "name", srv.Name)
	for {
		phase := PhaseOf(srv)
		if phase == PhaseJoined {
			return srv, nil
		}
		start := time.Now()
		log.Info("install phase", "phase", phase)
		next, err := i.step(ctx, log, job, srv, phase)
		i.Metrics.observePhase(phase, start, err)
		if err != nil {
			var pe *PhaseError
			if !errors.As(err, &pe) {
				pe = &PhaseError{Phase: phase, Err: err}
			}
			return srv, pe
		}
		srv = next
	}
}

func (i *Installer) step(ctx context.Context, log logr.Logger, job *Job, srv *baremetal.Server, phase Phase) (*baremetal.Server, error) {
	switch phase {
	case PhaseOrdered:
		return i.deliver(ctx, job, srv)
	case PhaseRescue:
		return i.rescue(ctx, job, srv)
	case PhaseImaging:
		return i.image(ctx, log, job, srv)
	case PhaseBooting:
		return i.boot(ctx, log, job, srv)
	default:
		return srv, &PhaseError{Phase: phase, Release: false, Err: fmt.Errorf("server is in phase %q, which an install cannot resume from", phase)}
	}
}

func (i *Installer) progress(job *Job, p Phase, msg string) {
	if job.Progress != nil {
		job.Progress(p, msg)
	}
}

// deliver waits for the order to be delivered and attaches private networks.
func (i *Installer) deliver(ctx context.Context, job *Job, srv *baremetal.Server) (*baremetal.Server, error) {
	i.progress(job, PhaseOrdered, fmt.Sprintf("waiting for delivery of server %s", srv.ID))
	wctx, cancel := context.WithTimeout(ctx, i.Timeouts.Delivery)
	defer cancel()
	// Ready is not enough: the API can show a delivered server without IPs for a while.
	got, _, err := i.Poller.WaitIPv4(wctx, srv.Zone, srv.ID, scaleway.StatusIs(baremetal.ServerStatusReady),
		func(msg string) { i.progress(job, PhaseOrdered, msg) })
	if err != nil {
		return srv, i.waitError(ctx, PhaseOrdered, "delivery", err)
	}
	srv = got
	if err := i.API.AttachPrivateNetworks(ctx, srv.Zone, srv.ID, job.PrivateNetworkIDs); err != nil {
		return srv, &PhaseError{Phase: PhaseOrdered, Err: err}
	}
	return i.setPhase(ctx, srv, PhaseRescue)
}

// address reads the server's IPv4 from its latest state, waiting (bounded)
// while the API lists none.
func (i *Installer) address(ctx context.Context, job *Job, srv *baremetal.Server, p Phase) (*baremetal.Server, string, error) {
	got, host, err := i.Poller.IPv4(ctx, srv.Zone, srv.ID, func(msg string) { i.progress(job, p, msg) })
	if err != nil {
		return srv, "", i.waitError(ctx, p, "the server's IPv4", err)
	}
	return got, host, nil
}

// rescue reboots into rescue (unless the server already runs it) and waits for SSH.
func (i *Installer) rescue(ctx context.Context, job *Job, srv *baremetal.Server) (*baremetal.Server, error) {
	wctx, cancel := context.WithTimeout(ctx, i.Timeouts.Rescue)
	defer cancel()
	srv, host, err := i.address(wctx, job, srv, PhaseRescue)
	if err != nil {
		return srv, err
	}
	if !readyIn(srv, baremetal.ServerBootTypeRescue) {
		i.Dialer.Forget(host) // a new boot has a new host key
		srv, err = i.rebootInto(ctx, wctx, job, srv, PhaseRescue, baremetal.ServerBootTypeRescue, job.SSHKeyIDs, "rescue")
		if err != nil {
			return srv, err
		}
	}
	i.progress(job, PhaseRescue, "waiting for rescue SSH on "+host)
	sess, err := i.Dialer.WaitDial(wctx, host, i.retryInterval())
	if err != nil {
		return srv, i.waitError(ctx, PhaseRescue, "rescue SSH", err)
	}
	_ = sess.Close()
	return i.setPhase(ctx, srv, PhaseImaging)
}

// image runs em-imager in rescue and records what it found on the server's tags.
func (i *Installer) image(ctx context.Context, log logr.Logger, job *Job, srv *baremetal.Server) (*baremetal.Server, error) {
	wctx, cancel := context.WithTimeout(ctx, i.Timeouts.Imaging)
	defer cancel()
	srv, host, err := i.address(wctx, job, srv, PhaseImaging)
	if err != nil {
		return srv, err
	}
	sess, err := i.Dialer.WaitDial(wctx, host, i.retryInterval())
	if err != nil {
		// Rescue went away (a reboot by hand, a restart after a failed boot): go back one phase.
		log.Info("rescue SSH unreachable while imaging; rebooting into rescue again", "error", err.Error())
		return i.setPhase(ctx, srv, PhaseRescue)
	}
	defer sess.Close()
	i.progress(job, PhaseImaging, "writing the Talos image")
	lastPct := -1
	rep, err := rescue.RunImager(wctx, sess, rescue.ImagerArgs{
		Binary: i.Imager, ImageURL: job.Image.URL, SHA256: job.Image.SHA256, Format: job.Image.Format,
		Disk: job.Image.Disk, RawSize: job.Image.RawSize, VerifyReadback: job.Image.VerifyReadback,
	}, func(p report.Progress) {
		if p.TotalIn <= 0 {
			return
		}
		pct := int(100 * p.BytesIn / p.TotalIn)
		if pct/25 != lastPct/25 { // an event every quarter, not every second
			lastPct = pct
			i.progress(job, PhaseImaging, fmt.Sprintf("imaging %d%% (%.0f MB/s raw)", pct, p.RawMBps))
		}
	})
	if err != nil {
		var re *report.Error
		if errors.As(err, &re) {
			// A bad image or an unsuitable disk will not get better by retrying on this server.
			return srv, &PhaseError{Phase: PhaseImaging, Release: !report.Retryable(re.Code), Err: fmt.Errorf("em-imager: %s", re.Error())}
		}
		if ctx.Err() == nil && wctx.Err() != nil {
			return srv, &PhaseError{Phase: PhaseImaging, Release: true, Err: fmt.Errorf("imaging did not finish within %s", i.Timeouts.Imaging)}
		}
		return srv, &PhaseError{Phase: PhaseImaging, Err: err}
	}
	if rep.Timings != nil {
		i.Metrics.observeImager(rep)
		log.Info("image written", "disk", rep.Disk.Path, "rawMBps", rep.Timings.RawMBps, "seconds", rep.Timings.TotalSeconds)
	}
	uplink := uplinkMAC(rep)
	if uplink == "" {
		return srv, &PhaseError{Phase: PhaseImaging, Release: true, Err: errors.New("em-imager found no NIC with a link")}
	}
	tags := srv.Tags
	tags, _ = scaleway.SetTagIn(tags, TagUplinkMAC, uplink)
	tags, _ = scaleway.SetTagIn(tags, TagDisk, rep.Disk.Path)
	if rep.Disk.Serial != "" {
		tags, _ = scaleway.SetTagIn(tags, TagDiskSerial, rep.Disk.Serial)
	}
	tags, _ = scaleway.SetTagIn(tags, scaleway.TagPhase, string(PhaseBooting))
	updated, err := i.API.UpdateServerTags(ctx, srv.Zone, srv.ID, tags)
	if err != nil {
		return srv, &PhaseError{Phase: PhaseImaging, Err: err}
	}
	i.progress(job, PhaseImaging, fmt.Sprintf("image verified on %s", rep.Disk.Path))
	return updated, nil
}

// readyIn reports whether srv already runs bootType, so no reboot is needed.
func readyIn(srv *baremetal.Server, bootType baremetal.ServerBootType) bool {
	return srv.BootType == bootType && srv.Status == baremetal.ServerStatusReady
}

// rebootInto reboots srv into bootType and waits, within wctx, until it is
// ready in it; errors are classified against ctx. what names the target in
// progress messages and errors ("rescue", "Talos").
func (i *Installer) rebootInto(ctx, wctx context.Context, job *Job, srv *baremetal.Server, p Phase,
	bootType baremetal.ServerBootType, sshKeyIDs []string, what string) (*baremetal.Server, error) {
	i.progress(job, p, "rebooting into "+what)
	if _, err := i.API.RebootServer(wctx, srv.Zone, srv.ID, bootType, sshKeyIDs); err != nil {
		return srv, i.apiError(ctx, p, "reboot into "+what, err)
	}
	got, err := i.Poller.WaitFor(wctx, srv.Zone, srv.ID, func(s *baremetal.Server) (bool, error) {
		done, err := scaleway.StatusIs(baremetal.ServerStatusReady)(s)
		return done && s.BootType == bootType, err
	})
	if err != nil {
		return srv, i.waitError(ctx, p, "the reboot into "+what, err)
	}
	return got, nil
}

// boot reboots into the written image, waits for the Talos API and applies the config.
func (i *Installer) boot(ctx context.Context, log logr.Logger, job *Job, srv *baremetal.Server) (*baremetal.Server, error) {
	wctx, cancel := context.WithTimeout(ctx, i.Timeouts.Boot)
	defer cancel()
	srv, host, err := i.address(wctx, job, srv, PhaseBooting)
	if err != nil {
		return srv, err
	}
	if job.Joined != nil {
		if ok, err := job.Joined(ctx); err == nil && ok {
			return i.setPhase(ctx, srv, PhaseJoined)
		}
	}
	if !readyIn(srv, baremetal.ServerBootTypeNormal) {
		srv, err = i.rebootInto(ctx, wctx, job, srv, PhaseBooting, baremetal.ServerBootTypeNormal, nil, "Talos")
		if err != nil {
			return srv, err
		}
	}
	i.progress(job, PhaseBooting, "waiting for the Talos API on "+host)
	if err := i.Talos.WaitReady(wctx, host, i.retryInterval()); err != nil {
		if job.Joined != nil {
			if ok, jerr := job.Joined(ctx); jerr == nil && ok {
				return i.setPhase(ctx, srv, PhaseJoined)
			}
		}
		return srv, i.waitError(ctx, PhaseBooting, "the Talos API", err)
	}
	hw := HardwareFromTags(srv.Tags)
	cfg, err := job.Render(ctx, hw, NetworkOf(srv))
	if err != nil {
		return srv, &PhaseError{Phase: PhaseBooting, Err: fmt.Errorf("rendering the machine config: %w", err)}
	}
	if err := i.Talos.Apply(wctx, host, cfg); err != nil {
		return srv, &PhaseError{Phase: PhaseBooting, Err: err}
	}
	log.Info("machine config applied")
	i.progress(job, PhaseBooting, "machine config applied; the node is joining")
	return i.setPhase(ctx, srv, PhaseJoined)
}

func (i *Installer) setPhase(ctx context.Context, srv *baremetal.Server, p Phase) (*baremetal.Server, error) {
	updated, err := i.API.SetTag(ctx, srv.Zone, srv.ID, scaleway.TagPhase, string(p))
	if err != nil {
		return srv, &PhaseError{Phase: PhaseOf(srv), Err: fmt.Errorf("recording phase %s: %w", p, err)}
	}
	return updated, nil
}

func (i *Installer) retryInterval() time.Duration {
	if i.RetryInterval > 0 {
		return i.RetryInterval
	}
	return 5 * time.Second
}

// waitError turns a failed wait into a PhaseError: a timeout of the phase (not
// of the caller) or a server in error releases the server.
func (i *Installer) waitError(ctx context.Context, p Phase, what string, err error) error {
	var se *scaleway.ServerStateError
	var noAddr *scaleway.NoAddressError
	switch {
	case errors.As(err, &noAddr):
		// Delivered but no IPv4 listed yet: not a reason to give it back.
		return &PhaseError{Phase: p, Err: err}
	case errors.As(err, &se):
		return &PhaseError{Phase: p, Release: true, Err: err}
	case scaleway.IsNotFound(err):
		return &PhaseError{Phase: p, Err: fmt.Errorf("the server disappeared while waiting for %s: %w", what, err)}
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return &PhaseError{Phase: p, Release: true, Err: fmt.Errorf("%s did not happen in time: %w", what, err)}
	}
	return &PhaseError{Phase: p, Err: err}
}

func (i *Installer) apiError(ctx context.Context, p Phase, what string, err error) error {
	if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return &PhaseError{Phase: p, Release: true, Err: fmt.Errorf("%s: %w", what, err)}
	}
	return &PhaseError{Phase: p, Err: fmt.Errorf("%s: %w", what, err)}
}

// uplinkMAC is the hardware MAC of the NIC rescue routes through, else the
// first NIC with a link.
func uplinkMAC(r *report.Report) string {
	for _, n := range r.NICs {
		if n.HasDefaultRoute {
			return strings.ToLower(n.HardwareMAC())
		}
	}
	for _, n := range r.NICs {
		if n.LinkUp {
			return strings.ToLower(n.HardwareMAC())
		}
	}
	return ""
}

// HardwareFromTags rebuilds the part of em-imager's report the config needs.
func HardwareFromTags(tags []string) *report.Report {
	t := scaleway.ParseTags(tags)
	return &report.Report{
		Version: report.Version, Command: "write", OK: true,
		Disk: &report.Disk{Path: t[TagDisk], Serial: t[TagDiskSerial]},
		NICs: []report.NIC{{Name: "uplink", MAC: t[TagUplinkMAC], LinkUp: true, HasDefaultRoute: true}},
	}
}

// NetworkOf is the server's addressing as the API reports it. The API does
// not give the IPv6 gateway: the caller adds it (IPV6_GATEWAY) or leaves IPv6
// routing to router advertisements.
func NetworkOf(s *baremetal.Server) talosgen.Network {
	var n talosgen.Network
	for _, ip := range s.IPs {
		if ip.Version == baremetal.IPVersionIPv6 && ip.Address != nil {
			n.IPv6Address = ip.Address.String()
		}
	}
	return n
}
