// Package blockdev finds and describes disks from sysfs and chooses the
// install disk the way a careful operator would (Choose): one rule for every
// subcommand, checks on the device a path resolves to, and the running
// system's disks found by device numbers rather than by the names in
// /proc/mounts. It reads only sysfs, /proc and stat(2): opening and writing
// the disk is imager/diskwrite's job.
package blockdev

import (
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

// Info is everything sysfs and the running system say about one disk.
type Info struct {
	report.Disk // with Removable and ReadOnly
	USB         bool
	Virtual     bool     // loop, ram, zram, optical, nbd, dm, md, rbd
	Holders     []string // devices stacked on the disk or its partitions (md, dm)
	// Uses says what the running system uses the disk for ("/dev/sda1
	// mounted on /boot", swap, the backing file of a mounted loop device).
	Uses []string
	// SystemRoot: the running system's / lives on it.
	SystemRoot bool
	Devnum     string // "MAJ:MIN", as sysfs gives it
}

var virtualPrefixes = []string{"loop", "ram", "zram", "sr", "fd", "nbd", "dm-", "md", "rbd"}

// List describes every disk in /sys/block, sorted by name.
func List(root hostroot.Root) ([]Info, error) {
	entries, err := os.ReadDir(root.Sys("block"))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", root.Sys("block"), err)
	}
	use := systemUse(root)
	var out []Info
	for _, e := range entries {
		// NVMe multipath's per-path nodes (nvme0c0n1) are hidden: the
		// namespace (nvme0n1) is the disk.
		if hostroot.ReadString(root.Sys("block", e.Name(), "hidden")) == "1" {
			continue
		}
		out = append(out, describe(root, e.Name(), use))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func readInt(path string) (int64, bool) {
	v, err := strconv.ParseInt(hostroot.ReadString(path), 10, 64)
	return v, err == nil
}

func describe(root hostroot.Root, name string, use usageMap) Info {
	sys := func(elem ...string) string { return root.Sys(append([]string{"block", name}, elem...)...) }
	var in Info
	in.Name = name
	in.Path = "/dev/" + name
	in.Devnum = hostroot.ReadString(sys("dev"))
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
	in.Serial, in.SerialSource = readSerial(sys)
	in.WWID = firstNonEmpty(hostroot.ReadString(sys("wwid")), hostroot.ReadString(sys("device", "wwid")))
	in.BusPath = busPath(root, sys())
	in.Virtual = virtualDisk(name, hostroot.ReadString(sys("device", "type")))
	resolved := resolvedPaths(sys(), sys("device"))
	in.USB = strings.Contains(resolved, "/usb")
	in.Transport = transport(name, in.USB, resolved)
	in.Holders = holders(sys)
	if u := use[name]; u != nil {
		in.Uses, in.SystemRoot = u.what, u.root
	}
	return in
}

// readSerial is the disk's serial number and where it came from: sysfs's serial attribute, else
// the SCSI unit serial number page (VPD 0x80), else none.
func readSerial(sys func(elem ...string) string) (string, string) {
	if s := hostroot.ReadString(sys("device", "serial")); s != "" {
		return s, report.SerialFromSysfs
	}
	b, err := os.ReadFile(sys("device", "vpd_pg80"))
	if err != nil || len(b) <= 4 {
		return "", ""
	}
	if s := strings.TrimSpace(string(b[4:])); s != "" {
		return s, report.SerialFromVPD
	}
	return "", ""
}

// virtualDisk reports whether the disk is no target by nature: a virtual device (by its name's
// prefix) or a SCSI CD/DVD (device type 5).
func virtualDisk(name, scsiType string) bool {
	for _, p := range virtualPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return scsiType == "5"
}

// resolvedPaths joins the real sysfs paths of the disk and its device: they show the bus the
// disk hangs off.
func resolvedPaths(paths ...string) string {
	out := ""
	for _, p := range paths {
		if rp, err := filepath.EvalSymlinks(p); err == nil {
			out += rp + " "
		}
	}
	return out
}

// transport names the disk's bus from its kernel name, first, then from its sysfs path.
func transport(name string, usb bool, resolved string) string {
	switch {
	case strings.HasPrefix(name, "nvme"):
		return "nvme"
	case strings.HasPrefix(name, "vd"):
		return "virtio"
	case strings.HasPrefix(name, "loop"):
		return "loop"
	case usb:
		return "usb"
	case strings.Contains(resolved, "/ata"):
		return "sata"
	case strings.HasPrefix(name, "sd"):
		return "scsi"
	}
	return ""
}

// holders lists, sorted, what holds the disk itself or any of its partitions.
func holders(sys func(elem ...string) string) []string {
	dirs := []string{sys()}
	if ents, err := os.ReadDir(sys()); err == nil {
		for _, e := range ents {
			if _, err := os.Stat(sys(e.Name(), "partition")); err == nil {
				dirs = append(dirs, sys(e.Name()))
			}
		}
	}
	var out []string
	for _, dir := range dirs {
		if hs, err := os.ReadDir(filepath.Join(dir, "holders")); err == nil {
			for _, h := range hs {
				out = append(out, h.Name())
			}
		}
	}
	sort.Strings(out)
	return out
}

// busPath is where the disk hangs off the buses, computed as Talos does
// (go-blockdevice's GetProperties): the device's path under /sys/devices
// without its last two elements (block/sda, nvme0/nvme0n1).
func busPath(root hostroot.Root, sysDir string) string {
	dev, err := filepath.EvalSymlinks(sysDir)
	if err != nil {
		return ""
	}
	devices, err := filepath.EvalSymlinks(root.Sys("devices"))
	if err != nil {
		return ""
	}
	rel, ok := strings.CutPrefix(dev, devices+string(filepath.Separator))
	if !ok {
		return ""
	}
	return filepath.Dir(filepath.Dir("/" + filepath.ToSlash(rel)))
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// busyReason says why writing the disk would hurt the running system, "" if it would not.
func (in Info) busyReason() string {
	uses := in.Uses
	if len(uses) > 4 { // bind mounts of one filesystem can be many
		uses = append(uses[:4:4], fmt.Sprintf("%d more", len(in.Uses)-4))
	}
	switch {
	case in.SystemRoot:
		return "holds the running system's root filesystem (" + strings.Join(uses, "; ") + ")"
	case len(in.Uses) > 0:
		return "used by the running system: " + strings.Join(uses, "; ")
	case len(in.Holders) > 0:
		return "held by " + strings.Join(in.Holders, ", ") + " (RAID/LVM/device-mapper)"
	}
	return ""
}
