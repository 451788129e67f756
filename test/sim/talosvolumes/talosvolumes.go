// Package talosvolumes plays Talos 1.12's block controllers on a simulated
// machine's disks, so that a wrong disk selector shows up as a node with the
// wrong capacity (or none):
//
//   - Disks reads the disk resources from the machine's fake sysfs the way
//     go-blockdevice reads a real one: the serial from device/serial only (a
//     SATA disk's serial sits in its VPD page, which Talos does not read),
//     the WWID, the bus path, the transport from the SCSI host's driver;
//   - Manage locates, then provisions, EPHEMERAL and the config's user and
//     raw volumes as the volume manager does (internal/app/machined/pkg/
//     controllers/block/internal/volumes: locate.go, disk.go, partition.go):
//     a volume is first looked for by partition label on every disk (so one
//     provisioned at an earlier boot, or a previous tenant's, is found and
//     used whatever the selector says); only a missing one is provisioned,
//     on the first disk its CEL selector (machinery's DiskLocator
//     environment) matches that is blank or has a GPT with room; a disk with
//     another signature (a filesystem, LVM, swap...) is refused. A new
//     partition is written to the disk file's GPT (go-diskfs), so the next
//     boot locates it.
//
// Sizes in the disk resources are the offer's, not the scaled-down files'.
package talosvolumes

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/partition/gpt"
	blockpb "github.com/siderolabs/talos/pkg/machinery/api/resource/definitions/block"
	"github.com/siderolabs/talos/pkg/machinery/cel"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/hardware"
)

// Disk is one disk resource.
type Disk struct {
	Spec *blockpb.DiskSpec
	File string // the file that backs it
	// Index of the disk in the machine's hardware (and offer) order.
	Index int
}

// Disks reads the disks of tree as Talos does; sizes[i] is the offer's size
// of tree.Spec.Disks[i]. Disks come sorted by kernel name, as Talos lists them.
func Disks(tree *hardware.Tree, sizes []int64) ([]Disk, error) {
	root := tree.Sysroot
	var out []Disk
	for i, d := range tree.Spec.Disks {
		sys := filepath.Join(root, "sys", "block", d.Name)
		read := func(elem ...string) string {
			b, _ := os.ReadFile(filepath.Join(append([]string{sys}, elem...)...))
			return string(bytes.TrimSpace(b))
		}
		spec := &blockpb.DiskSpec{
			DevPath:    "/dev/" + d.Name,
			Model:      read("device", "model"),
			Serial:     read("device", "serial"),
			Wwid:       read("wwid"),
			Rotational: read("queue", "rotational") == "1",
			Readonly:   read("ro") == "1",
			Transport:  transport(root, sys, d.Name),
		}
		if spec.Wwid == "" {
			spec.Wwid = read("device", "wwid")
		}
		if link, err := os.Readlink(sys); err == nil {
			// go-blockdevice: the link under /sys/dev/block without its
			// "../../devices" prefix, less the last two elements.
			if _, rel, ok := strings.Cut(link, "devices/"); ok {
				spec.BusPath = filepath.Dir(filepath.Dir("/" + rel))
			}
		}
		if i < len(sizes) {
			spec.Size = uint64(sizes[i])
		}
		if ss, err := strconv.Atoi(read("queue", "logical_block_size")); err == nil {
			spec.SectorSize = uint64(ss)
		}
		out = append(out, Disk{Spec: spec, File: tree.DevicePath(d.Name), Index: i})
	}
	slices.SortFunc(out, func(a, b Disk) int { return strings.Compare(a.Spec.DevPath, b.Spec.DevPath) })
	return out, nil
}

// transport is go-blockdevice's getTransport on the fake tree.
func transport(root, sys, name string) string {
	switch {
	case strings.HasPrefix(name, "nvme"):
		return "nvme"
	case strings.HasPrefix(name, "vd"):
		return "virtio"
	case strings.HasPrefix(name, "mmcblk"):
		return "mmc"
	}
	dev, err := os.Readlink(filepath.Join(sys, "device"))
	if err != nil {
		return ""
	}
	hostStr, _, ok := strings.Cut(filepath.Base(dev), ":")
	if !ok {
		return ""
	}
	if _, err := strconv.Atoi(hostStr); err != nil {
		return ""
	}
	proc, _ := os.ReadFile(filepath.Join(root, "sys", "class", "scsi_host", "host"+hostStr, "proc_name"))
	switch p := strings.TrimSpace(string(proc)); {
	case p == "ahci", p == "sata":
		return "sata"
	case strings.Contains(p, "ata"):
		return "ata"
	}
	return ""
}

// Volume is where one volume ended up.
type Volume struct {
	// Name is EPHEMERAL, or the user/raw volume's name; Label its
	// partition label (EPHEMERAL, u-<name>, r-<name>).
	Name, Label string
	// Disk is the index into the machine's hardware of the disk holding
	// it; -1 when it is missing (Err says why).
	Disk int
	// Provisioned: created at this boot; false: located (an earlier boot's,
	// or a previous tenant's).
	Provisioned bool
	Err         error
}

// Manage locates or provisions EPHEMERAL, then the user and raw volumes of
// cfg, on disks; system is the hardware index of the disk Talos booted from.
func Manage(cfg config.Provider, disks []Disk, system int) (ephemeral Volume, others []Volume) {
	sel := cel.MustExpression(cel.ParseBooleanExpression("system_disk", celenv.DiskLocator()))
	if vc, ok := cfg.Volumes().ByName(constants.EphemeralPartitionLabel); ok {
		if s, ok := vc.Provisioning().DiskSelector().Get(); ok {
			sel = s
		}
	}
	ephemeral = manage(constants.EphemeralPartitionLabel, constants.EphemeralPartitionLabel, sel, disks, system)
	type named struct {
		name, label string
		sel         cel.Expression
		ok          bool
	}
	var vols []named
	for _, u := range cfg.UserVolumeConfigs() {
		s, ok := u.Provisioning().DiskSelector().Get()
		vols = append(vols, named{u.Name(), constants.UserVolumePrefix + u.Name(), s, ok})
	}
	for _, r := range cfg.RawVolumeConfigs() {
		s, ok := r.Provisioning().DiskSelector().Get()
		vols = append(vols, named{r.Name(), constants.RawVolumePrefix + r.Name(), s, ok})
	}
	slices.SortFunc(vols, func(a, b named) int { return strings.Compare(a.label, b.label) })
	for _, v := range vols {
		if !v.ok {
			others = append(others, Volume{Name: v.name, Label: v.label, Disk: -1, Err: errors.New("no disk selector")})
			continue
		}
		others = append(others, manage(v.name, v.label, v.sel, disks, system))
	}
	return ephemeral, others
}

func manage(name, label string, sel cel.Expression, disks []Disk, system int) Volume {
	v := Volume{Name: name, Label: label, Disk: -1}
	for _, d := range disks {
		if hasPartition(d.File, label) {
			v.Disk = d.Index
			return v
		}
	}
	var matched []Disk
	for _, d := range disks {
		if d.Spec.Readonly {
			continue
		}
		ok, err := sel.EvalBool(celenv.DiskLocator(), map[string]any{"disk": d.Spec, "system_disk": d.Index == system})
		if err != nil {
			v.Err = fmt.Errorf("error evaluating disk locator: %w", err)
			return v
		}
		if ok {
			matched = append(matched, d)
		}
	}
	if len(matched) == 0 {
		v.Err = errors.New("no disks matched selector for volume")
		return v
	}
	var space, format int
	for _, d := range matched {
		switch sig := Probe(d.File); sig {
		case "", "gpt":
			if err := addPartition(d.File, label, sig == "gpt"); err != nil {
				if errors.Is(err, errNoSpace) {
					space++
					continue
				}
				v.Err = fmt.Errorf("error creating partition: %w", err)
				return v
			}
			v.Disk, v.Provisioned = d.Index, true
			return v
		default:
			format++
		}
	}
	v.Err = fmt.Errorf("no disks matched for volume (%d matched selector): %d have not enough space, %d have wrong format, 0 have other issues", len(matched), space, format)
	return v
}

var errNoSpace = errors.New("not enough space on disk")

const sector = 512

func openTable(path string) (*os.File, *gpt.Table, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, err
	}
	t, err := gpt.Read(file.New(f, false), sector, sector)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, t, nil
}

func hasPartition(path, label string) bool {
	f, t, err := openTable(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range t.Partitions {
		if p != nil && p.Name == label {
			return true
		}
	}
	return false
}

// addPartition creates a partition named label over the largest free space
// after the existing partitions (a new GPT on a blank disk), 1 MiB aligned.
func addPartition(path, label string, hasGPT bool) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	t := &gpt.Table{LogicalSectorSize: sector, PhysicalSectorSize: sector, ProtectiveMBR: true}
	if hasGPT {
		if t, err = gpt.Read(file.New(f, false), sector, sector); err != nil {
			return err
		}
		// An image's table ends where the image did: Talos grows it to the disk.
		t.Resize(uint64(size))
		t.ProtectiveMBR = false // keep the image's MBR as it is
	}
	const align = (1 << 20) / sector
	start, index := uint64(align), 1
	for _, p := range t.Partitions {
		if p == nil {
			continue
		}
		start = max(start, p.End+1)
		index = max(index, p.Index+1)
	}
	start = (start + align - 1) / align * align
	end := uint64(size/sector) - 34 // the backup entries and header
	if hasGPT {
		end = t.LastDataSector() + 1
	}
	// The file is the disk scaled down (the disk resource has the offer's
	// size): any free sector left after the image and metal-iso stands for
	// the rest of a real disk.
	if start >= end {
		return errNoSpace
	}
	t.Partitions = append(t.Partitions, &gpt.Partition{Index: index, Start: start, End: end - 1, Type: gpt.LinuxFilesystem, Name: label})
	w, err := file.New(f, false).Writable()
	if err != nil {
		return err
	}
	return t.Write(w, size)
}

// Probe names the first signature go-blockdevice's blkid (Talos's probe)
// finds at the start of a disk, "" for a blank one: a GPT, or one of the
// filesystems and labels it knows (xfs, ext, vfat, swap, LVM2, LUKS,
// squashfs, iso9660, bluestore). It has no DOS partition table prober: a
// bare MBR reads as blank.
func Probe(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unreadable"
	}
	defer f.Close()
	b := make([]byte, 64<<10)
	n, _ := f.ReadAt(b, 0)
	b = b[:n]
	for _, s := range signatures {
		if s.match(b) {
			return s.kind
		}
	}
	return ""
}

// magicAt reports whether b holds magic at off.
func magicAt(b []byte, off int, magic string) bool {
	return len(b) >= off+len(magic) && string(b[off:off+len(magic)]) == magic
}

// signatures are the on-disk formats Probe knows, each by the bytes that
// mark it (as blkid reads them), tried in order: the first match names the
// contents.
var signatures = []struct {
	kind  string
	match func(b []byte) bool
}{
	{"gpt", func(b []byte) bool { return magicAt(b, 512, "EFI PART") || magicAt(b, 4096, "EFI PART") }},
	{"xfs", func(b []byte) bool { return magicAt(b, 0, "XFSB") }},
	{"ext", func(b []byte) bool { return len(b) > 0x43a && binary.LittleEndian.Uint16(b[0x438:]) == 0xEF53 }},
	{"luks", func(b []byte) bool { return magicAt(b, 0, "LUKS\xba\xbe") }},
	{"squashfs", func(b []byte) bool { return magicAt(b, 0, "hsqs") }},
	{"bluestore", func(b []byte) bool { return magicAt(b, 0, "bluestore block device") }},
	{"swap", func(b []byte) bool { return magicAt(b, 4086, "SWAPSPACE2") || magicAt(b, 4086, "SWAP-SPACE") }},
	{"iso9660", func(b []byte) bool { return magicAt(b, 32769, "CD001") }},
	{"vfat", func(b []byte) bool {
		return magicAt(b, 510, "\x55\xaa") && (magicAt(b, 54, "FAT") || magicAt(b, 82, "FAT32"))
	}},
	{"lvm2", isLVM2},
}

// isLVM2 looks for an LVM2 label in any of the first four sectors.
func isLVM2(b []byte) bool {
	for s := 0; s < 4; s++ {
		if magicAt(b, s*512, "LABELONE") && magicAt(b, s*512+24, "LVM2 001") {
			return true
		}
	}
	return false
}
