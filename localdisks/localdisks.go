// Package localdisks is the local-disk policy of a NodeClass: what Talos does
// with the disks it is not installed on, and what a node gets from them. The
// catalogue lays out an offer's disks with it to predict a node (capacity and
// labels); talosgen lays out the disks em-imager found to render the volume
// documents and the node's labels. One rule, so the prediction and the node
// agree.
//
// Talos has no software RAID: a policy puts EPHEMERAL on one disk, or gives
// each disk to pods on its own; it never stripes disks together.
package localdisks

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/imager/quirks"
)

// Policy says what the non-system disks are for.
type Policy string

const (
	// Unused leaves the other disks as they were delivered; EPHEMERAL is on
	// the system disk.
	Unused Policy = "Unused"
	// Ephemeral puts Talos's EPHEMERAL volume (container images, emptyDir,
	// logs: the node's ephemeral-storage) on the largest non-system disk.
	Ephemeral Policy = "Ephemeral"
	// UserVolumes makes each non-system disk an XFS user volume mounted at
	// /var/mnt/<name>.
	UserVolumes Policy = "UserVolumes"
	// Raw leaves each non-system disk raw (no partition table, no
	// filesystem), for Rook/Ceph, OpenEBS and the like.
	Raw Policy = "Raw"
)

// Policies lists every policy, the default first.
var Policies = []Policy{Unused, Ephemeral, UserVolumes, Raw}

// Parse reads a policy name; "" is Unused.
func Parse(s string) (Policy, error) {
	if s == "" {
		return Unused, nil
	}
	for _, p := range Policies {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("local disk policy %q: want one of %v", s, Policies)
}

// Wipes reports whether the non-system disks are wiped of old signatures
// (partition tables, filesystems, RAID and LVM labels) before Talos first
// boots. Talos provisions a volume only on a blank disk or one with a GPT
// and room, and locates EPHEMERAL and user volumes by partition label on any
// disk, so a previous tenant's leftovers would be refused or, worse, used.
// Unused keeps today's behaviour: the disks are not touched.
func (p Policy) Wipes() bool { return p != Unused && p != "" }

// Labels every node carries (registered as well-known by the catalogue, so
// NodePools and pods may select on them).
const (
	labelDomain = "karpenter-scaleway-em.io"
	// LabelPolicy is the NodeClass's policy (Unused, Ephemeral, UserVolumes, Raw).
	LabelPolicy = labelDomain + "/local-disks"
	// LabelDataDiskCount counts the disks given to pods: user volumes under
	// UserVolumes, raw disks under Raw, 0 otherwise.
	LabelDataDiskCount = labelDomain + "/data-disk-count"
	// LabelUserVolumePrefix + a volume's name holds its size in GB (10^9
	// bytes), on the Node only: names depend on the disks found.
	LabelUserVolumePrefix = labelDomain + "/user-volume-"
)

// VolumeNamePrefix + an index names a user volume (data0, data1...): its
// Talos partition label is u-<name>, its mount /var/mnt/<name>.
const VolumeNamePrefix = "data"

// MountPath is where Talos mounts a user volume.
func MountPath(name string) string { return constants.UserVolumeMountPoint + "/" + name }

// Disk is one disk as the layout sees it.
type Disk struct {
	SizeBytes  int64
	Rotational bool
	// Key orders disks of equal size (a stable identity: em-imager's WWID,
	// serial or bus path); the catalogue, which has none, leaves it empty.
	Key string
}

// Volume is one user volume.
type Volume struct {
	Name string
	Disk int // index into the data disks
}

// Layout is what a policy makes of a machine's data disks (every disk but
// the system one that a node may use).
type Layout struct {
	Policy Policy
	// EphemeralDisk is the data disk holding EPHEMERAL, -1 for the system disk.
	EphemeralDisk int
	// Volumes are the user volumes (UserVolumes), data0 first.
	Volumes []Volume
	// Raw are the data disks left raw (Raw).
	Raw []int
}

// Plan lays out the data disks under p. Disks are taken largest first (then
// by Key), so EPHEMERAL gets the largest one and data0 is the largest user
// volume.
func Plan(p Policy, data []Disk) Layout {
	l := Layout{Policy: p, EphemeralDisk: -1}
	order := make([]int, len(data))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if c := cmp.Compare(data[b].SizeBytes, data[a].SizeBytes); c != 0 {
			return c
		}
		return cmp.Compare(data[a].Key, data[b].Key)
	})
	switch p {
	case Ephemeral:
		if len(order) > 0 {
			l.EphemeralDisk = order[0]
		}
	case UserVolumes:
		for i, d := range order {
			l.Volumes = append(l.Volumes, Volume{Name: VolumeNamePrefix + strconv.Itoa(i), Disk: d})
		}
	case Raw:
		l.Raw = order
	}
	return l
}

// DataDiskCount is the value of LabelDataDiskCount.
func (l Layout) DataDiskCount() int { return len(l.Volumes) + len(l.Raw) }

// Labels are the layout's node labels; with sizes, one per user volume too
// (the Node's labels; the catalogue predicts the first two only).
func (l Layout) Labels(data []Disk, withVolumes bool) map[string]string {
	out := map[string]string{
		LabelPolicy:        string(l.Policy),
		LabelDataDiskCount: strconv.Itoa(l.DataDiskCount()),
	}
	if withVolumes {
		for _, v := range l.Volumes {
			out[LabelUserVolumePrefix+v.Name] = strconv.FormatInt(data[v.Disk].SizeBytes/1e9, 10)
		}
	}
	return out
}

// SystemDisk is the disk em-imager's --disk auto takes when every disk fits
// the image: a non-rotational one if any, the smallest, the first of equal
// ones (em-imager breaks that tie by kernel name, which the catalogue does
// not know; equal disks give equal predictions).
func SystemDisk(disks []Disk) int {
	best := -1
	for i, d := range disks {
		if best < 0 {
			best = i
			continue
		}
		b := disks[best]
		if d.Rotational != b.Rotational {
			if !d.Rotational {
				best = i
			}
			continue
		}
		if d.SizeBytes < b.SizeBytes {
			best = i
		}
	}
	return best
}

// Estimates of what Talos and mkfs.xfs make of a disk. They are what the
// catalogue predicts until a node of the offer reports its capacity
// (controller/capacity), and what the simulated kubelet reports.
const (
	// gptOverhead: the first partition starts at 1 MiB; the backup GPT and
	// the 1 MiB alignment of the end take up to another MiB.
	gptOverhead = 2 << 20
	xfsBlock    = 4096
	// mkfs.xfs sizes an internal log at 1/2048 of the filesystem, at least
	// 64 MiB and at most 2 GiB; statfs (what kubelet reports) leaves it out.
	xfsMinLog = 64 << 20
	xfsMaxLog = 2 << 30
)

// SystemPartitionsBytes is what Talos 1.12 keeps on the install disk before
// EPHEMERAL: the EFI partition of a UKI image (EFI, BIOS and BOOT sizes of
// the GRUB layout together), META and STATE (machinery's imager/quirks).
func SystemPartitionsBytes() int64 {
	ps := quirks.New("v1.12.0").PartitionSizes()
	return int64(ps.UKIEFISize() + ps.METASize() + ps.StateSize())
}

// FilesystemBytes is the capacity of an XFS filesystem made on partition
// bytes: what kubelet reports as ephemeral-storage when EPHEMERAL is on it.
func FilesystemBytes(partition int64) int64 {
	blocks := partition / xfsBlock
	log := min(max(partition/2048/xfsBlock*xfsBlock, xfsMinLog), xfsMaxLog)
	return max(blocks*xfsBlock-log, 0)
}

// EphemeralBytes is the ephemeral-storage capacity of a node: the XFS
// filesystem of an EPHEMERAL partition that spans the free space of its disk.
func EphemeralBytes(diskBytes int64, systemDisk bool) int64 {
	free := diskBytes - gptOverhead
	if systemDisk {
		free -= SystemPartitionsBytes()
	}
	return FilesystemBytes(max(free, 0))
}

// EphemeralPlacement names where EPHEMERAL lives, for keying measured
// capacities: "system", or "data" (the largest data disk).
func (l Layout) EphemeralPlacement() string {
	if l.EphemeralDisk < 0 {
		return "system"
	}
	return "data"
}

// Machine is a machine's disks laid out under a policy.
type Machine struct {
	Disks  []Disk
	System int    // index of the system disk in Disks
	Data   []Disk // every other disk, in Disks order
	Layout Layout
}

// Lay lays out disks whose system disk is disks[system].
func Lay(p Policy, disks []Disk, system int) Machine {
	m := Machine{Disks: disks, System: system}
	for i, d := range disks {
		if i != system {
			m.Data = append(m.Data, d)
		}
	}
	m.Layout = Plan(p, m.Data)
	return m
}

// EphemeralBytes is the node's ephemeral-storage capacity (see the
// package-level EphemeralBytes); 0 for a machine without disks.
func (m Machine) EphemeralBytes() int64 {
	switch {
	case m.Layout.EphemeralDisk >= 0:
		return EphemeralBytes(m.Data[m.Layout.EphemeralDisk].SizeBytes, false)
	case m.System >= 0 && m.System < len(m.Disks):
		return EphemeralBytes(m.Disks[m.System].SizeBytes, true)
	}
	return 0
}
