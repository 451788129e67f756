package blockdev

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/faketree"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

func build(t *testing.T, h faketree.Host) hostroot.Root {
	t.Helper()
	dir := t.TempDir()
	if err := faketree.Build(dir, h); err != nil {
		t.Fatal(err)
	}
	return hostroot.Root{Dir: dir}
}

const gib = 1 << 30

func auto(size int64) Request { return Request{Disk: "auto", ImageSize: size} }

func rejections(c Choice) map[string]string {
	got := map[string]string{}
	for _, r := range c.Rejected {
		got[r.Path] = r.Reason
	}
	return got
}

func TestChooseAutoRules(t *testing.T) {
	root := build(t, faketree.Host{
		Disks: []faketree.Disk{
			{Name: "loop0", Size: 10 * gib},
			{Name: "ram0", Size: 1 * gib},
			{Name: "zram0", Size: 1 * gib},
			{Name: "sr0", Size: 1 * gib},
			{Name: "sda", Size: 4000 * gib, Rotational: true, Model: "HGST HUS726T4TAL", Serial: "K4K1ABCD"},
			{Name: "sdb", Size: 32 * gib, USB: true},
			{Name: "sdc", Size: 64 * gib, Removable: true},
			{Name: "sdd", Size: 500 * gib, ReadOnly: true},
			{Name: "sde", Size: 500 * gib, Partitions: []string{"sde1"}},         // rescue root
			{Name: "sdf", Size: 500 * gib, Partitions: []string{"sdf1"}},         // mounted elsewhere
			{Name: "sdg", Size: 500 * gib, Holders: []string{"md127"}},           // RAID member
			{Name: "sdh", Size: 500 * gib, Partitions: []string{"sdh1", "sdh2"}}, // swap
			{Name: "sdi", Size: 0},
			{Name: "nvme0n1", Size: 960 * gib, Model: "SAMSUNG MZQL2960HCJR", Serial: "S64F", WWID: "eui.1"},
			{Name: "nvme1n1", Size: 480 * gib},
			{Name: "nvme2n1", Size: 1 * gib},
		},
		Mounts: []string{"/dev/sde1 / ext4", "/dev/sdf1 /mnt/data\\040dir xfs", "tmpfs /run tmpfs"},
		Swaps:  []string{"/dev/sdh2"},
	})
	c, err := Choose(root, auto(2*gib))
	if err != nil {
		t.Fatal(err)
	}
	d := c.Disk
	if d.Path != "/dev/nvme1n1" || d.Transport != "nvme" || d.Rotational || d.Rule != report.RuleAutoSmallestFit || !strings.Contains(d.Reason, "smallest") || c.OpenPath != filepath.Join(root.Dir, "dev/nvme1n1") {
		t.Fatalf("picked %+v (open %s)", d, c.OpenPath)
	}
	want := map[string]string{
		"/dev/loop0": "virtual", "/dev/ram0": "virtual", "/dev/zram0": "virtual", "/dev/sr0": "virtual",
		"/dev/sdb": "USB", "/dev/sdc": "removable", "/dev/sdd": "read-only",
		"/dev/sde": "running system's root", "/dev/sdf": "/dev/sdf1 mounted on /mnt/data dir",
		"/dev/sdg": "md127", "/dev/sdh": "/dev/sdh2 used as swap", "/dev/sdi": "no medium", "/dev/nvme2n1": "too small",
		"/dev/nvme0n1": "ranks first", "/dev/sda": "ranks first",
	}
	got := rejections(c)
	for p, frag := range want {
		if !strings.Contains(got[p], frag) {
			t.Errorf("%s: reason %q, want it to mention %q", p, got[p], frag)
		}
	}
	if len(c.Rejected) != len(want) {
		t.Errorf("%d rejected, want %d: %v", len(c.Rejected), len(want), got)
	}
	// Size unknown: the largest non-rotational disk.
	c, err = Choose(root, auto(0))
	if d := c.Disk; err != nil || d.Path != "/dev/nvme0n1" || d.Model != "SAMSUNG MZQL2960HCJR" || d.Serial != "S64F" || d.WWID != "eui.1" || d.Rule != report.RuleAutoLargest {
		t.Fatalf("size unknown: %+v %v", d, err)
	}
	// Only the spinning disk is big enough.
	c, err = Choose(root, auto(1000*gib))
	if d := c.Disk; err != nil || d.Path != "/dev/sda" || !d.Rotational || d.Transport != "sata" {
		t.Fatalf("big image: %+v %v", d, err)
	}
	if _, err := Choose(root, auto(8000*gib)); !errors.Is(err, ErrTooSmall) {
		t.Fatalf("huge image: %v", err)
	}
}

// TestAutoOpensWhatItDescribed: a disk sysfs lists without a device node
// (no udev, or a stale /dev) is not a candidate.
func TestAutoOpensWhatItDescribed(t *testing.T) {
	root := build(t, faketree.Host{Disks: []faketree.Disk{
		{Name: "nvme0n1", Size: 64 * gib, NoDevNode: true},
		{Name: "nvme1n1", Size: 128 * gib},
	}})
	c, err := Choose(root, auto(gib))
	if err != nil || c.Disk.Path != "/dev/nvme1n1" || !strings.Contains(rejections(c)["/dev/nvme0n1"], "no device node") {
		t.Fatalf("%+v %v %v", c.Disk, c.Rejected, err)
	}
}

func TestChooseNothing(t *testing.T) {
	root := build(t, faketree.Host{Disks: []faketree.Disk{{Name: "sda", Size: gib, Holders: []string{"dm-0"}}, {Name: "loop0", Size: gib}}})
	if c, err := Choose(root, auto(1)); !errors.Is(err, ErrBusy) || len(c.Rejected) != 2 || c.Disk != nil {
		t.Fatalf("err %v choice %+v", err, c)
	}
	root = build(t, faketree.Host{})
	if _, err := Choose(root, auto(1)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no disks: %v", err)
	}
	if _, err := Choose(hostroot.Root{Dir: t.TempDir()}, auto(1)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no /sys/block: %v", err)
	}
}

// TestRootByDeviceNumbers: a kernel that mounts root= without an initramfs
// names the device /dev/root in /proc/mounts; mountinfo's numbers still say
// which it is. The root disk is the one auto would otherwise pick.
func TestRootByDeviceNumbers(t *testing.T) {
	root := build(t, faketree.Host{
		Disks: []faketree.Disk{
			{Name: "nvme0n1", Size: 100 * gib, Partitions: []string{"nvme0n1p1", "nvme0n1p2"}},
			{Name: "nvme1n1", Size: 200 * gib},
		},
		Mounts:       []string{"/dev/root / ext4", "tmpfs /run tmpfs"},
		MountDevices: map[string]string{"/dev/root": "nvme0n1p2"},
	})
	c, err := Choose(root, auto(gib))
	if err != nil || c.Disk.Path != "/dev/nvme1n1" {
		t.Fatalf("picked %+v, %v: the running system's disk must never be chosen", c.Disk, err)
	}
	if r := rejections(c)["/dev/nvme0n1"]; !strings.Contains(r, "running system's root") || !strings.Contains(r, "/dev/nvme0n1p2 (as /dev/root) mounted on /") {
		t.Fatalf("reason %q", r)
	}
	if _, err := Choose(root, Request{Disk: "/dev/nvme0n1"}); !errors.Is(err, ErrBusy) {
		t.Fatalf("named root disk: %v", err)
	}
}

// TestStackedDevices: / on device-mapper (LVM, LUKS) over a partition, and
// swap on md over two disks: the disks under them are in use, followed
// through slaves.
func TestStackedDevices(t *testing.T) {
	root := build(t, faketree.Host{
		Disks: []faketree.Disk{
			{Name: "sda", Size: 100 * gib, Partitions: []string{"sda1", "sda2"}, Holders: []string{"dm-0"}},
			{Name: "sdb", Size: 100 * gib, Holders: []string{"md0"}},
			{Name: "sdc", Size: 100 * gib, Holders: []string{"md0"}},
			{Name: "sdd", Size: 100 * gib},
			{Name: "dm-0", Size: 90 * gib, Slaves: []string{"sda2"}},
			{Name: "md0", Size: 100 * gib, Slaves: []string{"sdb", "sdc"}},
		},
		Mounts: []string{"/dev/dm-0 / xfs"},
		Swaps:  []string{"/dev/md0"},
	})
	c, err := Choose(root, auto(gib))
	if err != nil || c.Disk.Path != "/dev/sdd" {
		t.Fatalf("picked %+v, %v", c.Disk, err)
	}
	got := rejections(c)
	if !strings.Contains(got["/dev/sda"], "running system's root") || !strings.Contains(got["/dev/sdb"], "/dev/md0 used as swap") || !strings.Contains(got["/dev/sdc"], "swap") {
		t.Fatalf("reasons %v", got)
	}
}

func TestChooseNamed(t *testing.T) {
	root := build(t, faketree.Host{
		Disks: []faketree.Disk{
			{Name: "nvme0n1", Size: 64 << 20, SectorSize: 4096},
			{Name: "sdb", Size: 64 << 20, USB: true, Removable: true},
			{Name: "sdc", Size: 64 << 20, ReadOnly: true},
			{Name: "sdd", Size: 64 << 20, Partitions: []string{"sdd1"}},
			{Name: "loop1", Size: 64 << 20},
		},
		Mounts: []string{"/dev/sdd1 /boot ext4"},
	})
	c, err := Choose(root, Request{Disk: "/dev/nvme0n1"})
	if d := c.Disk; err != nil || d.Path != "/dev/nvme0n1" || d.LogicalSectorSize != 4096 || d.SizeBytes != 64<<20 || d.Rule != report.RuleNamed {
		t.Fatalf("%+v %v", d, err)
	}
	if c, err := Choose(root, Request{Disk: "/dev/sdb"}); err != nil || c.Disk.Transport != "usb" {
		t.Fatalf("a named USB disk is the operator's choice: %+v %v", c.Disk, err)
	}
	for path, want := range map[string]error{"/dev/sdc": ErrUnsuitable, "/dev/sdd": ErrBusy, "/dev/sdd1": ErrUnsuitable, "/dev/loop1": ErrUnsuitable, "/dev/nvme9n1": ErrNotFound} {
		if _, err := Choose(root, Request{Disk: path}); !errors.Is(err, want) {
			t.Errorf("%s: err %v, want %v", path, err, want)
		}
	}
	if _, err := Choose(root, Request{Disk: "/dev/loop1", AllowVirtual: true}); err != nil {
		t.Errorf("--allow-virtual: %v", err)
	}
	if _, err := Choose(root, Request{Disk: "/dev/nvme0n1", ImageSize: 65 << 20}); !errors.Is(err, ErrTooSmall) {
		t.Errorf("image larger than the disk: %v", err)
	}
	// A regular file outside /dev: its size is the capacity.
	f := filepath.Join(t.TempDir(), "disk.img")
	os.WriteFile(f, nil, 0o644)
	os.Truncate(f, 5<<20)
	if c, err := Choose(root, Request{Disk: f}); err != nil || c.Disk.Transport != "file" || c.Disk.SizeBytes != 5<<20 || c.OpenPath != f {
		t.Fatalf("file: %+v %v", c.Disk, err)
	}
	if _, err := Choose(root, Request{Disk: t.TempDir()}); !errors.Is(err, ErrUnsuitable) {
		t.Fatalf("directory: %v", err)
	}
}

// TestByIDLinks: udev's links resolve (relative or absolute, inside the
// fake root) and every check runs on the device they point at.
func TestByIDLinks(t *testing.T) {
	root := build(t, faketree.Host{
		Disks: []faketree.Disk{
			{Name: "nvme0n1", Size: 64 << 20, Partitions: []string{"nvme0n1p1"}},
			{Name: "nvme1n1", Size: 128 << 20},
		},
		Mounts: []string{"/dev/nvme0n1p1 /mnt ext4"},
	})
	byID := filepath.Join(root.Dir, "dev", "disk", "by-id")
	os.MkdirAll(byID, 0o755)
	os.Symlink("../../nvme1n1", filepath.Join(byID, "nvme-SAMSUNG_B"))
	os.Symlink("/dev/nvme0n1", filepath.Join(byID, "nvme-SAMSUNG_A"))
	os.Symlink("../../nvme0n1p1", filepath.Join(byID, "nvme-SAMSUNG_A-part1"))
	c, err := Choose(root, Request{Disk: "/dev/disk/by-id/nvme-SAMSUNG_B"})
	if d := c.Disk; err != nil || d.Path != "/dev/nvme1n1" || d.Requested != "/dev/disk/by-id/nvme-SAMSUNG_B" || d.SizeBytes != 128<<20 || c.OpenPath != filepath.Join(root.Dir, "dev/nvme1n1") {
		t.Fatalf("%+v %v", d, err)
	}
	if _, err := Choose(root, Request{Disk: "/dev/disk/by-id/nvme-SAMSUNG_A"}); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "mounted on /mnt") {
		t.Fatalf("link to a mounted disk: %v", err)
	}
	if _, err := Choose(root, Request{Disk: "/dev/disk/by-id/nvme-SAMSUNG_A-part1"}); !errors.Is(err, ErrUnsuitable) || !strings.Contains(err.Error(), "partition") {
		t.Fatalf("link to a partition: %v", err)
	}
	os.Symlink("../../nvme7n1", filepath.Join(byID, "dangling"))
	if _, err := Choose(root, Request{Disk: "/dev/disk/by-id/dangling"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("dangling link: %v", err)
	}
}
