package blockdev

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/faketree"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
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

func TestSelectRules(t *testing.T) {
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
	d, rejected, err := Select(root, 2*gib)
	if err != nil {
		t.Fatal(err)
	}
	if d.Path != "/dev/nvme1n1" || d.Transport != "nvme" || d.Rotational || !strings.Contains(d.Reason, "smallest") {
		t.Fatalf("picked %+v", d)
	}
	want := map[string]string{
		"/dev/loop0": "virtual", "/dev/ram0": "virtual", "/dev/zram0": "virtual", "/dev/sr0": "virtual",
		"/dev/sdb": "USB", "/dev/sdc": "removable", "/dev/sdd": "read-only",
		"/dev/sde": "running system's root", "/dev/sdf": "mounted: /dev/sdf1 on /mnt/data dir",
		"/dev/sdg": "md127", "/dev/sdh": "swap", "/dev/sdi": "no medium", "/dev/nvme2n1": "too small",
		"/dev/nvme0n1": "ranks first", "/dev/sda": "ranks first",
	}
	got := map[string]string{}
	for _, r := range rejected {
		got[r.Path] = r.Reason
	}
	for p, frag := range want {
		if !strings.Contains(got[p], frag) {
			t.Errorf("%s: reason %q, want it to mention %q", p, got[p], frag)
		}
	}
	if len(rejected) != len(want) {
		t.Errorf("%d rejected, want %d: %v", len(rejected), len(want), got)
	}
	// Size unknown: the largest non-rotational disk.
	d, _, err = Select(root, 0)
	if err != nil || d.Path != "/dev/nvme0n1" || d.Model != "SAMSUNG MZQL2960HCJR" || d.Serial != "S64F" || d.WWID != "eui.1" {
		t.Fatalf("size unknown: %+v %v", d, err)
	}
	// Only the spinning disk is big enough.
	d, _, err = Select(root, 1000*gib)
	if err != nil || d.Path != "/dev/sda" || !d.Rotational || d.Transport != "sata" {
		t.Fatalf("big image: %+v %v", d, err)
	}
	if _, _, err := Select(root, 8000*gib); !errors.Is(err, ErrTooSmall) {
		t.Fatalf("huge image: %v", err)
	}
}

func TestSelectNothing(t *testing.T) {
	root := build(t, faketree.Host{Disks: []faketree.Disk{{Name: "sda", Size: gib, Holders: []string{"dm-0"}}, {Name: "loop0", Size: gib}}})
	if _, rej, err := Select(root, 1); !errors.Is(err, ErrBusy) || len(rej) != 2 {
		t.Fatalf("err %v rejected %v", err, rej)
	}
	root = build(t, faketree.Host{})
	if _, _, err := Select(root, 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no disks: %v", err)
	}
	if _, _, err := Select(hostroot.Root{Dir: t.TempDir()}, 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no /sys/block: %v", err)
	}
}

func TestDescribe(t *testing.T) {
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
	d, err := Describe(root, "/dev/nvme0n1")
	if err != nil || d.Path != "/dev/nvme0n1" || d.LogicalSectorSize != 4096 || d.SizeBytes != 64<<20 {
		t.Fatalf("%+v %v", d, err)
	}
	if d, err := Describe(root, "/dev/sdb"); err != nil || d.Transport != "usb" {
		t.Fatalf("a named USB disk is the operator's choice: %+v %v", d, err)
	}
	for path, want := range map[string]error{"/dev/sdc": ErrUnsuitable, "/dev/sdd": ErrBusy, "/dev/loop1": ErrUnsuitable, "/dev/nvme9n1": ErrNotFound} {
		if _, err := Describe(root, path); !errors.Is(err, want) {
			t.Errorf("%s: err %v, want %v", path, err, want)
		}
	}
	// A regular file outside /dev: its size is the capacity.
	f := filepath.Join(t.TempDir(), "disk.img")
	os.WriteFile(f, nil, 0o644)
	os.Truncate(f, 5<<20)
	if d, err := Describe(root, f); err != nil || d.Transport != "file" || d.SizeBytes != 5<<20 {
		t.Fatalf("file: %+v %v", d, err)
	}
	if _, err := Describe(root, t.TempDir()); !errors.Is(err, ErrUnsuitable) {
		t.Fatalf("directory: %v", err)
	}
}
