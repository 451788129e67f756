// Package blockdev finds and describes disks from /sys/block and chooses the
// install disk the way a careful operator would (see Select). It reads only
// sysfs and /proc: opening and writing the disk is imager/diskwrite's job.
package blockdev

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// Sentinel errors, mapped to report codes by the command.
var (
	ErrNotFound   = errors.New("disk not found")
	ErrBusy       = errors.New("disk in use")
	ErrUnsuitable = errors.New("disk unsuitable")
	ErrTooSmall   = errors.New("disk too small")
)

// Info is everything sysfs says about one disk.
type Info struct {
	report.Disk
	Removable  bool
	ReadOnly   bool
	USB        bool
	Virtual    bool     // loop, ram, zram, rom, dm, md, nbd
	Holders    []string // devices stacked on the disk or its partitions (md, dm)
	Mounts     []string // "/dev/sda1 on /mnt"
	Swap       []string
	RescueRoot bool // the running system's / lives on it
	InSysfs    bool
}

var virtualPrefixes = []string{"loop", "ram", "zram", "sr", "fd", "nbd", "dm-", "md", "rbd"}

// List describes every disk in /sys/block, sorted by name.
func List(root hostroot.Root) ([]Info, error) {
	entries, err := os.ReadDir(root.Sys("block"))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", root.Sys("block"), err)
	}
	mounts := readMounts(root)
	swaps := readSwaps(root)
	var out []Info
	for _, e := range entries {
		out = append(out, describe(root, e.Name(), mounts, swaps))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

type mount struct{ source, target string }

func readMounts(root hostroot.Root) []mount {
	for _, p := range []string{root.Proc("self", "mounts"), root.Proc("mounts")} {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		var ms []mount
		s := bufio.NewScanner(f)
		for s.Scan() {
			fields := strings.Fields(s.Text())
			if len(fields) >= 2 {
				ms = append(ms, mount{unescape(fields[0]), unescape(fields[1])})
			}
		}
		f.Close()
		return ms
	}
	return nil
}

// unescape undoes the octal escapes of /proc/mounts (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func readSwaps(root hostroot.Root) []string {
	f, err := os.Open(root.Proc("swaps"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 0 && strings.HasPrefix(fields[0], "/dev/") {
			out = append(out, fields[0])
		}
	}
	return out
}

// devName turns a mount source into a kernel device name ("" if none):
// /dev/sda1 -> sda1, and on a real host /dev/disk/by-uuid/... via its link.
func devName(root hostroot.Root, src string) string {
	if !strings.HasPrefix(src, "/dev/") {
		return ""
	}
	if !root.Fake() {
		if p, err := filepath.EvalSymlinks(src); err == nil {
			src = p
		}
	}
	return filepath.Base(src)
}

func readInt(path string) (int64, bool) {
	v, err := strconv.ParseInt(hostroot.ReadString(path), 10, 64)
	return v, err == nil
}

func describe(root hostroot.Root, name string, mounts []mount, swaps []string) Info {
	sys := func(elem ...string) string { return root.Sys(append([]string{"block", name}, elem...)...) }
	in := Info{InSysfs: true}
	in.Name = name
	in.Path = "/dev/" + name
	if sectors, ok := readInt(sys("size")); ok {
		in.SizeBytes = sectors * 512 // sysfs counts 512-byte units whatever the sector size
	}
	in.LogicalSectorSize = 512
	if v, ok := readInt(sys("queue", "logical_block_size")); ok && v > 0 {
		in.LogicalSectorSize = int(v)
	}
	in.Rotational = hostroot.ReadString(sys("queue", "rotational")) == "1"
	in.Removable = hostroot.ReadString(sys("removable")) == "1"
	in.ReadOnly = hostroot.ReadString(sys("ro")) == "1"
	in.Model = strings.Join(strings.Fields(hostroot.ReadString(sys("device", "vendor"))+" "+hostroot.ReadString(sys("device", "model"))), " ")
	in.Serial = hostroot.ReadString(sys("device", "serial"))
	if in.Serial == "" {
		if b, err := os.ReadFile(sys("device", "vpd_pg80")); err == nil && len(b) > 4 {
			in.Serial = strings.TrimSpace(string(b[4:])) // SCSI unit serial number page
		}
	}
	in.WWID = firstNonEmpty(hostroot.ReadString(sys("wwid")), hostroot.ReadString(sys("device", "wwid")))
	for _, p := range virtualPrefixes {
		if strings.HasPrefix(name, p) {
			in.Virtual = true
		}
	}
	if hostroot.ReadString(sys("device", "type")) == "5" { // SCSI CD/DVD
		in.Virtual = true
	}
	// The sysfs path of the disk shows the bus it hangs off.
	busPath := ""
	for _, p := range []string{sys(), sys("device")} {
		if rp, err := filepath.EvalSymlinks(p); err == nil {
			busPath += rp + " "
		}
	}
	in.USB = strings.Contains(busPath, "/usb")
	switch {
	case strings.HasPrefix(name, "nvme"):
		in.Transport = "nvme"
	case strings.HasPrefix(name, "vd"):
		in.Transport = "virtio"
	case in.USB:
		in.Transport = "usb"
	case strings.Contains(busPath, "/ata"):
		in.Transport = "sata"
	case strings.HasPrefix(name, "sd"):
		in.Transport = "scsi"
	}
	// The disk itself and its partitions, for holders and mounts.
	names := map[string]bool{name: true}
	if ents, err := os.ReadDir(sys()); err == nil {
		for _, e := range ents {
			if _, err := os.Stat(sys(e.Name(), "partition")); err == nil {
				names[e.Name()] = true
			}
		}
	}
	for n := range names {
		dir := sys()
		if n != name {
			dir = sys(n)
		}
		if hs, err := os.ReadDir(filepath.Join(dir, "holders")); err == nil {
			for _, h := range hs {
				in.Holders = append(in.Holders, h.Name())
			}
		}
	}
	sort.Strings(in.Holders)
	for _, m := range mounts {
		if n := devName(root, m.source); n != "" && names[n] {
			in.Mounts = append(in.Mounts, m.source+" on "+m.target)
			if m.target == "/" {
				in.RescueRoot = true
			}
		}
	}
	for _, s := range swaps {
		if n := devName(root, s); names[n] {
			in.Swap = append(in.Swap, s)
		}
	}
	return in
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// busyReason says why writing the disk would hurt a running system, "" if it would not.
func (in Info) busyReason() string {
	switch {
	case in.RescueRoot:
		return "holds the running system's root filesystem (" + strings.Join(in.Mounts, ", ") + ")"
	case len(in.Mounts) > 0:
		return "mounted: " + strings.Join(in.Mounts, ", ")
	case len(in.Swap) > 0:
		return "used as swap: " + strings.Join(in.Swap, ", ")
	case len(in.Holders) > 0:
		return "in use by " + strings.Join(in.Holders, ", ") + " (RAID/LVM/device-mapper holders)"
	}
	return ""
}

// rejectReason applies the --disk auto rules; "" means the disk is a candidate.
func (in Info) rejectReason(minSize int64) string {
	switch {
	case in.Virtual:
		return "virtual, RAM or optical device"
	case in.SizeBytes == 0:
		return "no medium (size 0)"
	case in.ReadOnly:
		return "read-only"
	case in.USB:
		return "USB device"
	case in.Removable:
		return "removable media"
	}
	if r := in.busyReason(); r != "" {
		return r
	}
	if in.SizeBytes < minSize {
		return fmt.Sprintf("too small: %d bytes, the image needs %d", in.SizeBytes, minSize)
	}
	return ""
}

// Select picks the install disk among those List returns: it skips virtual,
// empty, read-only, USB, removable, mounted, swap and held (RAID/LVM) disks
// and the one the running system lives on, and those smaller than minSize;
// then prefers non-rotational disks, then the smallest (the largest when
// minSize <= 1, i.e. the image size is unknown), then the first name.
// Every disk it did not take is listed with the reason.
func Select(root hostroot.Root, minSize int64) (*report.Disk, []report.RejectedDisk, error) {
	all, err := List(root)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	var cands []Info
	var rejected []report.RejectedDisk
	busy, small := 0, 0
	for _, in := range all {
		if r := in.rejectReason(minSize); r != "" {
			// Busy only matters for a disk that would otherwise fit.
			if in.busyReason() != "" && !in.Virtual && in.SizeBytes >= minSize {
				busy++
			}
			if strings.HasPrefix(r, "too small") || (in.SizeBytes > 0 && in.SizeBytes < minSize) {
				small++
			}
			rejected = append(rejected, report.RejectedDisk{Path: in.Path, Reason: r})
			continue
		}
		cands = append(cands, in)
	}
	if len(cands) == 0 {
		err := ErrNotFound
		switch {
		case busy > 0:
			err = ErrBusy
		case small > 0:
			err = ErrTooSmall
		}
		return nil, rejected, fmt.Errorf("%w: no disk is suitable for --disk auto (%d looked at, all rejected: see rejectedDisks)", err, len(all))
	}
	// With the image size known, the smallest disk that fits leaves the big
	// ones for data; unknown, the largest is the one most likely to fit.
	sizeKnown := minSize > 1
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
	pick := cands[0]
	kind := "non-rotational"
	if pick.Rotational {
		kind = "rotational (no non-rotational disk qualifies)"
	}
	rule := "smallest " + kind + " disk that fits"
	order := "non-rotational, then smallest that fits, then name"
	if !sizeKnown {
		rule = "largest " + kind + " disk (image size unknown)"
		order = "non-rotational, then largest, then name"
	}
	pick.Reason = fmt.Sprintf("--disk auto: %s, of %d candidate(s)", rule, len(cands))
	for _, c := range cands[1:] {
		rejected = append(rejected, report.RejectedDisk{Path: c.Path, Reason: "suitable, but " + pick.Path + " ranks first (" + order + ")"})
	}
	d := pick.Disk
	return &d, rejected, nil
}

// Describe checks a disk named with --disk PATH: a block device (described
// from sysfs) or an existing regular file (its size is the capacity). It
// refuses a disk that is mounted, swap, held by RAID/LVM, the running
// system's, or read-only; unlike auto it accepts removable and USB disks,
// since the operator named them.
func Describe(root hostroot.Root, path string) (*report.Disk, error) {
	open := root.Dev(path)
	st, err := os.Stat(open)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("%w: %s does not exist", ErrNotFound, path)
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrNotFound, path, err)
	}
	name := filepath.Base(filepath.Clean(path))
	isDev := st.Mode()&os.ModeDevice != 0
	_, sysErr := os.Stat(root.Sys("block", name))
	inSys := sysErr == nil && (isDev || strings.HasPrefix(filepath.Clean(path), "/dev/"))
	if !isDev && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is neither a block device nor a regular file", ErrUnsuitable, path)
	}
	if isDev && !inSys {
		if _, err := os.Stat(root.Sys("class", "block", name, "partition")); err == nil {
			return nil, fmt.Errorf("%w: %s is a partition; name the whole disk", ErrUnsuitable, path)
		}
	}
	if !inSys {
		d := &report.Disk{Path: path, Name: name, SizeBytes: st.Size(), LogicalSectorSize: 512, Transport: "file",
			Reason: "--disk names a regular file"}
		return d, nil
	}
	in := describe(root, name, readMounts(root), readSwaps(root))
	in.Path = path
	if r := in.busyReason(); r != "" {
		return nil, fmt.Errorf("%w: %s %s", ErrBusy, path, r)
	}
	if in.ReadOnly {
		return nil, fmt.Errorf("%w: %s is read-only", ErrUnsuitable, path)
	}
	if in.Virtual {
		return nil, fmt.Errorf("%w: %s is a virtual, RAM or optical device", ErrUnsuitable, path)
	}
	if st.Mode().IsRegular() && (in.SizeBytes == 0 || st.Size() < in.SizeBytes) {
		// A fake host's disk is a sparse file: never write past its end.
		in.SizeBytes = st.Size()
	}
	if in.SizeBytes == 0 {
		return nil, fmt.Errorf("%w: %s has no medium (size 0)", ErrUnsuitable, path)
	}
	in.Reason = "named with --disk"
	d := in.Disk
	return &d, nil
}
