// Package faketree builds a fake host tree (sys/, dev/, proc/) shaped like
// the files em-imager reads, for tests and for simulated rescue hosts: point
// em-imager at it with --sysroot DIR or EM_IMAGER_SYSROOT=DIR. Disks become
// sparse regular files at DIR/dev/NAME, or real block device nodes (a loop
// device's numbers, made with mknod) when Disk.Device is set, so a test can
// describe the machine in sysfs and still write through the kernel's block
// layer. imager/README.md lists every file.
package faketree

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Disk is one entry of /sys/block.
type Disk struct {
	Name       string // nvme0n1, sda, loop0...
	Size       int64  // bytes; the dev node is a sparse file of this size
	SectorSize int    // logical sector size, default 512
	Rotational bool
	Removable  bool
	ReadOnly   bool
	USB        bool // placed under a /usb path in sysfs
	Model      string
	Serial     string
	WWID       string
	Partitions []string // partition names (sda1, nvme0n1p1): sys entries and dev nodes
	Holders    []string // devices holding the disk (md127, dm-0)
	Slaves     []string // devices the disk is built on (a dm or md device's members: sda2)
	NoDevNode  bool     // leave DIR/dev/NAME out (a disk sysfs knows but udev did not create)
	// Device is a real block device (/dev/loop3) whose major:minor DIR/dev/NAME
	// and the sysfs `dev` files get: em-imager then opens the real device.
	// Size must be the device's size.
	Device string
}

// NIC is one entry of /sys/class/net.
type NIC struct {
	Name    string
	MAC     string // current address
	PermMAC string // permanent address (written as bonding_slave/perm_hwaddr when Master is set, else permaddr)
	Driver  string
	PCI     string // PCI function, e.g. 0000:01:00.0
	Up      bool
	Speed   int    // Mbit/s
	Virtual bool   // under /devices/virtual, no device link (lo, bond0, br0)
	Master  string // bond the interface belongs to
}

// Host is the whole fake machine.
type Host struct {
	Disks []Disk
	NICs  []NIC
	// Mounts are /proc/self/mounts lines, "SOURCE TARGET FSTYPE"; the same
	// mounts go to /proc/self/mountinfo with the device numbers of SOURCE.
	Mounts []string
	// MountDevices names the disk or partition behind a mount source that is
	// not a device name, for mountinfo's MAJ:MIN: {"/dev/root": "sda1"} is a
	// kernel that mounted root= itself, without an initramfs.
	MountDevices map[string]string
	// NoMountinfo leaves /proc/self/mountinfo out (trees that only name devices).
	NoMountinfo bool
	Swaps       []string // swap devices (/dev/sdb2)
	// DefaultRoute names the interface of the IPv4 default route (and IPv6 when DefaultRoute6 is set).
	DefaultRoute  string
	DefaultRoute6 string
	// Kexec describes the kernel's kexec switches (imager/kexec reads
	// them); nil leaves them out: a kernel without kexec.
	Kexec *Kexec
}

// Kexec is what em-imager kexec and inspect find about kexec on the host.
type Kexec struct {
	Disabled bool // proc/sys/kernel/kexec_load_disabled reads 1 (else 0)
	// Lockdown is the active mode in sys/kernel/security/lockdown (none,
	// integrity, confidentiality); "" leaves the file out.
	Lockdown   string
	SecureBoot bool // the SecureBoot efivar's last byte is 1 (else 0)
	// Refuse is an errno name (ENOSYS, EBUSY, EPERM, EKEYREJECTED...)
	// written to kexec/refuse: the fake kexec_file_load fails with it.
	Refuse string
}

func write(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content+"\n"), 0o644)
}

func link(target, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(path), target)
	if err != nil {
		return err
	}
	return os.Symlink(rel, path)
}

// Build writes h under dir (which may already hold other files).
func Build(dir string, h Host) error {
	sys := filepath.Join(dir, "sys")
	for _, p := range []string{filepath.Join(sys, "block"), filepath.Join(sys, "class", "net"), filepath.Join(dir, "dev"), filepath.Join(dir, "proc", "self"), filepath.Join(dir, "proc", "net")} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
	}
	devnums := map[string]string{} // kernel name -> "MAJ:MIN"
	for i, d := range h.Disks {
		if err := buildDisk(dir, sys, i, d, devnums); err != nil {
			return fmt.Errorf("disk %s: %w", d.Name, err)
		}
	}
	for _, n := range h.NICs {
		if err := buildNIC(sys, n); err != nil {
			return fmt.Errorf("nic %s: %w", n.Name, err)
		}
	}
	if err := writeProc(dir, h, devnums); err != nil {
		return err
	}
	if h.Kexec != nil {
		return BuildKexec(dir, *h.Kexec)
	}
	return nil
}

// writeProc writes the /proc files the imager reads: mounts (and mountinfo unless the host
// has none), swaps and both routing tables.
func writeProc(dir string, h Host, devnums map[string]string) error {
	files := [][2]string{
		{filepath.Join("self", "mounts"), procMounts(h)},
		{"swaps", procSwaps(h)},
		{filepath.Join("net", "route"), procRoute(h)},
		{filepath.Join("net", "ipv6_route"), procIPv6Route(h)},
	}
	if !h.NoMountinfo {
		files = append(files, [2]string{filepath.Join("self", "mountinfo"), mountinfo(h, devnums)})
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, "proc", f[0]), []byte(f[1]), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// procMounts is /proc/self/mounts listing h.Mounts, each read-write.
func procMounts(h Host) string {
	var mounts strings.Builder
	for _, m := range h.Mounts {
		mounts.WriteString(m + " rw 0 0\n")
	}
	return mounts.String()
}

// procSwaps is /proc/swaps listing h.Swaps as partitions.
func procSwaps(h Host) string {
	swaps := "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
	for _, s := range h.Swaps {
		swaps += s + "\tpartition\t1048572\t\t0\t\t-2\n"
	}
	return swaps
}

// procRoute is /proc/net/route with an IPv4 default route through h.DefaultRoute, if set.
func procRoute(h Host) string {
	route := "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
	if h.DefaultRoute != "" {
		route += h.DefaultRoute + "\t00000000\t0101A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
	}
	return route
}

// procIPv6Route is /proc/net/ipv6_route with a default route through h.DefaultRoute6, if set.
func procIPv6Route(h Host) string {
	if h.DefaultRoute6 == "" {
		return ""
	}
	return strings.Repeat("0", 32) + " 00 " + strings.Repeat("0", 32) + " 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003 " + h.DefaultRoute6 + "\n"
}

// secureBootVar is imager/kexec.SecureBootVar (faketree imports nothing of em-imager's).
const secureBootVar = "SecureBoot-8be4df61-93ca-11d0-aa0d-00e098032b8c"

// BuildKexec writes k's switches under dir alone, for hosts laid out by
// other means (the simulated rescue hosts of test/sim/machine).
func BuildKexec(dir string, k Kexec) error {
	if err := write(filepath.Join(dir, "proc", "sys", "kernel", "kexec_load_disabled"), b01(k.Disabled)); err != nil {
		return err
	}
	if k.Lockdown != "" {
		modes := []string{}
		for _, m := range []string{"none", "integrity", "confidentiality"} {
			if m == k.Lockdown {
				m = "[" + m + "]"
			}
			modes = append(modes, m)
		}
		if err := write(filepath.Join(dir, "sys", "kernel", "security", "lockdown"), strings.Join(modes, " ")); err != nil {
			return err
		}
	}
	// efivarfs: four attribute bytes (NV|BS|RT), then the value.
	sb := []byte{0x06, 0, 0, 0, 0}
	if k.SecureBoot {
		sb[4] = 1
	}
	efivars := filepath.Join(dir, "sys", "firmware", "efi", "efivars")
	if err := os.MkdirAll(efivars, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(efivars, secureBootVar), sb, 0o644); err != nil {
		return err
	}
	if k.Refuse != "" {
		return write(filepath.Join(dir, "kexec", "refuse"), k.Refuse)
	}
	return nil
}

// mountinfo renders h.Mounts as /proc/self/mountinfo does: with the
// major:minor of the mounted device (0:N for filesystems without one).
func mountinfo(h Host, devnums map[string]string) string {
	var b strings.Builder
	for i, m := range h.Mounts {
		f := strings.Fields(m)
		if len(f) < 3 {
			continue
		}
		src := f[0]
		num := fmt.Sprintf("0:%d", 40+i)
		name := h.MountDevices[src]
		if name == "" && strings.HasPrefix(src, "/dev/") {
			name = filepath.Base(src)
		}
		if n, ok := devnums[name]; ok {
			num = n
		}
		fmt.Fprintf(&b, "%d 1 %s / %s rw,relatime - %s %s rw\n", 20+i, num, f[1], f[2], src)
	}
	return b.String()
}

// devnum gives a fake disk its numbers: the kernel's majors by kind, minors
// from 4096 up so they never meet a real device a test mixes in.
func devnum(i, part int, name string) string {
	major := 252
	switch {
	case strings.HasPrefix(name, "nvme"):
		major = 259
	case strings.HasPrefix(name, "sd"):
		major = 8
	case strings.HasPrefix(name, "loop"):
		major = 7
	}
	return fmt.Sprintf("%d:%d", major, 4096+16*i+part)
}

func buildDisk(dir, sys string, i int, d Disk, devnums map[string]string) error {
	if d.SectorSize == 0 {
		d.SectorSize = 512
	}
	num, rdev, err := diskDevnum(i, d)
	if err != nil {
		return err
	}
	devnums[d.Name] = num
	parent := diskParent(sys, i, d)
	bdir := filepath.Join(parent, "block", d.Name)
	if err := writeDiskAttrs(bdir, num, d); err != nil {
		return err
	}
	if !strings.HasPrefix(parent, filepath.Join(sys, "devices", "virtual")) {
		if err := writeDiskDevice(parent, bdir, d); err != nil {
			return err
		}
	}
	if err := writeNames(filepath.Join(bdir, "holders"), d.Holders); err != nil {
		return err
	}
	if err := writeNames(filepath.Join(bdir, "slaves"), d.Slaves); err != nil {
		return err
	}
	for n, p := range d.Partitions {
		if err := buildPartition(dir, sys, bdir, p, n+1, devnum(i, n+1, d.Name), devnums); err != nil {
			return err
		}
	}
	if err := link(bdir, filepath.Join(sys, "block", d.Name)); err != nil {
		return err
	}
	if err := classLinks(sys, d.Name, num, bdir); err != nil {
		return err
	}
	return makeDevNode(dir, d, rdev)
}

// diskDevnum is the disk's "MAJ:MIN": a made-up one, or the real device's when d.Device is set
// (then also its raw number, for the dev node).
func diskDevnum(i int, d Disk) (string, uint64, error) {
	if d.Device == "" {
		return devnum(i, 0, d.Name), 0, nil
	}
	var st syscall.Stat_t
	if err := syscall.Stat(d.Device, &st); err != nil {
		return "", 0, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFBLK {
		return "", 0, fmt.Errorf("%s is not a block device", d.Device)
	}
	return fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)), st.Rdev, nil
}

// diskParent is the sysfs device the disk hangs under, shaped as the kernel shapes it for the
// disk's bus (USB, NVMe, SATA); loop, ram and zram devices are virtual.
func diskParent(sys string, i int, d Disk) string {
	parent := filepath.Join(sys, "devices", "pci0000:00", fmt.Sprintf("0000:00:%02x.0", 0x10+i))
	switch {
	case d.USB:
		return filepath.Join(parent, "usb1", "1-1", "1-1:1.0", "host6", "target6:0:0", "6:0:0:0")
	case strings.HasPrefix(d.Name, "nvme"):
		return filepath.Join(parent, "nvme", strings.TrimSuffix(d.Name, "n1"))
	case strings.HasPrefix(d.Name, "sd"):
		return filepath.Join(parent, "ata1", "host0", "target0:0:0", "0:0:0:0")
	case strings.HasPrefix(d.Name, "loop"), strings.HasPrefix(d.Name, "ram"), strings.HasPrefix(d.Name, "zram"):
		return filepath.Join(sys, "devices", "virtual")
	}
	return parent
}

// writeDiskAttrs writes the block device's own attribute files.
func writeDiskAttrs(bdir, num string, d Disk) error {
	files := map[string]string{
		"dev":                      num,
		"size":                     fmt.Sprint(d.Size / 512),
		"queue/logical_block_size": fmt.Sprint(d.SectorSize),
		"queue/rotational":         b01(d.Rotational),
		"removable":                b01(d.Removable),
		"ro":                       b01(d.ReadOnly),
	}
	if d.WWID != "" {
		files["wwid"] = d.WWID
	}
	for f, c := range files {
		if err := write(filepath.Join(bdir, f), c); err != nil {
			return err
		}
	}
	return nil
}

// writeDiskDevice gives a disk on a bus its device: model and serial, and the "device" link.
func writeDiskDevice(parent, bdir string, d Disk) error {
	if d.Model != "" {
		write(filepath.Join(parent, "model"), d.Model)
	}
	if d.Serial != "" {
		write(filepath.Join(parent, "serial"), d.Serial)
	}
	return link(parent, filepath.Join(bdir, "device"))
}

// writeNames makes dir (holders or slaves) with one empty entry per name; the directory exists
// even when empty, as the kernel's does.
func writeNames(dir string, names []string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, n := range names {
		if err := write(filepath.Join(dir, n), ""); err != nil {
			return err
		}
	}
	return nil
}

// buildPartition makes partition number n of the disk at bdir: its sysfs entry, its dev node
// and its class links.
func buildPartition(dir, sys, bdir, p string, n int, pnum string, devnums map[string]string) error {
	devnums[p] = pnum
	if err := write(filepath.Join(bdir, p, "partition"), fmt.Sprint(n)); err != nil {
		return err
	}
	if err := write(filepath.Join(bdir, p, "dev"), pnum); err != nil {
		return err
	}
	os.MkdirAll(filepath.Join(bdir, p, "holders"), 0o755)
	if err := write(filepath.Join(dir, "dev", p), ""); err != nil {
		return err
	}
	return classLinks(sys, p, pnum, filepath.Join(bdir, p))
}

// classLinks makes a block device, disk or partition, reachable as the kernel offers it:
// /sys/class/block/NAME and /sys/dev/block/MAJ:MIN.
func classLinks(sys, name, num, target string) error {
	if err := link(target, filepath.Join(sys, "class", "block", name)); err != nil {
		return err
	}
	return link(target, filepath.Join(sys, "dev", "block", num))
}

// makeDevNode makes DIR/dev/NAME: a real device node for a real device, else a sparse file of
// the disk's size; none with NoDevNode.
func makeDevNode(dir string, d Disk, rdev uint64) error {
	if d.NoDevNode {
		return nil
	}
	if d.Device != "" {
		return unix.Mknod(filepath.Join(dir, "dev", d.Name), unix.S_IFBLK|0o600, int(rdev))
	}
	f, err := os.OpenFile(filepath.Join(dir, "dev", d.Name), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Truncate(d.Size)
}

func buildNIC(sys string, n NIC) error {
	ndir := filepath.Join(sys, "devices", "virtual", "net", n.Name)
	if !n.Virtual {
		var err error
		if ndir, err = buildPCINIC(sys, n); err != nil {
			return err
		}
	}
	oper, carrier, speed := "down", "0", "-1"
	if n.Up {
		oper, carrier, speed = "up", "1", fmt.Sprint(n.Speed)
	}
	for f, c := range map[string]string{"address": n.MAC, "operstate": oper, "carrier": carrier, "speed": speed} {
		if err := write(filepath.Join(ndir, f), c); err != nil {
			return err
		}
	}
	if n.PermMAC != "" {
		if err := write(permMACPath(ndir, n), n.PermMAC); err != nil {
			return err
		}
	}
	if n.Master != "" {
		if err := link(filepath.Join(sys, "class", "net", n.Master), filepath.Join(ndir, "master")); err != nil {
			return err
		}
	}
	return link(ndir, filepath.Join(sys, "class", "net", n.Name))
}

// permMACPath is where the kernel shows a NIC's permanent address: bonding_slave/perm_hwaddr for
// a bond member (whose own address the bond overwrote), permaddr otherwise.
func permMACPath(ndir string, n NIC) string {
	if n.Master != "" {
		return filepath.Join(ndir, "bonding_slave", "perm_hwaddr")
	}
	return filepath.Join(ndir, "permaddr")
}

// buildPCINIC makes the NIC's directory under its PCI function (0000:01:00.0 unless set), links
// it to the function as "device" and the function to its driver, and returns the directory.
func buildPCINIC(sys string, n NIC) (string, error) {
	if n.PCI == "" {
		n.PCI = "0000:01:00.0"
	}
	pci := filepath.Join(sys, "devices", "pci0000:00", n.PCI)
	ndir := filepath.Join(pci, "net", n.Name)
	if err := os.MkdirAll(ndir, 0o755); err != nil {
		return "", err
	}
	if err := link(pci, filepath.Join(ndir, "device")); err != nil {
		return "", err
	}
	if n.Driver == "" {
		return ndir, nil
	}
	drv := filepath.Join(sys, "bus", "pci", "drivers", n.Driver)
	os.MkdirAll(drv, 0o755)
	if _, err := os.Lstat(filepath.Join(pci, "driver")); err != nil {
		if err := link(drv, filepath.Join(pci, "driver")); err != nil {
			return "", err
		}
	}
	return ndir, nil
}

func b01(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// DirectIODir returns a directory for disk files that accepts O_DIRECT: the
// test's temporary directory, unless that is tmpfs (no O_DIRECT), in which
// case a directory under the module's .cache/ (removed after the test).
func DirectIODir(tb testing.TB) string {
	tb.Helper()
	d := tb.TempDir()
	if supportsDirect(d) {
		return d
	}
	wd, _ := os.Getwd()
	for dir := wd; dir != "/"; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			base := filepath.Join(dir, ".cache", "imager-test")
			os.MkdirAll(base, 0o755)
			d, err := os.MkdirTemp(base, "t")
			if err == nil && supportsDirect(d) {
				tb.Cleanup(func() { os.RemoveAll(d) })
				return d
			}
			break
		}
	}
	tb.Fatalf("no directory supporting O_DIRECT: %s is tmpfs-like and the module's .cache/ is too; set TMPDIR to a directory on a disk filesystem", d)
	return ""
}

func supportsDirect(dir string) bool {
	p := filepath.Join(dir, ".odirect-probe")
	defer os.Remove(p)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR|syscall.O_DIRECT, 0o600)
	if err != nil {
		return false
	}
	defer f.Close()
	buf := make([]byte, 8192)
	off := 4096 - int(uintptr(unsafe.Pointer(&buf[0]))%4096)
	_, err = f.WriteAt(buf[off%4096:off%4096+4096], 0)
	return err == nil
}
