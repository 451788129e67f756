package blockdev

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/loopdev"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// TestRealDevices checks the rules on this machine's real sysfs and /proc
// with real loop devices: partitions known by their numbers, mounts found
// through mountinfo, a mounted loop device's backing file followed to the
// disk that holds it, links resolved.
func TestRealDevices(t *testing.T) {
	host := hostroot.Root{}
	d := loopdev.Attach(t, 64<<20, 512)
	parts := d.Partition(t, 8, 16)

	c, err := Choose(host, Request{Disk: d.Path})
	if !errors.Is(err, ErrUnsuitable) || !strings.Contains(err.Error(), "--allow-virtual") {
		t.Fatalf("a loop device without --allow-virtual: %v", err)
	}
	c, err = Choose(host, Request{Disk: d.Path, AllowVirtual: true, ImageSize: 32 << 20})
	if err != nil || c.Disk.Path != d.Path || c.Disk.Name != d.Name || c.Disk.SizeBytes != 64<<20 || c.Disk.Transport != "loop" || c.OpenPath != d.Path || c.Disk.Rule != report.RuleNamed {
		t.Fatalf("%+v %v", c.Disk, err)
	}
	if _, err := Choose(host, Request{Disk: parts[0], AllowVirtual: true}); !errors.Is(err, ErrUnsuitable) || !strings.Contains(err.Error(), "partition "+d.Name+"p1 of "+d.Path) {
		t.Fatalf("a partition: %v", err)
	}
	link := d.Link(t, "em-imager-test")
	c, err = Choose(host, Request{Disk: link, AllowVirtual: true})
	if err != nil || c.Disk.Path != d.Path || c.Disk.Requested != link {
		t.Fatalf("by-id link: %+v %v", c.Disk, err)
	}

	// A regular file is a file, wherever it is.
	f, err := os.CreateTemp("/dev/shm", "em-imager-test-*.img")
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(8 << 20)
	f.Close()
	t.Cleanup(func() { os.Remove(f.Name()) })
	if c, err := Choose(host, Request{Disk: f.Name()}); err != nil || c.Disk.Transport != "file" || c.Disk.SizeBytes != 8<<20 {
		t.Fatalf("a file under /dev: %+v %v", c.Disk, err)
	}

	// A mounted partition makes the whole disk busy; a loop device whose
	// backing file lives on that filesystem, once mounted, is named too.
	mnt := loopdev.Mount(t, parts[1])
	_, err = Choose(host, Request{Disk: link, AllowVirtual: true})
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), parts[1]+" mounted on "+mnt) {
		t.Fatalf("mounted partition: %v", err)
	}
	inner := filepath.Join(mnt, "inner.img")
	os.WriteFile(inner, nil, 0o644)
	os.Truncate(inner, 8<<20)
	out, err := exec.Command("losetup", "--show", "--find", inner).Output()
	if err != nil {
		t.Fatal(err)
	}
	innerDev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", innerDev).Run() })
	innerMnt := loopdev.Mount(t, innerDev)
	_, err = Choose(host, Request{Disk: d.Path, AllowVirtual: true})
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), innerDev+" mounted on "+innerMnt) {
		t.Fatalf("the backing file of a mounted loop device: %v", err)
	}

	// Auto never picks a loop device, and never the disk / lives on (found
	// here with util-linux's tools, as a cross-check).
	c, _ = Choose(host, Request{Disk: "auto"})
	if c.Disk != nil && strings.HasPrefix(c.Disk.Name, "loop") {
		t.Fatalf("auto picked %s", c.Disk.Path)
	}
	if r := rejections(c)[d.Path]; r == "" {
		t.Fatalf("%s not among the disks auto rejected: %+v", d.Path, c.Rejected)
	}
	src, _ := exec.Command("findmnt", "-n", "-o", "SOURCE", "/").Output()
	if s := strings.TrimSpace(string(src)); strings.HasPrefix(s, "/dev/") {
		disk := s
		if p, _ := exec.Command("lsblk", "-n", "-d", "-o", "PKNAME", s).Output(); strings.TrimSpace(string(p)) != "" {
			disk = "/dev/" + strings.TrimSpace(string(p))
		}
		if r := rejections(c)[disk]; !strings.Contains(r, "running system's root") {
			t.Fatalf("/ is on %s (%s), which auto rejected with %q", disk, s, r)
		}
	}
}
