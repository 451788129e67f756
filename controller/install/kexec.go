package install

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// TagKexec records that the install ordered em-imager's kexec jump from
// rescue into the written Talos (Unix seconds of the order), set before
// the jump: Scaleway saw no reboot, so its boot type still says rescue,
// and a firmware reboot of the node lands in rescue. It stays while the
// node runs (RescueBooted), and goes with the next reboot through the API
// (the install's fallback, the rescue-boot repair) or when a spare is
// taken.
const TagKexec = "karpenter-scaleway-em/kexec"

// KexecSince is when the jump recorded on srv was ordered (ok false: none).
func KexecSince(srv *baremetal.Server) (time.Time, bool) {
	v, ok := scaleway.TagValue(srv.Tags, TagKexec)
	if !ok {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		// A mangled value still says a jump was ordered; its time is lost.
		return time.Time{}, true
	}
	return time.Unix(n, 0), true
}

// RescueBooted reports whether srv booted its node by kexec and the API
// still says boot type rescue: a reboot by its firmware would land in
// rescue, not in Talos.
func RescueBooted(srv *baremetal.Server) bool {
	_, ok := KexecSince(srv)
	return ok && srv.BootType == baremetal.ServerBootTypeRescue
}

// DropKexec removes the kexec record from a tag list: the server was
// rebooted through the API since, which set its boot type.
func DropKexec(tags []string) ([]string, bool) { return scaleway.RemoveTagIn(tags, TagKexec) }

// kexecGrace is how long a kexec-booted node may take to register before
// the install falls back to Scaleway's reboot: a third of the booting
// phase unless set.
func (i *Installer) kexecGrace() time.Duration {
	if i.KexecGrace > 0 {
		return i.KexecGrace
	}
	return i.Timeouts.Boot / 3
}

// Kexec outcomes (the kexec metric's result label).
const (
	KexecJumped      = "jumped"      // em-imager reported the jump and rescue went away
	KexecRefused     = "refused"     // the rescue kernel refused: Scaleway's reboot instead
	KexecUnreachable = "unreachable" // rescue did not let the install in to run it
	KexecNoNode      = "no-node"     // no node within the grace after a jump: Scaleway's reboot
)

// mayKexec reports whether the booting phase will try the jump: the job
// allows it, the config is on the disk (delivery), and srv runs the
// install's keyed rescue.
func mayKexec(s *scope, srv *baremetal.Server, delivery ConfigDelivery) bool {
	return s.job.Kexec != nil && delivery == DeliveryDisk && InKeyedRescue(srv) && s.job.Kexec(s.phase)
}

// recordKexec sets the jump's record (the Unix time of now) in a tag list.
func (i *Installer) recordKexec(tags []string) []string {
	tags, _ = scaleway.SetTagIn(tags, TagKexec, strconv.FormatInt(i.clock().Now().Unix(), 10))
	return tags
}

// kexecBoot boots the written image by kexec when the job allows it and
// the server runs the install's keyed rescue, or resumes a jump ordered
// before (a restart): joined is true once the node registered. false
// without an error means "reboot through the API instead" (not allowed,
// refused, or no node within the grace).
//
// The jump's record is normally written with phase booting (one write,
// see image), and the run's kexecPending says this process wrote it and has not
// jumped yet. A record found without it was written by an earlier process
// that may have jumped: nothing jumps again, the node gets the grace.
func (i *Installer) kexecBoot(s *scope, srv *baremetal.Server, host string) (joined bool, _ *baremetal.Server, _ error) {
	_, ordered := KexecSince(srv)
	if ordered && srv.BootType != baremetal.ServerBootTypeRescue {
		// Rebooted through the API since (a fallback whose record outlived
		// a restart): the boot type says what comes up.
		s.state.kexecPending = false
		return false, i.unmarkKexec(s.run, srv), nil
	}
	if !ordered || s.state.kexecPending {
		if !ordered {
			// Booting entered without the record (written by a version
			// that recorded the jump on its own): record it first.
			if !mayKexec(s, srv, DeliveryOf(srv)) {
				return false, srv, nil
			}
			marked, err := i.markKexec(s.run, srv)
			if err != nil {
				return false, srv, err
			}
			srv = marked
		}
		jumped, next, err := i.jump(s, srv, host)
		if err != nil || !jumped {
			return false, next, err
		}
		srv = next
	}
	return i.awaitKexecNode(s, srv), srv, nil
}

// markKexec records the jump on srv on its own write, when phase booting
// was written without it.
func (i *Installer) markKexec(ctx context.Context, srv *baremetal.Server) (*baremetal.Server, error) {
	owner := claimOf(srv.Tags)
	lost := false
	marked, err := i.API.EditTags(ctx, srv.Zone, srv.ID, func(tags []string) ([]string, bool) {
		if claimOf(tags) != owner {
			lost = true
			return tags, false
		}
		return i.recordKexec(tags), true
	})
	if err != nil {
		return srv, &PhaseError{Phase: PhaseBooting, Err: fmt.Errorf("recording the kexec jump: %w", err)}
	}
	if lost {
		return srv, fmt.Errorf("recording the kexec jump on server %s: %w", srv.ID, ErrNotOwned)
	}
	return marked, nil
}

// jump runs em-imager kexec in the keyed rescue, srv carrying the jump's
// record. jumped is true when the jump happened or may have (the session
// broke and rescue no longer answers); false after a refusal, with the
// record removed before the caller's reboot through the API (a record
// with boot type rescue says a jump may have happened), so that it never
// claims a jump that was refused.
func (i *Installer) jump(s *scope, srv *baremetal.Server, host string) (jumped bool, _ *baremetal.Server, _ error) {
	disk, _ := scaleway.TagValue(srv.Tags, TagDisk)
	i.progress(s.job, PhaseBooting, "booting Talos from rescue with kexec (no firmware reboot)")
	outcome, err := i.runKexec(s, srv, host, disk)
	i.Metrics.observeKexec(outcome)
	switch outcome {
	case KexecJumped:
		s.state.kexecPending = false
		s.log.Info("em-imager jumped into Talos with kexec; Scaleway still shows boot type rescue", "disk", disk)
		// That rescue boot is over: its mark and host key pin say nothing
		// of whatever answers on the address next.
		if updated, terr := i.API.EditTags(s.run, srv.Zone, srv.ID, func(tags []string) ([]string, bool) {
			tags, a := scaleway.RemoveTagIn(tags, TagRescueBoot)
			tags, b := scaleway.RemoveTagIn(tags, TagRescueHostKey)
			return tags, a || b
		}); terr == nil {
			srv = updated
		}
		i.Dialer.ForgetServer(srv)
		return true, srv, nil
	case "":
		// Neither a jump nor a refusal: the disk does not hold what imaging
		// verified; no boot would make a node of it.
		s.state.kexecPending = false
		return false, i.unmarkKexec(s.run, srv), &PhaseError{Phase: PhaseBooting, Release: true, Err: err}
	}
	s.log.Info("kexec not done; rebooting into Talos through the API", "outcome", outcome, "error", errString(err))
	i.progress(s.job, PhaseBooting, fmt.Sprintf("kexec %s (%s): rebooting into Talos through the API", outcome, errString(err)))
	s.state.kexecPending = false
	return false, i.unmarkKexec(s.run, srv), nil
}

// runKexec logs into the keyed rescue and runs em-imager kexec; it returns
// the outcome, or "" with the error of a disk that is not as imaging left
// it.
func (i *Installer) runKexec(s *scope, srv *baremetal.Server, host, disk string) (string, error) {
	if err := i.loadHostKeyPin(s.phase, srv, host); err != nil {
		return KexecUnreachable, err
	}
	sess, err := i.probeRescue(s.phase, host, i.Dialer.LoginFor(srv))
	if err != nil {
		return KexecUnreachable, err
	}
	_, jumped, err := rescue.RunKexec(s.phase, sess, rescue.KexecArgs{Binary: i.Imager, Disk: disk, ConfigSHA256: s.state.configSHA, JumpDelay: i.KexecJumpDelay})
	_ = sess.Close()
	if jumped {
		return KexecJumped, nil
	}
	var re *report.Error
	switch {
	case errors.As(err, &re) && report.KexecFallback(re.Code):
		return KexecRefused, err
	case errors.As(err, &re):
		return "", fmt.Errorf("em-imager kexec: %w", re)
	case err == nil:
		return KexecRefused, errors.New("em-imager kexec exited without jumping")
	}
	// The session broke without a report saying it jumps: if rescue still
	// answers, nothing jumped; if not, it may have.
	s.log.Info("em-imager kexec ended without a report; checking whether rescue is still there", "error", err.Error())
	if probe, perr := i.probeRescue(s.phase, host, i.Dialer.LoginFor(srv)); perr == nil {
		_ = probe.Close()
		return KexecUnreachable, err
	}
	return KexecJumped, nil
}

// unmarkKexec removes the kexec record (best effort: a record left behind
// makes a restart wait the grace, then reboot, which is safe).
func (i *Installer) unmarkKexec(ctx context.Context, srv *baremetal.Server) *baremetal.Server {
	if _, ok := KexecSince(srv); !ok {
		return srv
	}
	updated, err := i.API.EditTags(ctx, srv.Zone, srv.ID, DropKexec)
	if err != nil {
		i.Log.Info("removing the kexec record failed; it goes with the next reboot", "server", srv.ID, "error", err.Error())
		return srv
	}
	return updated
}

// awaitKexecNode waits for the node of a kexec jump, until the grace
// counted from the jump's order (or the phase's deadline) has passed.
func (i *Installer) awaitKexecNode(s *scope, srv *baremetal.Server) bool {
	since, _ := KexecSince(srv)
	deadline := since.Add(i.kexecGrace())
	i.progress(s.job, PhaseBooting, "Talos boots from the kexec jump; waiting for the node to register")
	for {
		if i.joined(s.phase, s.job) {
			return true
		}
		if !i.clock().Now().Before(deadline) {
			i.Metrics.observeKexec(KexecNoNode)
			s.log.Info("no node within the grace after the kexec jump; rebooting into Talos through the API", "grace", i.kexecGrace())
			i.progress(s.job, PhaseBooting, fmt.Sprintf("no node within %s of the kexec jump: rebooting into Talos through the API", i.kexecGrace()))
			return false
		}
		select {
		case <-s.phase.Done():
			return false
		case <-s.run.Done():
			return false
		case <-i.clock().After(i.retryInterval()):
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
