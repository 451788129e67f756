package install

import (
	"context"
	"fmt"
	"strconv"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// PreImageHolder is who holds the rescue key while server id is pre-imaged
// (never the ID an install of that server holds it under: a take during a
// pre-imaging must not drop the install's hold, nor the reverse).
func PreImageHolder(id string) string { return "preimage/" + id }

// PreImage writes img onto srv, a spare, the way an install writes it: in a
// rescue boot that accepts the controller's key (rebooting srv into one
// unless it runs one, TagRescueBoot recorded before the reboot, the host
// key pinned on the server's tags; a pinned key that changed fails
// closed), em-imager write verified with the first MiB last, then the
// image, disk and uplink tags. Only the image: the machine config is per
// node, written by the install that takes the spare. The phase tags are
// not touched. The rescue key is held from the reboot until the write ends
// (the rescue boot keeps the key it booted with; IAM need not). Bounded
// by the rescue and imaging timeouts and by the imaging slots installs use.
//
// A spare that ran a node has its disks erased first; erased, when not nil,
// is told as soon as that is recorded on the server: the spare may be taken
// from then on, while the image is still being written (a take stops the
// write), so the reserved offerings must count it then, not after the write.
func (i *Installer) PreImage(ctx context.Context, srv *baremetal.Server, img Image, erased func(*baremetal.Server)) (*baremetal.Server, error) {
	job := &Job{Server: srv, holder: PreImageHolder(srv.ID)}
	defer i.Keys.Release(job.holder)
	log := i.Log.WithValues("server", srv.ID, "zone", string(srv.Zone), "preimage", true)
	pctx, cancel := context.WithTimeout(ctx, i.Timeouts.Rescue+i.Timeouts.Imaging)
	defer cancel()
	s := &scope{run: ctx, phase: pctx, log: log, job: job, state: &runState{}}
	srv, pin, err := i.enterRescue(s, srv, PhaseRescue)
	if err != nil {
		return srv, err
	}
	// Pinned on the server now, as an install's rescue phase does, not after
	// waiting for an imaging slot: a restart meanwhile must not trust a
	// second key on first use.
	if srv, err = i.recordHostKey(s, srv, pin); err != nil {
		return srv, hostKeyError(PhaseRescue, err)
	}
	return i.inRescue(s, srv, func(sess *rescue.Session) (*baremetal.Server, error) {
		if ErasePending(srv) {
			var err error
			if srv, err = i.eraseDisks(s, srv, sess); err != nil {
				return srv, err
			}
			if erased != nil {
				erased(srv)
			}
		}
		return i.writeImage(s, srv, sess, img)
	})
}

// EraseTimeout bounds one em-imager erase of a kept spare's disks: seconds
// on NVMe/SSD (discard), but a full overwrite of a large HDD takes hours
// (docs/security.md). An image write the erase left no time for fails the
// pre-imaging; the next one finds the disks erased and only writes.
const EraseTimeout = 24 * time.Hour

// eraseDisks runs em-imager erase on every disk of srv (a spare that ran a
// node: TagErasePending) and, once each disk is verified erased in full,
// replaces the pending tag with TagErased. A failure leaves the tag: the
// spare stays out of capacity and the pre-imager tries again after its
// backoff.
func (i *Installer) eraseDisks(s *scope, srv *baremetal.Server, sess *rescue.Session) (*baremetal.Server, error) {
	ectx, cancel := context.WithTimeout(s.run, EraseTimeout)
	defer cancel()
	started := i.clock().Now()
	rep, err := rescue.RunErase(ectx, sess, i.Imager)
	if err != nil {
		return srv, &PhaseError{Phase: PhaseImaging, Err: fmt.Errorf("erasing the disks of the node this spare ran: %w", err)}
	}
	for _, e := range rep.Erased {
		s.log.Info("disk erased", "disk", e.Path, "method", e.Method, "bytes", e.Bytes, "seconds", e.Seconds, "verifiedBytes", e.VerifiedBytes)
	}
	now := strconv.FormatInt(i.clock().Now().Unix(), 10)
	updated, err := i.API.EditTags(s.run, srv.Zone, srv.ID, func(tags []string) ([]string, bool) {
		tags, _ = scaleway.RemoveTagIn(tags, TagErasePending)
		tags, _ = scaleway.SetTagIn(tags, TagErased, now)
		return tags, true
	})
	if err != nil {
		return srv, &PhaseError{Phase: PhaseImaging, Err: fmt.Errorf("recording the erase: %w", err)}
	}
	s.log.Info("spare's disks erased", "disks", len(rep.Erased), "seconds", int(i.clock().Since(started).Seconds()))
	return updated, nil
}
