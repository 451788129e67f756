package blockdev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// Request is what a subcommand asks of the disk.
type Request struct {
	// Disk is "auto" (or "") or a path: a block device, a link to one
	// (/dev/disk/by-id/...), or a regular file outside /dev.
	Disk string
	// ImageSize is the raw image size when the caller knows it before
	// fetching anything (the manifest, --image-size); 0 when not. Auto
	// uses nothing else, so the choice never depends on the transport.
	ImageSize int64
	// AllowVirtual lets a named loop, nbd, dm, md or RAM device be used, for
	// an operator who means it. Auto never picks one.
	AllowVirtual bool
}

// Choice is the disk chosen and why; on an error it holds what was found
// (the named disk, the disks auto looked at).
type Choice struct {
	Disk     *report.Disk
	Rejected []report.RejectedDisk
	// OpenPath is where the disk is opened: Disk.Path, under the sysroot
	// for a fake tree.
	OpenPath string
}

// Choose is em-imager's one disk rule, for inspect, write and any other
// subcommand that takes --disk: the same Request gives the same answer.
//
// A named disk is resolved first (symlinks followed, inside the sysroot for
// a fake tree) and every check runs on the device it resolves to: a whole
// disk, not a partition; not used by the running system (mounted, swap,
// holding its root, behind a mounted loop device), no RAID/LVM holders; not
// read-only; not virtual unless AllowVirtual; not smaller than ImageSize.
// Removable and USB disks are accepted, since the operator named them.
//
// Auto looks at every disk in /sys/block and rejects, with the reason, the
// ones the running system uses or RAID/LVM holds, virtual devices, empty,
// read-only, USB and removable ones, and those smaller than ImageSize; it
// prefers non-rotational disks, then the smallest that fits when ImageSize
// is known (the big ones stay free for data), the largest when not, then
// the name.
func Choose(root hostroot.Root, req Request) (Choice, error) {
	if req.Disk == "" || req.Disk == "auto" {
		return chooseAuto(root, req)
	}
	return chooseNamed(root, req)
}

// chooseNamed checks the disk the operator named, in three steps: resolve
// the name to a device node (namedNode), describe the disk behind it
// (namedInfo), and check it can be written (namedProblem, sizeCheck).
func chooseNamed(root hostroot.Root, req Request) (Choice, error) {
	path := req.Disk
	host, open, err := root.ResolveDev(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Choice{}, fmt.Errorf("%w: %s does not exist", ErrNotFound, path)
		}
		return Choice{}, fmt.Errorf("%w: %s: %v", ErrNotFound, path, err)
	}
	named := path
	if host != filepath.Clean(path) {
		named = path + " (" + host + ")"
	}
	c := Choice{OpenPath: open}
	var st unix.Stat_t
	if err := unix.Stat(open, &st); err != nil {
		return c, fmt.Errorf("%w: %s: %v", ErrNotFound, named, err)
	}
	n, file, err := namedNode(root, &st, path, host, named)
	if err != nil {
		return c, err
	}
	if file != nil {
		c.Disk = file
		return c, sizeCheck(file, req.ImageSize)
	}
	if n.partition {
		return c, fmt.Errorf("%w: %s is partition %s of /dev/%s; name the whole disk", ErrUnsuitable, named, n.name, n.disk)
	}
	in := namedInfo(root, n, &st, path, host)
	d := in.Disk
	c.Disk = &d
	if err := namedProblem(in, named, req.AllowVirtual); err != nil {
		return c, err
	}
	return c, sizeCheck(c.Disk, req.ImageSize)
}

// namedNode finds the sysfs node of the device st describes (path, resolved
// to host; named for messages). A regular file outside a fake tree's /dev
// is a disk image, returned as file: its size is the capacity.
func namedNode(root hostroot.Root, st *unix.Stat_t, path, host, named string) (n node, file *report.Disk, err error) {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFBLK:
		n, ok := byDevnum(root, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		if !ok {
			return node{}, nil, fmt.Errorf("%w: %s is block device %d:%d, which sysfs does not list", ErrNotFound, named, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
		return n, nil, nil
	case unix.S_IFREG:
		if !root.Fake() || !strings.HasPrefix(host, "/dev/") {
			d := &report.Disk{Path: host, Name: filepath.Base(host), SizeBytes: st.Size, LogicalSectorSize: 512,
				Transport: "file", Rule: report.RuleNamed, Reason: "--disk names a regular file"}
			if host != filepath.Clean(path) {
				d.Requested = path
			}
			return node{}, d, nil
		}
		// A fake tree's disks are files named like the device.
		n, ok := byName(root, filepath.Base(host))
		if !ok {
			return node{}, nil, fmt.Errorf("%w: %s is no block device the tree's sysfs lists", ErrNotFound, named)
		}
		return n, nil, nil
	}
	return node{}, nil, fmt.Errorf("%w: %s is neither a block device nor a regular file", ErrUnsuitable, named)
}

// namedInfo describes the named disk n, reached by path (resolved to host),
// and says why it was chosen.
func namedInfo(root hostroot.Root, n node, st *unix.Stat_t, path, host string) Info {
	in := describe(root, n.name, systemUse(root))
	in.Path = host
	if host != filepath.Clean(path) {
		in.Requested = path
	}
	if st.Mode&unix.S_IFMT == unix.S_IFREG && (in.SizeBytes == 0 || st.Size < in.SizeBytes) {
		// A fake host's disk is a sparse file: never write past its end.
		in.SizeBytes = st.Size
	}
	in.Rule = report.RuleNamed
	in.Reason = "named with --disk"
	if in.Requested != "" {
		in.Reason = "named with --disk " + in.Requested + ", a link to " + host
	}
	return in
}

// namedProblem says why a named disk cannot be written, nil when it can
// (its size is checked apart). Removable and USB disks pass: the operator
// named them.
func namedProblem(in Info, named string, allowVirtual bool) error {
	switch r := in.busyReason(); {
	case r != "":
		return fmt.Errorf("%w: %s %s", ErrBusy, named, r)
	case in.Virtual && !allowVirtual:
		return fmt.Errorf("%w: %s is a virtual, RAM or optical device (pass --allow-virtual to write it on purpose)", ErrUnsuitable, named)
	case in.ReadOnly:
		return fmt.Errorf("%w: %s is read-only", ErrUnsuitable, named)
	case in.SizeBytes == 0:
		return fmt.Errorf("%w: %s has no medium (size 0)", ErrUnsuitable, named)
	}
	return nil
}

func sizeCheck(d *report.Disk, imageSize int64) error {
	if imageSize > 0 && d.SizeBytes < imageSize {
		return fmt.Errorf("%w: %s has %d bytes, the image needs %d", ErrTooSmall, d.Path, d.SizeBytes, imageSize)
	}
	return nil
}

// autoReject applies the --disk auto rules; "" means the disk is a candidate.
// What the running system uses comes first: it is what an operator most
// needs to read.
func (in Info) autoReject(imageSize int64) string {
	if r := in.busyReason(); r != "" {
		return r
	}
	if in.Virtual {
		return "virtual, RAM or optical device (auto never picks one)"
	}
	if r := unfitReason(in); r != "" {
		return r
	}
	if in.SizeBytes < imageSize {
		return fmt.Sprintf("too small: %d bytes, the image needs %d", in.SizeBytes, imageSize)
	}
	return ""
}

// nodeProblem checks that the device node auto would open is the disk sysfs
// described: it exists and, when it is a real node, has the disk's numbers.
func nodeProblem(root hostroot.Root, in Info) string {
	var st unix.Stat_t
	if err := unix.Stat(root.Dev(in.Path), &st); err != nil {
		return "no device node " + in.Path + ": " + err.Error()
	}
	if st.Mode&unix.S_IFMT == unix.S_IFBLK {
		if got := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)); got != in.Devnum {
			return fmt.Sprintf("device node %s is %s, but sysfs says %s is %s", in.Path, got, in.Name, in.Devnum)
		}
	}
	return ""
}

func chooseAuto(root hostroot.Root, req Request) (Choice, error) {
	all, err := List(root)
	if err != nil {
		return Choice{}, fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	var c Choice
	cands, rejected, why := screen(root, all, req.ImageSize)
	c.Rejected = rejected
	if len(cands) == 0 {
		return c, fmt.Errorf("%w: no disk is suitable for --disk auto (%d looked at, all rejected: see rejectedDisks)", why, len(all))
	}
	sizeKnown := req.ImageSize > 0
	rank(cands, sizeKnown)
	pick := cands[0]
	pick.Rule, pick.Reason = autoReason(pick.Rotational, req.ImageSize, len(cands))
	order := "non-rotational, then largest, then name"
	if sizeKnown {
		order = "non-rotational, then smallest that fits, then name"
	}
	for _, o := range cands[1:] {
		c.Rejected = append(c.Rejected, report.RejectedDisk{Path: o.Path, Reason: "suitable, but " + pick.Path + " ranks first (" + order + ")"})
	}
	d := pick.Disk
	c.Disk = &d
	c.OpenPath = root.Dev(d.Path)
	return c, nil
}

// screen splits the disks into candidates for --disk auto and rejected ones (with their
// reasons), and names the error to give if none is left: ErrBusy when a disk that could be a
// target is busy, else ErrTooSmall when one is too small, else ErrNotFound.
func screen(root hostroot.Root, all []Info, imageSize int64) ([]Info, []report.RejectedDisk, error) {
	var cands []Info
	var rejected []report.RejectedDisk
	busy, small := 0, 0
	for _, in := range all {
		r := in.autoReject(imageSize)
		if r == "" {
			r = nodeProblem(root, in)
		}
		if r == "" {
			cands = append(cands, in)
			continue
		}
		// Busy or small matter for the error only on a disk that could be a target.
		if !in.Virtual && in.SizeBytes > 0 {
			if in.busyReason() != "" && in.SizeBytes >= imageSize {
				busy++
			} else if in.SizeBytes < imageSize {
				small++
			}
		}
		rejected = append(rejected, report.RejectedDisk{Path: in.Path, Reason: r})
	}
	return cands, rejected, noneLeftError(busy, small)
}

// noneLeftError is the error when no disk qualifies: busy disks explain it before small ones.
func noneLeftError(busy, small int) error {
	switch {
	case busy > 0:
		return ErrBusy
	case small > 0:
		return ErrTooSmall
	}
	return ErrNotFound
}

// rank orders the candidates best first: non-rotational, then the smallest that fits when the
// image's size is known (the largest otherwise), then by name.
func rank(cands []Info, sizeKnown bool) {
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.Rotational != b.Rotational {
			return !a.Rotational
		}
		if a.SizeBytes != b.SizeBytes {
			return (a.SizeBytes < b.SizeBytes) == sizeKnown
		}
		return a.Name < b.Name
	})
}

// autoReason is the rule and the sentence the report gives for the disk --disk auto picked.
func autoReason(rotational bool, imageSize int64, candidates int) (string, string) {
	kind := "non-rotational disk"
	if rotational {
		kind = "rotational disk (no non-rotational disk qualifies)"
	}
	if imageSize > 0 {
		return report.RuleAutoSmallestFit, fmt.Sprintf("--disk auto: the smallest %s that fits the %d-byte image, of %d candidate(s)", kind, imageSize, candidates)
	}
	return report.RuleAutoLargest, fmt.Sprintf("--disk auto: the largest %s (image size not given), of %d candidate(s)", kind, candidates)
}
