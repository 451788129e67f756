package blockdev

import (
	"fmt"
	"strings"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// Disks describes every disk of the host for the report, virtual devices
// left out.
func Disks(root hostroot.Root) ([]report.Disk, error) {
	all, err := List(root)
	if err != nil {
		return nil, err
	}
	var out []report.Disk
	for _, in := range all {
		if !in.Virtual {
			out = append(out, in.Disk)
		}
	}
	return out, nil
}

// Others lists the disks besides chosen (the install disk) that hold data a
// node could use and so are wiped by write --wipe-other-disks: every whole
// disk that is not virtual, removable, USB, read-only or empty (those are
// returned in skipped, with the reason). A disk the running system uses, or
// that RAID/LVM holds, is an ErrBusy error naming it: wiping under it would
// break the running system, and leaving it would leave old signatures for
// Talos to trip on. chosen must be one of the host's disks, never a file.
func Others(root hostroot.Root, chosen *report.Disk) (others []Info, skipped []report.RejectedDisk, err error) {
	if chosen == nil || chosen.Transport == "file" {
		return nil, nil, fmt.Errorf("%w: wiping the other disks needs --disk to be one of this host's disks, not a file", ErrUnsuitable)
	}
	return dataDisks(root, chosen.Name, "wiped")
}

// All lists every disk of the host that holds data a node could use, as
// Others does for the disks besides the install disk: what erase
// --all-disks erases. A busy disk is an ErrBusy error naming it.
func All(root hostroot.Root) (disks []Info, skipped []report.RejectedDisk, err error) {
	return dataDisks(root, "", "erased")
}

// dataDisks is Others and All: every whole disk but skip (a kernel name)
// that is not virtual, removable, USB, read-only or empty.
func dataDisks(root hostroot.Root, skip, verb string) (others []Info, skipped []report.RejectedDisk, err error) {
	all, err := List(root)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	var busy []string
	for _, in := range all {
		if in.Name == skip {
			continue
		}
		if in.Virtual {
			continue // loop, RAM, dm, md: never a disk of its own
		}
		if reason := unfitReason(in); reason != "" {
			skipped = append(skipped, report.RejectedDisk{Path: in.Path, Reason: "not " + verb + ": " + reason})
			continue
		}
		if r := in.busyReason(); r != "" {
			busy = append(busy, in.Path+" "+r)
			continue
		}
		if p := nodeProblem(root, in); p != "" {
			return nil, skipped, fmt.Errorf("%w: %s", ErrNotFound, p)
		}
		others = append(others, in)
	}
	if len(busy) > 0 {
		return nil, skipped, busyError(skip, busy)
	}
	return others, skipped, nil
}

// unfitReason says why a disk is no data disk to wipe: no medium,
// read-only, USB or removable. "" when it is one.
func unfitReason(in Info) string {
	switch {
	case in.SizeBytes == 0:
		return "no medium (size 0)"
	case in.ReadOnly:
		return "read-only"
	case in.USB:
		return "USB device"
	case in.Removable:
		return "removable media"
	}
	return ""
}

// busyError refuses the whole wipe when any disk is in use.
func busyError(skip string, busy []string) error {
	what := "wipe the other disks"
	if skip == "" {
		what = "erase every disk"
	}
	return fmt.Errorf("%w: cannot %s: %s", ErrBusy, what, strings.Join(busy, "; "))
}
