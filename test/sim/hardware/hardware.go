// Package hardware lays out the fake hardware of one simulated Elastic Metal
// server in a directory: file-backed disks and a fake sysroot (/sys, /proc,
// /dev) shaped like a Linux rescue system's, which em-imager reads through
// EM_IMAGER_SYSROOT / --sysroot.
//
// Layout under Tree.Sysroot (paths as the kernel shows them; symlinks as in a
// real sysfs, so readers that resolve links and readers that do not both work):
//
//	dev/<disk>                          the disk itself: a sparse regular file
//	sys/block/<disk> -> ../devices/<pci path>/.../<disk>
//	  size                              512-byte sectors
//	  ro, removable                     0/1
//	  queue/{logical_block_size,physical_block_size,hw_sector_size,rotational}
//	  device/{model,serial,firmware_rev,transport}   (nvme: device -> the controller)
//	  device/{vendor,model,vpd_pg80,wwid,rev}        (sata: device -> the SCSI device;
//	                                      no serial file, as the kernel shows SCSI disks)
//	  wwid, dev, holders/, slaves/
//	sys/class/block/<disk>             same target as sys/block/<disk>
//	sys/class/net/<nic> -> ../../devices/<pci path>/net/<nic>
//	  address, permaddr (fake-tree only: the permanent MAC), addr_assign_type, operstate, carrier, speed, mtu, type, ifindex
//	  device -> the PCI function, whose driver -> sys/bus/pci/drivers/<driver>
//	sys/class/net/lo -> ../../devices/virtual/net/lo   (no device link)
//	proc/mounts                         the rescue system's mounts (never a data disk)
//	proc/net/route                      the default route via the first NIC
//
// A loop device (loop0, the rescue system's squashfs, mounted read-only) is
// there too, as in a real rescue system, so that disk auto-selection has
// something to refuse.
//
// Disks come from the offer (FromOffer): NVMe disks are nvme0n1, nvme1n1...,
// SSD/HDD (SATA) disks are sda, sdb..., MMC is mmcblk0; their sizes are the
// offer's divided by a factor so tests stay small (sparse files, so even
// factor 1 costs no space until written).
//
//	spec, err := hardware.FromOffer(offer, macs, serverID, 1000)
//	tree, err := hardware.Create(dir, spec) // EM_IMAGER_SYSROOT=tree.Sysroot
//
// Tests: go test -count=1 -race ./test/sim/hardware/
package hardware

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog/snapshot"
)

// Disk is one block device.
type Disk struct {
	Name              string // kernel name: nvme0n1, sda, mmcblk0
	SizeBytes         int64
	Model, Serial     string
	WWID              string
	Rotational        bool
	Removable         bool
	ReadOnly          bool
	LogicalBlockSize  int
	PhysicalBlockSize int
	Transport         string // nvme, sata, mmc
}

// NIC is one physical network interface.
type NIC struct {
	Name       string // eth0, eth1...
	MAC        string // permanent MAC, lower case
	Driver     string
	PCIAddress string
	SpeedMbps  int
	LinkUp     bool
	// DefaultRoute: the rescue system's default route goes through it.
	DefaultRoute bool
}

// Mount is one line of /proc/mounts.
type Mount struct {
	Device, Point, FSType, Options string
}

// Spec is the hardware of one machine.
type Spec struct {
	Disks []Disk
	NICs  []NIC
	// ExtraMounts are added to the rescue system's own mounts, e.g. to
	// simulate a data disk that is mounted (busy).
	ExtraMounts []Mount
}

// Tree is a machine's hardware laid out on the filesystem.
type Tree struct {
	Dir     string // the machine's directory
	Sysroot string // Dir/sysroot: EM_IMAGER_SYSROOT
	Spec    Spec
}

// DevicePath is the file that backs the disk named name.
func (t *Tree) DevicePath(name string) string {
	return filepath.Join(t.Sysroot, "dev", name)
}

// InstallDisk is the disk the firmware boots from: the first one of the offer
// (the one em-imager's auto-selection picks on a fresh machine).
func (t *Tree) InstallDisk() Disk { return t.Spec.Disks[0] }

// FromOffer derives a machine's hardware from its offer and NIC MACs.
// Disk sizes are divided by sizeDivisor (>= 1) and rounded down to whole MiB,
// at least 64 MiB. serverID seeds serial numbers.
func FromOffer(offer *baremetal.Offer, macs []string, serverID string, sizeDivisor int64) (Spec, error) {
	if err := checkFromOffer(offer, macs, sizeDivisor); err != nil {
		return Spec{}, err
	}
	var s Spec
	var names diskNames
	for i, d := range offer.Disks {
		if d == nil {
			return Spec{}, fmt.Errorf("offer %q: disk %d is null", offer.Name, i)
		}
		size := int64(d.Capacity) / sizeDivisor / (1 << 20) * (1 << 20)
		size = max(size, 64<<20)
		h := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", serverID, i)))
		serial := strings.ToUpper(fmt.Sprintf("%x", h[:7]))
		disk := Disk{SizeBytes: size, LogicalBlockSize: 512, PhysicalBlockSize: 4096, Serial: serial}
		if !names.describe(&disk, d.Type, h) {
			return Spec{}, fmt.Errorf("offer %q: disk %d has unknown type %q", offer.Name, i, d.Type)
		}
		s.Disks = append(s.Disks, disk)
	}
	driver, speed := nicDriver(offer.Bandwidth)
	for i, mac := range macs {
		s.NICs = append(s.NICs, NIC{
			Name:         fmt.Sprintf("eth%d", i),
			MAC:          strings.ToLower(mac),
			Driver:       driver,
			PCIAddress:   fmt.Sprintf("0000:%02x:00.0", 1+i),
			SpeedMbps:    speed,
			LinkUp:       i == 0, // the private-network NIC has no link until that option is enabled
			DefaultRoute: i == 0,
		})
	}
	return s, nil
}

// checkFromOffer refuses inputs no machine can be made from.
func checkFromOffer(offer *baremetal.Offer, macs []string, sizeDivisor int64) error {
	if offer == nil {
		return errors.New("offer: missing")
	}
	if len(offer.Disks) == 0 {
		return fmt.Errorf("offer %q: has no disks", offer.Name)
	}
	if len(macs) == 0 {
		return errors.New("macs: a machine needs at least one NIC")
	}
	if sizeDivisor < 1 {
		return fmt.Errorf("disk size divisor %d: must be at least 1", sizeDivisor)
	}
	return nil
}

// diskNames counts the disks of each bus seen so far, so each disk gets the
// kernel name Linux would give it (nvme0n1, sda, mmcblk0, ...).
type diskNames struct{ nvme, sata, mmc int }

// describe fills in the kernel name, model, transport and WWID a disk of
// the offer's type has, from h (the disk's hash); false for a type the
// simulator does not know.
func (n *diskNames) describe(disk *Disk, diskType string, h [32]byte) bool {
	switch strings.ToLower(diskType) {
	case "nvme":
		disk.Name = fmt.Sprintf("nvme%dn1", n.nvme)
		n.nvme++
		disk.Model = "SAMSUNG MZQL21T9HCJR-00A07"
		disk.Transport = "nvme"
		disk.WWID = fmt.Sprintf("eui.%x", h[8:16])
	case "hdd":
		disk.Name = "sd" + string(rune('a'+n.sata))
		n.sata++
		disk.Model = "TOSHIBA MG08ADA400N"
		disk.Transport = "sata"
		disk.Rotational = true
		disk.WWID = fmt.Sprintf("naa.5%x", h[8:15])
	case "ssd", "sata":
		disk.Name = "sd" + string(rune('a'+n.sata))
		n.sata++
		disk.Model = "SAMSUNG MZ7L3480HCHQ-00A07"
		disk.Transport = "sata"
		disk.WWID = fmt.Sprintf("naa.5%x", h[8:15])
	case "mmc", "emmc":
		disk.Name = fmt.Sprintf("mmcblk%d", n.mmc)
		n.mmc++
		disk.Model = "DG4128"
		disk.Transport = "mmc"
		disk.PhysicalBlockSize = 512
	default:
		return false
	}
	return true
}

// nicDriver is the NIC driver and link speed a server with the offer's
// bandwidth (bits per second) has: 1G igb, 10G ixgbe, 25G mlx5.
func nicDriver(bw uint64) (string, int) {
	switch {
	case bw > 10_000_000_000:
		return "mlx5_core", 25000
	case bw > 1_000_000_000:
		return "ixgbe", 10000
	}
	return "igb", 1000
}

// Create lays out spec under dir. It is idempotent: disks that exist keep
// their contents (a reboot does not wipe disks), everything else is rewritten.
func Create(dir string, spec Spec) (*Tree, error) {
	if len(spec.Disks) == 0 {
		return nil, errors.New("spec: no disks")
	}
	t := &Tree{Dir: dir, Sysroot: filepath.Join(dir, "sysroot"), Spec: spec}
	for _, sub := range []string{"sys", "proc"} {
		if err := os.RemoveAll(filepath.Join(t.Sysroot, sub)); err != nil {
			return nil, err
		}
	}
	w := &writer{root: t.Sysroot}
	w.mkdir("dev")
	for i, d := range spec.Disks {
		if err := createDiskFile(t.DevicePath(d.Name), d.SizeBytes); err != nil {
			return nil, err
		}
		w.disk(i, d)
	}
	w.loopDevice()
	for i, n := range spec.NICs {
		w.nic(i, n)
	}
	w.loopback()
	w.procMounts(spec)
	w.procRoute(spec)
	if w.err != nil {
		return nil, w.err
	}
	return t, nil
}

func createDiskFile(path string, size int64) error {
	if st, err := os.Stat(path); err == nil {
		if st.Size() == size {
			return nil
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writer collects the first error so the layout code reads straight.
type writer struct {
	root string
	err  error
}

func (w *writer) mkdir(rel string) {
	if w.err == nil {
		w.err = os.MkdirAll(filepath.Join(w.root, rel), 0o755)
	}
}

func (w *writer) file(rel, content string) {
	w.mkdir(filepath.Dir(rel))
	if w.err == nil {
		w.err = os.WriteFile(filepath.Join(w.root, rel), []byte(content+"\n"), 0o644)
	}
}

func (w *writer) raw(rel string, content []byte) {
	w.mkdir(filepath.Dir(rel))
	if w.err == nil {
		w.err = os.WriteFile(filepath.Join(w.root, rel), content, 0o644)
	}
}

// link makes rel a symlink to target (relative, like sysfs).
func (w *writer) link(rel, target string) {
	w.mkdir(filepath.Dir(rel))
	if w.err != nil {
		return
	}
	p := filepath.Join(w.root, rel)
	_ = os.Remove(p)
	w.err = os.Symlink(target, p)
}

// linkAbs links rel to the sysroot-relative path target, computing the relative form.
func (w *writer) linkAbs(rel, target string) {
	r, err := filepath.Rel(filepath.Dir(filepath.Join(w.root, rel)), filepath.Join(w.root, target))
	if err != nil {
		w.err = err
		return
	}
	w.link(rel, r)
}

func b01(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func (w *writer) disk(i int, d Disk) {
	var devDir, ctrlDir string
	switch d.Transport {
	case "nvme":
		pci := fmt.Sprintf("sys/devices/pci0000:00/0000:00:1d.%d/0000:%02x:00.0", i, 0x3b+i)
		ctrlDir = filepath.Join(pci, "nvme", fmt.Sprintf("nvme%d", i))
		devDir = filepath.Join(ctrlDir, d.Name)
		w.file(filepath.Join(ctrlDir, "transport"), "pcie")
		w.file(filepath.Join(ctrlDir, "firmware_rev"), "GDC5902Q")
		w.file(filepath.Join(devDir, "wwid"), d.WWID)
		w.linkAbs(filepath.Join(pci, "driver"), "sys/bus/pci/drivers/nvme")
		w.mkdir("sys/bus/pci/drivers/nvme")
	case "mmc":
		ctrlDir = fmt.Sprintf("sys/devices/platform/soc/ffe07000.mmc/mmc_host/mmc%d/mmc%d:0001", i, i)
		devDir = filepath.Join(ctrlDir, "block", d.Name)
		w.file(filepath.Join(ctrlDir, "name"), d.Model)
	default: // sata
		ctrlDir = fmt.Sprintf("sys/devices/pci0000:00/0000:00:17.0/ata%d/host%d/target%d:0:0/%d:0:0:0", i+1, i, i, i)
		devDir = filepath.Join(ctrlDir, "block", d.Name)
		w.file(filepath.Join(ctrlDir, "vendor"), "ATA     ")
		w.file(filepath.Join(ctrlDir, "wwid"), d.WWID)
		w.file(filepath.Join(ctrlDir, "rev"), "0105")
	}
	w.file(filepath.Join(ctrlDir, "model"), d.Model)
	if d.Transport == "sata" {
		// SCSI devices have no serial attribute: the unit serial number
		// VPD page (0x80) holds it, behind a 4-byte header.
		w.raw(filepath.Join(ctrlDir, "vpd_pg80"), append([]byte{0, 0x80, 0, byte(len(d.Serial))}, d.Serial...))
	} else {
		w.file(filepath.Join(ctrlDir, "serial"), d.Serial)
	}
	w.linkAbs(filepath.Join(devDir, "device"), ctrlDir)
	w.blockDevice(d.Name, devDir, blockAttrs{
		sectors: d.SizeBytes / 512, dev: fmt.Sprintf("259:%d", i),
		logical: d.LogicalBlockSize, physical: d.PhysicalBlockSize,
		ro: d.ReadOnly, removable: d.Removable, rotational: d.Rotational,
	})
}

// blockAttrs are the sysfs attributes every block device has.
type blockAttrs struct {
	sectors                   int64 // of 512 bytes, whatever the block size
	dev                       string
	logical, physical         int
	ro, removable, rotational bool
}

// blockDevice writes the attributes of block device name in devDir and its
// /sys/block and /sys/class/block links.
func (w *writer) blockDevice(name, devDir string, a blockAttrs) {
	w.file(filepath.Join(devDir, "size"), strconv.FormatInt(a.sectors, 10))
	w.file(filepath.Join(devDir, "ro"), b01(a.ro))
	w.file(filepath.Join(devDir, "removable"), b01(a.removable))
	w.file(filepath.Join(devDir, "dev"), a.dev)
	w.file(filepath.Join(devDir, "queue/logical_block_size"), strconv.Itoa(a.logical))
	w.file(filepath.Join(devDir, "queue/physical_block_size"), strconv.Itoa(a.physical))
	w.file(filepath.Join(devDir, "queue/hw_sector_size"), strconv.Itoa(a.logical))
	w.file(filepath.Join(devDir, "queue/rotational"), b01(a.rotational))
	w.mkdir(filepath.Join(devDir, "holders"))
	w.mkdir(filepath.Join(devDir, "slaves"))
	w.linkAbs(filepath.Join("sys/block", name), devDir)
	w.linkAbs(filepath.Join("sys/class/block", name), devDir)
}

// loopDevice is the rescue system's root squashfs.
func (w *writer) loopDevice() {
	devDir := "sys/devices/virtual/block/loop0"
	w.blockDevice("loop0", devDir, blockAttrs{sectors: 1638400, dev: "7:0", logical: 512, physical: 512, ro: true})
	w.file(filepath.Join(devDir, "loop/backing_file"), "/run/rescue/filesystem.squashfs")
	if w.err == nil {
		// A small file, so that opening /dev/loop0 works but writing an image to it cannot.
		w.err = createDiskFile(filepath.Join(w.root, "dev/loop0"), 1<<20)
	}
}

func (w *writer) nic(i int, n NIC) {
	pci := fmt.Sprintf("sys/devices/pci0000:00/0000:00:1c.%d/%s", i, n.PCIAddress)
	netDir := filepath.Join(pci, "net", n.Name)
	w.mkdir(filepath.Join("sys/bus/pci/drivers", n.Driver))
	w.linkAbs(filepath.Join(pci, "driver"), filepath.Join("sys/bus/pci/drivers", n.Driver))
	w.file(filepath.Join(pci, "vendor"), "0x8086")
	w.linkAbs(filepath.Join(netDir, "device"), pci)
	// The kernel gives the permanent MAC through ethtool/netlink, not sysfs;
	// fake trees carry it in this file (em-imager's hwinfo reads it).
	w.file(filepath.Join(netDir, "permaddr"), n.MAC)
	a := netAttrs{address: n.MAC, operstate: "down", carrier: "0", mtu: "1500", typ: "1", ifindex: strconv.Itoa(i + 2)}
	speed := "-1"
	if n.LinkUp {
		a.operstate, a.carrier, speed = "up", "1", strconv.Itoa(n.SpeedMbps)
	}
	w.file(filepath.Join(netDir, "speed"), speed)
	w.netDevice(n.Name, netDir, a)
}

// netAttrs are the sysfs attributes every network interface has.
type netAttrs struct{ address, operstate, carrier, mtu, typ, ifindex string }

// netDevice writes the attributes of interface name in dir and its
// /sys/class/net link.
func (w *writer) netDevice(name, dir string, a netAttrs) {
	w.file(filepath.Join(dir, "address"), a.address)
	w.file(filepath.Join(dir, "addr_assign_type"), "0")
	w.file(filepath.Join(dir, "operstate"), a.operstate)
	w.file(filepath.Join(dir, "carrier"), a.carrier)
	w.file(filepath.Join(dir, "mtu"), a.mtu)
	w.file(filepath.Join(dir, "type"), a.typ)
	w.file(filepath.Join(dir, "ifindex"), a.ifindex)
	w.linkAbs(filepath.Join("sys/class/net", name), dir)
}

func (w *writer) loopback() {
	w.netDevice("lo", "sys/devices/virtual/net/lo", netAttrs{address: "00:00:00:00:00:00", operstate: "unknown",
		carrier: "1", mtu: "65536", typ: "772", ifindex: "1"})
}

func (w *writer) procMounts(spec Spec) {
	mounts := []Mount{
		{"sysfs", "/sys", "sysfs", "rw,nosuid,nodev,noexec,relatime"},
		{"proc", "/proc", "proc", "rw,nosuid,nodev,noexec,relatime"},
		{"udev", "/dev", "devtmpfs", "rw,nosuid,relatime,size=8123456k,nr_inodes=2030864,mode=755"},
		{"tmpfs", "/run", "tmpfs", "rw,nosuid,nodev,noexec,relatime,size=1638400k,mode=755"},
		{"/dev/loop0", "/run/rescue/root-ro", "squashfs", "ro,relatime,errors=continue"},
		{"tmpfs", "/run/rescue/root-rw", "tmpfs", "rw,relatime"},
		{"overlay", "/", "overlay", "rw,relatime,lowerdir=/run/rescue/root-ro,upperdir=/run/rescue/root-rw/upper,workdir=/run/rescue/root-rw/work"},
	}
	mounts = append(mounts, spec.ExtraMounts...)
	var b strings.Builder
	for _, m := range mounts {
		fmt.Fprintf(&b, "%s %s %s %s 0 0\n", m.Device, m.Point, m.FSType, m.Options)
	}
	w.file("proc/mounts", strings.TrimSuffix(b.String(), "\n"))
	w.link("proc/self/mounts", "../mounts")
}

func (w *writer) procRoute(spec Spec) {
	var b strings.Builder
	b.WriteString("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT")
	for _, n := range spec.NICs {
		if n.DefaultRoute {
			fmt.Fprintf(&b, "\n%s\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0", n.Name)
			fmt.Fprintf(&b, "\n%s\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0", n.Name)
		}
	}
	w.file("proc/net/route", b.String())
}

// RecordedOffer returns a real fr-par-2 offer by name, from the catalog's
// snapshot of the recorded ListOffers responses (for tests and demos that
// want real hardware descriptions).
func RecordedOffer(name string) (*baremetal.Offer, error) {
	s, err := snapshot.Embedded()
	if err != nil {
		return nil, err
	}
	z := s.Zones[string(scw.ZoneFrPar2)]
	for _, list := range [][]*baremetal.Offer{z.Hourly, z.Monthly} {
		for _, o := range list {
			if o.Name == name {
				return o, nil
			}
		}
	}
	return nil, fmt.Errorf("offer %s is not in the recorded fr-par-2 offers", name)
}
