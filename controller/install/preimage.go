package install

import (
	"context"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
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
func (i *Installer) PreImage(ctx context.Context, srv *baremetal.Server, img Image) (*baremetal.Server, error) {
	job := &Job{Server: srv, holder: PreImageHolder(srv.ID)}
	defer i.Keys.Release(job.holder)
	log := i.Log.WithValues("server", srv.ID, "zone", string(srv.Zone), "preimage", true)
	pctx, cancel := context.WithTimeout(ctx, i.Timeouts.Rescue+i.Timeouts.Imaging)
	defer cancel()
	srv, pin, err := i.enterRescue(ctx, pctx, job, srv, PhaseRescue)
	if err != nil {
		return srv, err
	}
	// Pinned on the server now, as an install's rescue phase does, not after
	// waiting for an imaging slot: a restart meanwhile must not trust a
	// second key on first use.
	if srv, err = i.recordHostKey(ctx, log, srv, pin); err != nil {
		return srv, hostKeyError(PhaseRescue, err)
	}
	return i.inRescue(ctx, pctx, log, job, srv, func(sess *rescue.Session) (*baremetal.Server, error) {
		return i.writeImage(ctx, pctx, log, job, srv, sess, img)
	})
}
