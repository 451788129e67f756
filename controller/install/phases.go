package install

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/talosapi"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// deliver waits for the order to be delivered and attaches private networks.
func (i *Installer) deliver(s *scope, srv *baremetal.Server) (*baremetal.Server, error) {
	// A taken spare (or a resumed install) whose state at hand, the answer
	// to the take's tag write or a read moments ago, shows it delivered
	// with its address needs no list: waiting for the next one cost up to a
	// poll interval (15 s) per reuse.
	if srv.Status != baremetal.ServerStatusReady || scaleway.IPv4Of(srv) == "" {
		i.progress(s.job, PhaseOrdered, fmt.Sprintf("waiting for delivery of server %s", srv.ID))
		// Ready is not enough: the API can show a delivered server without IPs for a while.
		var expect []scaleway.WaitOption
		if srv.Status == baremetal.ServerStatusDelivering {
			// Polls follow the delivery's expected end.
			expect = append(expect, scaleway.Expecting(scaleway.TransitionDelivery, srv.OfferName, PhaseSince(srv)))
		}
		got, _, err := i.Poller.WaitIPv4(s.phase, srv.Zone, srv.ID, scaleway.StatusIs(baremetal.ServerStatusReady),
			func(msg string) { i.progress(s.job, PhaseOrdered, msg) }, expect...)
		if err != nil {
			return srv, waitError(s.run, PhaseOrdered, "delivery", err)
		}
		srv = got
	}
	if err := i.API.AttachPrivateNetworks(s.phase, srv.Zone, srv.ID, s.job.PrivateNetworkIDs); err != nil {
		return srv, &PhaseError{Phase: PhaseOrdered, Err: err}
	}
	if srv.BootType == baremetal.ServerBootTypeRescue {
		// A spare in a rescue boot that may not be ours: rescue decides.
		return i.setPhase(s.run, srv, PhaseRescue)
	}
	// The reboot into rescue comes next: its mark goes with the phase, one
	// write instead of two (rebootIntoRescue finds it there).
	return i.setPhase(s.run, srv, PhaseRescue, markRescueBoot)
}

// markRescueBoot records, before a reboot into rescue, that the next rescue
// boot is an install's, with the controller's key; the old pin goes (the
// new boot has a new host key).
func markRescueBoot(tags []string) []string {
	tags, _ = scaleway.SetTagIn(withHostKey("")(tags), TagRescueBoot, "install")
	return tags
}

// address reads the server's IPv4 from its latest state, waiting (bounded)
// while the API lists none.
func (i *Installer) address(s *scope, srv *baremetal.Server, p Phase) (*baremetal.Server, string, error) {
	got, host, err := i.Poller.IPv4(s.phase, srv.Zone, srv.ID, func(msg string) { i.progress(s.job, p, msg) })
	if err != nil {
		return srv, "", waitError(s.run, p, "the server's IPv4", err)
	}
	return latest(srv, got), host, nil
}

// latest is the state to act on after a listing: the listed one, unless
// the install already holds one at least as recent by the API's
// updated_at (the answer of its own write). A listing lags behind writes,
// status and boot type included, so one started after phase booting's
// write may still show the server as delivered, ready in boot type normal
// and without the install's tags: acting on it skipped the jump and the
// reboot and waited for a Talos that never started (soak seed 100, stale
// lag 8 s). The addresses come from the listing when the held state has
// none.
func latest(held, listed *baremetal.Server) *baremetal.Server {
	if held == nil || held.UpdatedAt == nil || scaleway.NewerThan(listed, held) {
		return listed
	}
	out := *held
	if len(out.IPs) == 0 {
		out.IPs = listed.IPs
	}
	return &out
}

// rescue reboots into rescue (unless the server already runs it) and waits for SSH.
func (i *Installer) rescue(s *scope, srv *baremetal.Server) (*baremetal.Server, error) {
	srv, pin, err := i.enterRescue(s, srv, PhaseRescue)
	if err != nil {
		return srv, err
	}
	return i.setPhase(s.run, srv, PhaseImaging, withHostKey(pin))
}

// InKeyedRescue reports whether srv runs a rescue boot an install (or the
// pre-imager) asked for with the controller's key: no reboot is needed to
// log in, and its host key is the one pinned on its tags.
func InKeyedRescue(srv *baremetal.Server) bool {
	return scaleway.HasTags(srv.Tags, rescueBootTag) && readyIn(srv, baremetal.ServerBootTypeRescue)
}

// enterRescue reboots srv into a keyed rescue boot unless it runs one (then
// its pinned host key is loaded: a changed key fails closed), waits for SSH
// and returns the host key the session presented.
func (i *Installer) enterRescue(s *scope, srv *baremetal.Server, p Phase) (*baremetal.Server, rescue.HostKeyPin, error) {
	srv, host, err := i.address(s, srv, p)
	if err != nil {
		return srv, "", err
	}
	if InKeyedRescue(srv) {
		if err := i.loadHostKeyPin(s.run, srv, host); err != nil {
			return srv, "", &PhaseError{Phase: p, Err: err}
		}
		sess, err := i.probeRescue(s.phase, host, i.Dialer.LoginFor(srv))
		if err == nil {
			_ = sess.Close()
			return srv, sess.HostKey, nil
		}
		if !rescueGone(s, err) {
			return srv, "", waitError(s.run, p, "rescue SSH", err)
		}
		// The tags say a keyed rescue boot, yet it does not let us in: a
		// mark whose reboot never came (a restart or an API failure between
		// the two) left a keyless spare's rescue behind it, or rescue went
		// away. Boot one that does, rather than knock until the deadline.
		i.Log.Info("rescue marked as keyed does not let the controller in; rebooting into rescue", "server", srv.ID, "error", err.Error())
	}
	if srv, err = i.rebootIntoRescue(s, srv, p); err != nil {
		return srv, "", err
	}
	i.progress(s.job, p, "waiting for rescue SSH on "+host)
	sess, err := i.Dialer.WaitDialAs(s.phase, host, i.Dialer.LoginFor(srv), i.retryInterval())
	if err != nil {
		return srv, "", waitError(s.run, p, "rescue SSH", err)
	}
	_ = sess.Close()
	return srv, sess.HostKey, nil
}

// probeRescue dials a rescue system that answered before (or whose tags say
// it should) as login: a short wait tells whether it is still there.
func (i *Installer) probeRescue(ctx context.Context, host string, login rescue.Login) (*rescue.Session, error) {
	dctx, cancel := context.WithTimeout(ctx, max(20*i.retryInterval(), 10*time.Second))
	defer cancel()
	return i.Dialer.WaitDialAs(dctx, host, login, i.retryInterval())
}

// rescueGone tells whether err, from probeRescue, means booting rescue again
// may help: not when the install stops, and not on a changed host key
// (rebooting would trust whatever answers next).
func rescueGone(s *scope, err error) bool {
	return s.run.Err() == nil && s.phase.Err() == nil && !errors.As(err, new(*rescue.HostKeyChangedError))
}

// loadHostKeyPin gives the dialer the pin of srv's current rescue boot
// recorded on its tags (after a restart), unless it has one. The pin is
// read from the server by ID (FreshServer), never from srv: srv comes from
// the poller's listing, which may show the server as it was before the
// previous process recorded the pin, and a missing pin means trusting the
// host on first use. A server whose pin cannot be read fails the attempt
// (closed): no session is opened on a host whose pin is unknown.
func (i *Installer) loadHostKeyPin(ctx context.Context, srv *baremetal.Server, host string) error {
	if i.Dialer.Pinned(host) != "" {
		return nil
	}
	fresh, err := i.API.FreshServer(ctx, srv.Zone, srv.ID)
	if err != nil {
		return fmt.Errorf("reading the rescue host key pin of server %s: %w", srv.ID, err)
	}
	v, _ := scaleway.TagValue(fresh.Tags, TagRescueHostKey)
	pin, err := rescue.ParseHostKeyPin(v)
	if err != nil {
		return fmt.Errorf("server %s: rescue host key pin: %w", srv.ID, err)
	}
	if pin != "" {
		i.Dialer.Pin(host, pin)
	}
	return nil
}

// recordHostKey puts the pin of the session's host key on the server when it
// is not there yet, before anything is sent over the session.
func (i *Installer) recordHostKey(s *scope, srv *baremetal.Server, pin rescue.HostKeyPin) (*baremetal.Server, error) {
	if v, _ := scaleway.TagValue(srv.Tags, TagRescueHostKey); v == string(pin) || pin == "" {
		return srv, nil
	}
	var stored rescue.HostKeyPin
	updated, err := i.API.EditTags(s.run, srv.Zone, srv.ID, func(tags []string) ([]string, bool) {
		// The tags as read by ID: a pin srv (a listing's) did not show yet
		// is this boot's pin, recorded by the process before a restart;
		// another key is no pin to replace but a host to refuse.
		if v, _ := scaleway.TagValue(tags, TagRescueHostKey); v != "" && v != string(pin) {
			stored = rescue.HostKeyPin(v)
			return tags, false
		}
		return withHostKey(pin)(tags), true
	})
	if err != nil {
		return srv, err
	}
	if stored != "" {
		return srv, &rescue.HostKeyChangedError{Host: srv.ID, Pinned: stored, Presented: pin}
	}
	s.log.Info("rescue host key pinned for this rescue boot", "fingerprint", string(pin))
	return updated, nil
}

// hostKeyError is the PhaseError of a failed recordHostKey: a host that
// presented another key than the one stored for its boot gives the server
// back, as a changed key met by the dialer does (waitError).
func hostKeyError(p Phase, err error) error {
	var changed *rescue.HostKeyChangedError
	if errors.As(err, &changed) {
		return &PhaseError{Phase: p, Release: true, Err: fmt.Errorf("%s: %w", ReasonRescueHostKeyChanged, err)}
	}
	return &PhaseError{Phase: p, Err: fmt.Errorf("recording the rescue host key: %w", err)}
}

func withHostKey(pin rescue.HostKeyPin) func([]string) []string {
	return func(tags []string) []string {
		if pin == "" {
			tags, _ = scaleway.RemoveTagIn(tags, TagRescueHostKey)
		} else {
			tags, _ = scaleway.SetTagIn(tags, TagRescueHostKey, string(pin))
		}
		return tags
	}
}

// rebootIntoRescue reboots into rescue with the controller's key
// (registered for it just before) and waits until the server is ready in it.
func (i *Installer) rebootIntoRescue(s *scope, srv *baremetal.Server, p Phase) (*baremetal.Server, error) {
	i.progress(s.job, p, "rebooting into rescue")
	// The key first: a mark written for a reboot that cannot get the key
	// would announce a keyed boot that never comes.
	keys, err := i.Keys.Acquire(s.phase, s.job.keyHolder())
	if err != nil {
		return srv, &PhaseError{Phase: p, Err: fmt.Errorf("rescue SSH key: %w", err)}
	}
	// The new boot has a new host key: the old pin goes first; and it is
	// marked as ours, booted with the key.
	if v, _ := scaleway.TagValue(srv.Tags, TagRescueHostKey); v != "" || !scaleway.HasTags(srv.Tags, rescueBootTag) {
		updated, err := i.API.EditTags(s.run, srv.Zone, srv.ID, func(tags []string) ([]string, bool) {
			return markRescueBoot(tags), true
		})
		if err != nil {
			return srv, &PhaseError{Phase: p, Err: fmt.Errorf("recording the reboot into rescue: %w", err)}
		}
		srv = updated
	}
	if _, err := i.Dialer.RebootIntoRescue(s.phase, i.API, srv, keys); err != nil {
		// The boot the tag announces may not happen: without the tag the
		// next try reboots again instead of logging into a rescue (a
		// spare's, booted without the key) that never lets it in.
		if updated, terr := i.API.EditTags(s.run, srv.Zone, srv.ID, func(tags []string) ([]string, bool) {
			return scaleway.RemoveTagIn(tags, TagRescueBoot)
		}); terr == nil {
			srv = updated
		}
		return srv, apiError(s.run, p, "reboot into rescue", err)
	}
	got, err := i.waitBoot(s.phase, srv, baremetal.ServerBootTypeRescue)
	if err != nil {
		return srv, waitError(s.run, p, "the reboot into rescue", err)
	}
	i.Dialer.ForgetServer(got) // the old system may have answered until it stopped
	return got, nil
}

// image runs em-imager in rescue (the image, then with Disk delivery the
// machine config), records what it found on the server's tags and the
// NodeClaim, then moves on to booting. A disk already holding the image to
// write (a restart after writing) is not written again; the config is
// (write-config replaces it), as rendering may have changed.
func (i *Installer) image(s *scope, srv *baremetal.Server) (_ *baremetal.Server, err error) {
	defer func() {
		if err != nil {
			i.saveImageTags(s, srv)
		}
	}()
	img, err := s.job.Image(s.phase)
	if err != nil {
		return srv, &PhaseError{Phase: PhaseImaging, Err: fmt.Errorf("resolving the image: %w", err)}
	}
	if img.Delivery == "" {
		img.Delivery = DeliveryDisk
	}
	needImage := !Imaged(srv, img.SHA256)
	s.state.foldImageTags, s.state.imageTags = true, nil
	if needImage || img.Delivery == DeliveryDisk {
		srv, err = i.inRescue(s, srv, i.rescueWork(s, srv, img, needImage))
		if err != nil {
			return srv, err
		}
	}
	if s.job.Imaged != nil {
		if err := s.job.Imaged(s.phase, img); err != nil {
			return srv, &PhaseError{Phase: PhaseImaging, Err: fmt.Errorf("recording the image on the nodeclaim: %w", err)}
		}
	}
	srv, err = i.toBooting(s, srv, img)
	return srv, err
}

// rescueWork is what the imaging phase does in rescue: write the image if
// the disk does not hold it, and with disk delivery write the config (after
// reading the disks, which a write reads itself).
func (i *Installer) rescueWork(s *scope, srv *baremetal.Server, img Image, needImage bool) func(*rescue.Session) (*baremetal.Server, error) {
	return func(sess *rescue.Session) (*baremetal.Server, error) {
		if needImage {
			var err error
			if srv, err = i.writeImage(s, srv, sess, img); err != nil {
				return srv, err
			}
		}
		if img.Delivery != DeliveryDisk {
			return srv, nil
		}
		if !needImage {
			if err := i.inspectDisks(s, srv, sess); err != nil {
				return srv, err
			}
		}
		return srv, i.writeConfig(s, srv, sess)
	}
}

// toBooting ends the imaging phase: phase booting, written with the
// delivery, the image tags held for it and, before a kexec jump, its record.
func (i *Installer) toBooting(s *scope, srv *baremetal.Server, img Image) (*baremetal.Server, error) {
	more := []func([]string) []string{withDelivery(img.Delivery)}
	if s.state.imageTags != nil {
		more = append(more, s.state.imageTags)
	}
	// The kexec jump's record goes in the same write as phase booting,
	// before the jump: a restart after it knows Talos may be running.
	kexec := mayKexec(s, srv, img.Delivery)
	if kexec {
		more = append(more, i.recordKexec)
	}
	srv, err := i.setPhase(s.run, srv, PhaseBooting, more...)
	s.state.kexecPending = kexec && err == nil
	return srv, err
}

// saveImageTags writes the image tags held for the booting phase's write
// when the phase ends without it (a failure to retry), so that the retry
// does not write the image again.
func (i *Installer) saveImageTags(s *scope, srv *baremetal.Server) {
	if s.state.imageTags == nil {
		return
	}
	if _, err := i.API.EditTags(s.run, srv.Zone, srv.ID, func(tags []string) ([]string, bool) {
		return s.state.imageTags(tags), true
	}); err == nil {
		s.state.imageTags = nil
	}
}

// inRescue runs fn with an SSH session to srv's rescue system, holding an
// imaging slot; a rescue system gone away is booted again within the
// phase's deadline.
func (i *Installer) inRescue(s *scope, srv *baremetal.Server,
	fn func(*rescue.Session) (*baremetal.Server, error)) (*baremetal.Server, error) {
	srv, host, err := i.address(s, srv, PhaseImaging)
	if err != nil {
		return srv, err
	}
	release, err := i.acquireSlot(s.phase)
	if err != nil {
		return srv, waitError(s.run, PhaseImaging, "an imaging slot", err)
	}
	defer release()
	if err := i.loadHostKeyPin(s.run, srv, host); err != nil {
		return srv, &PhaseError{Phase: PhaseImaging, Err: err}
	}
	// Rescue answered SSH when this phase began. The login is the one the
	// API shows for the boot (its user and sudo password), if it shows one.
	sess, err := i.probeRescue(s.phase, host, i.Dialer.LoginFor(srv))
	if err != nil {
		// Rescue went away (a reboot by hand, a restart after a failed boot):
		// boot it again, within this phase's deadline.
		if !rescueGone(s, err) {
			return srv, waitError(s.run, PhaseImaging, "rescue SSH", err)
		}
		s.log.Info("rescue SSH unreachable while imaging; rebooting into rescue", "error", err.Error())
		if srv, err = i.rebootIntoRescue(s, srv, PhaseImaging); err != nil {
			return srv, err
		}
		if sess, err = i.Dialer.WaitDialAs(s.phase, host, i.Dialer.LoginFor(srv), i.retryInterval()); err != nil {
			return srv, waitError(s.run, PhaseImaging, "rescue SSH after a reboot into rescue", err)
		}
	}
	defer sess.Close()
	if srv, err = i.recordHostKey(s, srv, sess.HostKey); err != nil {
		return srv, hostKeyError(PhaseImaging, err)
	}
	return fn(sess)
}

// writeImage runs em-imager write and records what it found: the disk list
// on the NodeClaim (and the job, for this run), then the uplink, the disk
// and the image on the server's tags.
func (i *Installer) writeImage(s *scope, srv *baremetal.Server, sess *rescue.Session, img Image) (*baremetal.Server, error) {
	srv, err := i.dropImageTag(s.run, srv)
	if err != nil {
		return srv, err
	}
	i.progress(s.job, PhaseImaging, "writing the Talos image")
	rep, err := rescue.RunImager(s.phase, sess, rescue.ImagerArgs{
		Binary: i.Imager, ImageURL: img.URL, SHA256: img.SHA256, Format: img.Format,
		Disk: img.Disk, RawSize: img.RawSize, VerifyReadback: img.VerifyReadback, WipeOtherDisks: img.WipeOtherDisks,
	}, i.imagingProgress(s.job))
	if err != nil {
		return srv, i.imagerError(s, "em-imager", err)
	}
	if rep.Timings != nil {
		i.Metrics.observeImager(rep)
		s.log.Info("image written", "disk", rep.Disk.Path, "rawMBps", rep.Timings.RawMBps, "seconds", rep.Timings.TotalSeconds)
	}
	for _, w := range rep.Warnings {
		s.log.Info("em-imager", "warning", w) // the other disks wiped or skipped, among others
	}
	uplink := uplinkMAC(rep)
	if uplink == "" {
		return srv, &PhaseError{Phase: PhaseImaging, Release: true, Err: ErrNoLink}
	}
	if err := recordDisks(s, rep); err != nil {
		return srv, err
	}
	written := writtenDigest(rep, img)
	hw := func(tags []string) []string {
		return withHardware(tags, uplink, rep.Disk.Path, rep.Disk.Serial, written)
	}
	i.progress(s.job, PhaseImaging, fmt.Sprintf("image verified on %s", rep.Disk.Path))
	return i.tagHardware(s, srv, hw)
}

// dropImageTag removes srv's image tag before a write: em-imager wipes the
// partition table first, so until the new write is verified no tag may say
// the disk holds an image (a failed or stopped rewrite of a spare would
// leave it "pre-imaged" on a wiped disk).
func (i *Installer) dropImageTag(ctx context.Context, srv *baremetal.Server) (*baremetal.Server, error) {
	if v, _ := scaleway.TagValue(srv.Tags, scaleway.TagImage); v == "" {
		return srv, nil
	}
	updated, err := i.API.EditTags(ctx, srv.Zone, srv.ID, func(tags []string) ([]string, bool) {
		return scaleway.RemoveTagIn(tags, scaleway.TagImage)
	})
	if err != nil {
		return srv, &PhaseError{Phase: PhaseImaging, Err: fmt.Errorf("dropping the image tag before writing: %w", err)}
	}
	return updated, nil
}

// imagingProgress reports em-imager's progress: the job's imaging steps as
// they are reached, and an event every quarter (not every second).
func (i *Installer) imagingProgress(job *Job) func(report.Progress) {
	lastPct := -1
	return func(p report.Progress) {
		if p.TotalIn <= 0 {
			return
		}
		pct := int(100 * p.BytesIn / p.TotalIn)
		if step, ok := ImagingStepReached(lastPct, pct); ok && job.Imaging != nil {
			job.Imaging(step)
		}
		if pct/25 != lastPct/25 {
			i.progress(job, PhaseImaging, fmt.Sprintf("imaging %d%% (%.0f MB/s raw)", pct, p.RawMBps))
		}
		lastPct = pct
	}
}

// recordDisks records the disk list the write found, on the NodeClaim
// first: tags that say "imaged" always come with it.
func recordDisks(s *scope, rep *report.Report) error {
	disks, err := EncodeDisks(rep)
	if err != nil {
		return &PhaseError{Phase: PhaseImaging, Release: true, Err: err}
	}
	if s.job.RecordDisks != nil {
		if err := s.job.RecordDisks(s.phase, disks); err != nil {
			return &PhaseError{Phase: PhaseImaging, Err: fmt.Errorf("recording the disk list: %w", err)}
		}
	}
	s.state.disks = disks
	return nil
}

// writtenDigest is the digest of the image on the disk: the one em-imager
// reports, else the one asked for.
func writtenDigest(rep *report.Report, img Image) string {
	if rep.Image != nil && rep.Image.RawSHA256 != "" {
		return rep.Image.RawSHA256
	}
	return img.SHA256
}

// tagHardware writes the hardware and image tags (hw) onto srv. In an install
// they go with the booting phase, one write instead of two; the config is
// rendered from the copy returned until then (a restart in between writes
// the image again).
func (i *Installer) tagHardware(s *scope, srv *baremetal.Server, hw func([]string) []string) (*baremetal.Server, error) {
	if s.state.foldImageTags {
		s.state.imageTags = hw
		cp := *srv
		cp.Tags = hw(slices.Clone(srv.Tags))
		return &cp, nil
	}
	updated, err := i.API.EditTags(s.run, srv.Zone, srv.ID, func(tags []string) ([]string, bool) {
		return hw(tags), true
	})
	if err != nil {
		return srv, &PhaseError{Phase: PhaseImaging, Err: err}
	}
	return updated, nil
}

// inspectDisks records the disk list of a disk imaged without this job's
// record (a spare pre-imaged before its NodeClaim existed): em-imager
// inspect of the install disk lists the disks as write would have, so the
// config renders as for a disk this install wrote.
func (i *Installer) inspectDisks(s *scope, srv *baremetal.Server, sess *rescue.Session) error {
	if s.state.disks != "" || s.job.Disks == nil || s.job.RecordDisks == nil {
		return nil
	}
	if recorded, err := s.job.Disks(s.phase); err != nil || recorded != "" {
		return err
	}
	disk, _ := scaleway.TagValue(srv.Tags, TagDisk)
	rep, err := rescue.RunInspect(s.phase, sess, i.Imager, disk)
	if err != nil {
		return i.imagerError(s, "em-imager inspect", err)
	}
	disks, err := EncodeDisks(rep)
	if err != nil {
		return &PhaseError{Phase: PhaseImaging, Release: true, Err: err}
	}
	if err := s.job.RecordDisks(s.phase, disks); err != nil {
		return &PhaseError{Phase: PhaseImaging, Err: fmt.Errorf("recording the disk list: %w", err)}
	}
	s.state.disks = disks
	return nil
}

// ImagingStepReached is the multiple of ImagingStep that pct is in, when
// the progress moved into it from last (-1: nothing reported yet); ok is
// false within the same step, so Job.Imaging is told about each step once.
func ImagingStepReached(last, pct int) (step int, ok bool) {
	if last >= 0 && pct/ImagingStep == last/ImagingStep {
		return 0, false
	}
	return pct / ImagingStep * ImagingStep, true
}

// hardware is what the config is rendered from: the server's tags and the
// disk list, this run's (writeImage) or else read back from the record.
func (i *Installer) hardware(s *scope, srv *baremetal.Server, p Phase) (*report.Report, error) {
	disks := s.state.disks
	if disks == "" && s.job.Disks != nil {
		var err error
		if disks, err = s.job.Disks(s.phase); err != nil {
			return nil, &PhaseError{Phase: p, Err: fmt.Errorf("reading the recorded disk list: %w", err)}
		}
	}
	hw, err := Hardware(srv.Tags, disks)
	if err != nil {
		return nil, &PhaseError{Phase: p, Err: err}
	}
	return hw, nil
}

// writeConfig renders the node's machine config and has em-imager put it
// into the metal-iso partition of the disk the image went to. The config
// goes over the SSH session on em-imager's stdin: it is never in a command
// line, a log, an event or an error.
func (i *Installer) writeConfig(s *scope, srv *baremetal.Server, sess *rescue.Session) error {
	hw, err := i.hardware(s, srv, PhaseImaging)
	if err != nil {
		return err
	}
	if hw.Disk.Path == "" {
		return &PhaseError{Phase: PhaseImaging, Release: true, Err: errors.New("the server's tags do not say which disk holds the image")}
	}
	cfg, err := s.job.Render(s.phase, hw, NetworkOf(srv))
	if err != nil {
		return &PhaseError{Phase: PhaseImaging, Err: fmt.Errorf("rendering the machine config: %w", err)}
	}
	i.progress(s.job, PhaseImaging, "writing the machine config to the metal-iso partition of "+hw.Disk.Path)
	rep, err := rescue.RunWriteConfig(s.phase, sess, rescue.ConfigArgs{Binary: i.Imager, Disk: hw.Disk.Path, Config: cfg})
	if err != nil {
		return i.imagerError(s, "em-imager write-config", err)
	}
	want := sha256.Sum256(cfg)
	s.state.configSHA = hex.EncodeToString(want[:])
	if rep.Config == nil || rep.Config.SHA256 != hex.EncodeToString(want[:]) || !rep.Config.Verified {
		return &PhaseError{Phase: PhaseImaging, Release: true, Err: errors.New("em-imager write-config did not report the config it was given as written and read back")}
	}
	s.log.Info("machine config written to the disk", "disk", hw.Disk.Path, "partition", rep.Config.Partition, "configSHA256", rep.Config.SHA256)
	i.progress(s.job, PhaseImaging, fmt.Sprintf("machine config written to partition %s of %s", rep.Config.Partition, hw.Disk.Path))
	return nil
}

// ErrNoLink is returned when em-imager saw no NIC with a link. The uplink is the server's
// (a cable, a switch port): the server is quarantined if it is kept.
var ErrNoLink = errors.New("em-imager found no NIC with a link")

// imagerError classifies a failed em-imager run: a bad image or unsuitable
// disk, a binary on the host that is not ours, or the phase's timeout
// release the server; anything else is retried.
func (i *Installer) imagerError(s *scope, what string, err error) error {
	var re *report.Error
	var refused *rescue.SudoRefusedError
	switch {
	case errors.As(err, &refused):
		// The rescue user may not become root with what the API gave for
		// this boot: retrying the same boot would be refused the same way.
		return &PhaseError{Phase: PhaseImaging, Release: true, Err: fmt.Errorf("%s: %w", ReasonRescueSudoRefused, err)}
	case errors.As(err, &re):
		// A bad image or an unsuitable disk will not get better by retrying on this server.
		return &PhaseError{Phase: PhaseImaging, Release: !report.Retryable(re.Code), Err: fmt.Errorf("%s: %w", what, re)}
	case errors.Is(err, rescue.ErrImagerDigestMismatch):
		// Something on the rescue host changed the binary between upload
		// and run: the host is not ours alone.
		return &PhaseError{Phase: PhaseImaging, Release: true, Err: err}
	case s.run.Err() == nil && s.phase.Err() != nil:
		return &PhaseError{Phase: PhaseImaging, Release: true, Err: fmt.Errorf("imaging did not finish within %s", i.Timeouts.Imaging)}
	}
	return &PhaseError{Phase: PhaseImaging, Err: err}
}

// readyIn reports whether srv already runs bootType, so no reboot is needed.
func readyIn(srv *baremetal.Server, bootType baremetal.ServerBootType) bool {
	return srv.BootType == bootType && srv.Status == baremetal.ServerStatusReady
}

// waitBoot waits until srv, just asked to reboot, is ready in bootType;
// polls follow the reboot's expected end.
func (i *Installer) waitBoot(ctx context.Context, srv *baremetal.Server, bootType baremetal.ServerBootType) (*baremetal.Server, error) {
	return i.Poller.WaitFor(ctx, srv.Zone, srv.ID, func(s *baremetal.Server) (bool, error) {
		done, err := scaleway.StatusIs(baremetal.ServerStatusReady)(s)
		return done && s.BootType == bootType, err
	}, scaleway.Expecting(scaleway.RebootTo(bootType), srv.OfferName, time.Time{}))
}

// boot reboots into the written image, waits for the Talos API and applies
// the config. The node joining ends the phase whenever it is seen: after an
// apply whose answer was lost, the maintenance API is gone and only the node
// tells that it worked.
func (i *Installer) boot(s *scope, srv *baremetal.Server) (*baremetal.Server, error) {
	srv, host, err := i.address(s, srv, PhaseBooting)
	if err != nil {
		return srv, err
	}
	if i.joined(s.phase, s.job) {
		return i.setPhase(s.run, srv, PhaseJoined)
	}
	if !readyIn(srv, baremetal.ServerBootTypeNormal) {
		joined, next, err := i.kexecBoot(s, srv, host)
		srv = next
		if err != nil {
			return srv, err
		}
		if joined {
			s.log.Info("the node registered after a kexec boot", "configDelivery", DeliveryOf(srv))
			return i.setPhase(s.run, srv, PhaseJoined)
		}
		if s.phase.Err() != nil {
			return srv, waitError(s.run, PhaseBooting, "the node's registration", s.phase.Err())
		}
		i.progress(s.job, PhaseBooting, "rebooting into Talos")
		if _, err := i.API.RebootServer(s.phase, srv.Zone, srv.ID, baremetal.ServerBootTypeNormal, nil); err != nil {
			return srv, apiError(s.run, PhaseBooting, "reboot into Talos", err)
		}
		// The API's boot type is normal from now on: no jump to remember.
		srv = i.unmarkKexec(s.run, srv)
		if srv, err = i.waitBoot(s.phase, srv, baremetal.ServerBootTypeNormal); err != nil {
			return srv, waitError(s.run, PhaseBooting, "the reboot into Talos", err)
		}
	}
	if DeliveryOf(srv) == DeliveryDisk {
		return i.awaitNode(s, srv, "Talos reads its machine config from the disk; waiting for the node to register (no maintenance API)")
	}
	return i.applyOverMaintenanceAPI(s, srv, host)
}

// applyOverMaintenanceAPI is the legacy delivery: wait until the Talos API
// proves maintenance mode, record its key on the server, send the config to
// that key only. Whatever fails once a peer was chosen (another key, a
// configured node, an apply error) may mean someone else configured the
// server first: it is given back, unless its Node shows up meanwhile (an
// apply whose answer was lost). The config is never sent twice.
func (i *Installer) applyOverMaintenanceAPI(s *scope, srv *baremetal.Server, host string) (*baremetal.Server, error) {
	pinned, _ := scaleway.TagValue(srv.Tags, TagTalosPeer)
	probe := max(10*i.retryInterval(), 10*time.Second)
	if pinned != "" {
		// Applied (or about to be) before a restart: only the node tells;
		// nothing is sent again, to this key or another.
		s.log.Info("the config was sent to the Talos API before; waiting for the node", "peer", pinned)
		return i.awaitNode(s, srv, "the config was sent to the Talos API before a restart; waiting for the node to register")
	}
	i.progress(s.job, PhaseBooting, "waiting for the Talos maintenance API on "+host)
	var last error
	for {
		if i.joined(s.phase, s.job) {
			return i.setPhase(s.run, srv, PhaseJoined)
		}
		if s.phase.Err() != nil {
			return srv, waitError(s.run, PhaseBooting, "the Talos API", fmt.Errorf("%w (last error: %v)", s.phase.Err(), last))
		}
		wctx, cancel := context.WithTimeout(s.phase, probe)
		peer, err := i.Talos.WaitMaintenance(wctx, host, i.retryInterval())
		cancel()
		if err != nil {
			if talosapi.Release(err) && s.run.Err() == nil {
				// Answers, but not as a fresh Talos in maintenance mode: configured
				// by someone else, or not Talos at all.
				return srv, &PhaseError{Phase: PhaseBooting, Release: true, Err: fmt.Errorf("the Talos API on %s: %w", host, err)}
			}
			last = err
			continue
		}
		hw, err := i.hardware(s, srv, PhaseBooting)
		if err != nil {
			return srv, err
		}
		cfg, err := s.job.Render(s.phase, hw, NetworkOf(srv))
		if err != nil {
			return srv, &PhaseError{Phase: PhaseBooting, Err: fmt.Errorf("rendering the machine config: %w", err)}
		}
		// The peer goes on the server before the config leaves: a restart
		// never sends it again, to this peer or another.
		if srv, err = i.API.EditTags(s.run, srv.Zone, srv.ID, func(tags []string) ([]string, bool) {
			tags, _ = scaleway.SetTagIn(tags, TagTalosPeer, peer.Fingerprint)
			return tags, true
		}); err != nil {
			return srv, &PhaseError{Phase: PhaseBooting, Err: fmt.Errorf("recording the Talos API's key: %w", err)}
		}
		s.log.Info("Talos API in maintenance mode; applying the machine config to its key only", "peer", peer.Fingerprint)
		actx, cancel := context.WithTimeout(s.phase, probe)
		err = i.Talos.ApplyTo(actx, peer, cfg)
		cancel()
		if err != nil {
			s.log.Info("applying the machine config failed; the server may have been taken", "error", err.Error())
			return i.awaitNodeOrRelease(s, srv, probe, fmt.Errorf("applying the machine config to %s: %w", host, err))
		}
		// Joined only when the node shows: Talos answers an apply that lost
		// the race to another writer with OK and ignores it.
		s.log.Info("machine config applied")
		return i.awaitNode(s, srv, "machine config applied; waiting for the node to register")
	}
}

// awaitNodeOrRelease gives the node grace to register (an apply whose
// answer was lost), else releases the server with cause.
func (i *Installer) awaitNodeOrRelease(s *scope, srv *baremetal.Server, grace time.Duration, cause error) (*baremetal.Server, error) {
	gctx, cancel := context.WithTimeout(s.phase, grace)
	defer cancel()
	for {
		if i.joined(gctx, s.job) {
			return i.setPhase(s.run, srv, PhaseJoined)
		}
		select {
		case <-gctx.Done():
			if s.run.Err() != nil {
				return srv, s.run.Err()
			}
			return srv, &PhaseError{Phase: PhaseBooting, Release: true, Err: cause}
		case <-i.clock().After(i.retryInterval()):
		}
	}
}

// awaitNode waits, until the phase's deadline, for the Node of a server
// that has its config. Nothing talks to the Talos API. With Disk delivery
// Talos reads the metal-iso partition at boot, and without a usable one it
// stays down (fail closed): the phase times out and the server is released.
func (i *Installer) awaitNode(s *scope, srv *baremetal.Server, msg string) (*baremetal.Server, error) {
	i.progress(s.job, PhaseBooting, msg)
	for {
		if i.joined(s.phase, s.job) {
			s.log.Info("the node registered", "configDelivery", DeliveryOf(srv))
			return i.setPhase(s.run, srv, PhaseJoined)
		}
		select {
		case <-s.phase.Done():
			return srv, waitError(s.run, PhaseBooting, "the node's registration", s.phase.Err())
		case <-i.clock().After(i.retryInterval()):
		}
	}
}

func (i *Installer) joined(ctx context.Context, job *Job) bool {
	if job.Joined == nil {
		return false
	}
	ok, err := job.Joined(ctx)
	return err == nil && ok
}

func apiError(ctx context.Context, p Phase, what string, err error) error {
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
