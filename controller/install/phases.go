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
)

// deliver waits for the order to be delivered and attaches private networks.
func (i *Installer) deliver(ctx, pctx context.Context, job *Job, srv *baremetal.Server) (*baremetal.Server, error) {
	i.progress(job, PhaseOrdered, fmt.Sprintf("waiting for delivery of server %s", srv.ID))
	// Ready is not enough: the API can show a delivered server without IPs for a while.
	got, _, err := i.Poller.WaitIPv4(pctx, srv.Zone, srv.ID, scaleway.StatusIs(baremetal.ServerStatusReady),
		func(msg string) { i.progress(job, PhaseOrdered, msg) })
	if err != nil {
		return srv, waitError(ctx, PhaseOrdered, "delivery", err)
	}
	srv = got
	if err := i.API.AttachPrivateNetworks(pctx, srv.Zone, srv.ID, job.PrivateNetworkIDs); err != nil {
		return srv, &PhaseError{Phase: PhaseOrdered, Err: err}
	}
	return i.setPhase(ctx, srv, PhaseRescue)
}

// address reads the server's IPv4 from its latest state, waiting (bounded)
// while the API lists none.
func (i *Installer) address(ctx, pctx context.Context, job *Job, srv *baremetal.Server, p Phase) (*baremetal.Server, string, error) {
	got, host, err := i.Poller.IPv4(pctx, srv.Zone, srv.ID, func(msg string) { i.progress(job, p, msg) })
	if err != nil {
		return srv, "", waitError(ctx, p, "the server's IPv4", err)
	}
	return got, host, nil
}

// rescue reboots into rescue (unless the server already runs it) and waits for SSH.
func (i *Installer) rescue(ctx, pctx context.Context, job *Job, srv *baremetal.Server) (*baremetal.Server, error) {
	srv, host, err := i.address(ctx, pctx, job, srv, PhaseRescue)
	if err != nil {
		return srv, err
	}
	if !readyIn(srv, baremetal.ServerBootTypeRescue) {
		if srv, err = i.rebootIntoRescue(ctx, pctx, job, srv, PhaseRescue); err != nil {
			return srv, err
		}
	}
	i.progress(job, PhaseRescue, "waiting for rescue SSH on "+host)
	sess, err := i.Dialer.WaitDial(pctx, host, i.retryInterval())
	if err != nil {
		return srv, waitError(ctx, PhaseRescue, "rescue SSH", err)
	}
	_ = sess.Close()
	return i.setPhase(ctx, srv, PhaseImaging)
}

// rebootIntoRescue reboots into rescue (forgetting the old boot's host key)
// and waits until the server is ready in it.
func (i *Installer) rebootIntoRescue(ctx, pctx context.Context, job *Job, srv *baremetal.Server, p Phase) (*baremetal.Server, error) {
	i.progress(job, p, "rebooting into rescue")
	if _, err := i.Dialer.RebootIntoRescue(pctx, i.API, srv, job.SSHKeyIDs); err != nil {
		return srv, apiError(ctx, p, "reboot into rescue", err)
	}
	got, err := i.waitBoot(pctx, srv, baremetal.ServerBootTypeRescue)
	if err != nil {
		return srv, waitError(ctx, p, "the reboot into rescue", err)
	}
	i.Dialer.ForgetServer(got) // the old system may have answered until it stopped
	return got, nil
}

// image runs em-imager in rescue, records what it found on the server's tags
// and the NodeClaim, then moves on to booting. A disk already holding the
// image to write (a restart after writing) is not written again.
func (i *Installer) image(ctx, pctx context.Context, log logr.Logger, job *Job, srv *baremetal.Server) (*baremetal.Server, error) {
	img, err := job.Image(pctx)
	if err != nil {
		return srv, &PhaseError{Phase: PhaseImaging, Err: fmt.Errorf("resolving the image: %w", err)}
	}
	if !Imaged(srv, img.SHA256) {
		if srv, err = i.writeImage(ctx, pctx, log, job, srv, img); err != nil {
			return srv, err
		}
	}
	if job.Imaged != nil {
		if err := job.Imaged(pctx, img); err != nil {
			return srv, &PhaseError{Phase: PhaseImaging, Err: fmt.Errorf("recording the image on the nodeclaim: %w", err)}
		}
	}
	return i.setPhase(ctx, srv, PhaseBooting)
}

func (i *Installer) writeImage(ctx, pctx context.Context, log logr.Logger, job *Job, srv *baremetal.Server, img Image) (*baremetal.Server, error) {
	srv, host, err := i.address(ctx, pctx, job, srv, PhaseImaging)
	if err != nil {
		return srv, err
	}
	release, err := i.acquireSlot(pctx)
	if err != nil {
		return srv, waitError(ctx, PhaseImaging, "an imaging slot", err)
	}
	defer release()
	// Rescue answered SSH when this phase began: a short wait tells whether
	// it is still there.
	dctx, cancel := context.WithTimeout(pctx, max(20*i.retryInterval(), 10*time.Second))
	sess, err := i.Dialer.WaitDial(dctx, host, i.retryInterval())
	cancel()
	if err != nil {
		// Rescue went away (a reboot by hand, a restart after a failed boot):
		// boot it again, within this phase's deadline. A changed host key is
		// not rescue gone: rebooting would trust whatever answers next.
		if ctx.Err() != nil || pctx.Err() != nil || errors.As(err, new(*rescue.HostKeyChangedError)) {
			return srv, waitError(ctx, PhaseImaging, "rescue SSH", err)
		}
		log.Info("rescue SSH unreachable while imaging; rebooting into rescue", "error", err.Error())
		if srv, err = i.rebootIntoRescue(ctx, pctx, job, srv, PhaseImaging); err != nil {
			return srv, err
		}
		if sess, err = i.Dialer.WaitDial(pctx, host, i.retryInterval()); err != nil {
			return srv, waitError(ctx, PhaseImaging, "rescue SSH after a reboot into rescue", err)
		}
	}
	defer sess.Close()
	i.progress(job, PhaseImaging, "writing the Talos image")
	lastPct := -1
	rep, err := rescue.RunImager(pctx, sess, rescue.ImagerArgs{
		Binary: i.Imager, ImageURL: img.URL, SHA256: img.SHA256, Format: img.Format,
		Disk: img.Disk, RawSize: img.RawSize, VerifyReadback: img.VerifyReadback,
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
		if ctx.Err() == nil && pctx.Err() != nil {
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
	written := img.SHA256
	if rep.Image != nil && rep.Image.RawSHA256 != "" {
		written = rep.Image.RawSHA256
	}
	updated, err := i.API.EditTags(ctx, srv.Zone, srv.ID, func(tags []string) ([]string, bool) {
		return withHardware(tags, uplink, rep.Disk.Path, rep.Disk.Serial, written), true
	})
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

// waitBoot waits until srv is ready in bootType.
func (i *Installer) waitBoot(ctx context.Context, srv *baremetal.Server, bootType baremetal.ServerBootType) (*baremetal.Server, error) {
	return i.Poller.WaitFor(ctx, srv.Zone, srv.ID, func(s *baremetal.Server) (bool, error) {
		done, err := scaleway.StatusIs(baremetal.ServerStatusReady)(s)
		return done && s.BootType == bootType, err
	})
}

// boot reboots into the written image, waits for the Talos API and applies
// the config. The node joining ends the phase whenever it is seen: after an
// apply whose answer was lost, the maintenance API is gone and only the node
// tells that it worked.
func (i *Installer) boot(ctx, pctx context.Context, log logr.Logger, job *Job, srv *baremetal.Server) (*baremetal.Server, error) {
	srv, host, err := i.address(ctx, pctx, job, srv, PhaseBooting)
	if err != nil {
		return srv, err
	}
	if i.joined(pctx, job) {
		return i.setPhase(ctx, srv, PhaseJoined)
	}
	if !readyIn(srv, baremetal.ServerBootTypeNormal) {
		i.progress(job, PhaseBooting, "rebooting into Talos")
		if _, err := i.API.RebootServer(pctx, srv.Zone, srv.ID, baremetal.ServerBootTypeNormal, nil); err != nil {
			return srv, apiError(ctx, PhaseBooting, "reboot into Talos", err)
		}
		if srv, err = i.waitBoot(pctx, srv, baremetal.ServerBootTypeNormal); err != nil {
			return srv, waitError(ctx, PhaseBooting, "the reboot into Talos", err)
		}
	}
	i.progress(job, PhaseBooting, "waiting for the Talos API on "+host)
	// Short waits for the API, each followed by a look for the node.
	probe := max(10*i.retryInterval(), 10*time.Second)
	var last error
	for {
		if i.joined(pctx, job) {
			return i.setPhase(ctx, srv, PhaseJoined)
		}
		if pctx.Err() != nil {
			return srv, waitError(ctx, PhaseBooting, "the Talos API", fmt.Errorf("%w (last error: %v)", pctx.Err(), last))
		}
		wctx, cancel := context.WithTimeout(pctx, probe)
		err := i.Talos.WaitReady(wctx, host, i.retryInterval())
		cancel()
		if err != nil {
			last = err
			continue
		}
		cfg, err := job.Render(pctx, HardwareFromTags(srv.Tags), NetworkOf(srv))
		if err != nil {
			return srv, &PhaseError{Phase: PhaseBooting, Err: fmt.Errorf("rendering the machine config: %w", err)}
		}
		actx, cancel := context.WithTimeout(pctx, probe)
		err = i.Talos.Apply(actx, host, cfg)
		cancel()
		if err != nil {
			// The config may have been applied with the answer lost: the
			// next round looks for the node before trying again.
			log.Info("applying the machine config failed; looking for the node before trying again", "error", err.Error())
			last = err
			continue
		}
		log.Info("machine config applied")
		i.progress(job, PhaseBooting, "machine config applied; the node is joining")
		return i.setPhase(ctx, srv, PhaseJoined)
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
