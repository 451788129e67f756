package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/blockdev"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/wipe"
)

// hostDisks fills the report's list of every disk; a host whose sysfs
// cannot be read gets a warning, the command goes on.
func hostDisks(root hostroot.Root, r *report.Report) {
	d, err := blockdev.Disks(root)
	if err != nil {
		r.Warnings = append(r.Warnings, "listing disks: "+err.Error())
	}
	r.Disks = d
}

// wipePlan checks, before anything is downloaded or written, that every
// other disk can be wiped (--wipe-other-disks): a busy one fails the run
// with nothing written.
func wipePlan(root hostroot.Root, chosen *report.Disk, r *report.Report) ([]blockdev.Info, error) {
	others, skipped, err := blockdev.Others(root, chosen)
	for _, s := range skipped {
		r.Warnings = append(r.Warnings, s.Path+": "+s.Reason)
	}
	return others, err
}

// wipeOthers erases the old signatures of every other disk, after the
// image is verified: a failed write leaves them as they were.
func wipeOthers(ctx context.Context, root hostroot.Root, others []blockdev.Info, r *report.Report) error {
	for _, d := range others {
		res, err := wipe.Disk(ctx, root.Dev(d.Path), d.SizeBytes, d.LogicalSectorSize)
		if err != nil {
			return fmt.Errorf("wiping %s: %w", d.Path, err)
		}
		for i := range r.Disks {
			if r.Disks[i].Name == d.Name {
				r.Disks[i].Wiped = true
			}
		}
		r.Warnings = append(r.Warnings, fmt.Sprintf("%s wiped: %d range(s), %d bytes zeroed, %d old partition(s)", d.Path, res.Ranges, res.Bytes, res.OldPartitions))
	}
	return nil
}

// wipeCode maps a failure of --wipe-other-disks to its report code.
func wipeCode(ctx context.Context, err error) string {
	switch {
	case ctx.Err() != nil:
		return report.CodeInterrupted
	case errors.Is(err, blockdev.ErrBusy), errors.Is(err, wipe.ErrBusy):
		return report.CodeDiskBusy
	case errors.Is(err, blockdev.ErrUnsuitable):
		return report.CodeInvalidArgument
	}
	return report.CodeWipeFailed
}
