package cli

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/faketree"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/loopdev"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// TestWipeOtherDisksFakeHost: on a fake host, write --wipe-other-disks
// erases the old install on the other NVMe disk, leaves the USB stick and
// the loop device alone, lists every disk with its identity, and refuses,
// before writing anything, a host whose other disk is in use or an install
// "disk" that is a file.
func TestWipeOtherDisksFakeHost(t *testing.T) {
	fixtures(t)
	srv := newServer(t)
	root := host(t, faketree.Disk{Name: "nvme2n1", Size: 96 << 20, Serial: "S64FNE0R999999", WWID: "eui.999"})
	oldInstall(t, filepath.Join(root, "dev", "nvme2n1"))
	usb := diskBytes(t, root, "sdb")
	r := write(t, root, "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", "/dev/nvme0n1", "--wipe-other-disks")
	wantCode(t, r, "")
	assertImage(t, root, "nvme0n1")
	assertNoGPT(t, root, "nvme2n1")
	if b := diskBytes(t, root, "nvme2n1"); !bytes.Equal(b[4<<20:7<<20], bytes.Repeat([]byte{0xCD}, 3<<20)) {
		t.Error("the wipe erased more than the signature areas")
	}
	if !bytes.Equal(diskBytes(t, root, "sdb"), usb) {
		t.Error("the USB stick was written")
	}
	wiped := map[string]bool{}
	for _, d := range r.rep.Disks {
		wiped[d.Name] = d.Wiped
	}
	want := map[string]bool{"nvme0n1": false, "nvme1n1": true, "nvme2n1": true, "sda": true, "sdb": false}
	if fmt.Sprint(wiped) != fmt.Sprint(want) {
		t.Errorf("disks wiped %v, want %v (every non-virtual disk listed, loop0 left out)", wiped, want)
	}
	if !strings.Contains(strings.Join(r.rep.Warnings, "\n"), "/dev/sdb: not wiped: USB device") {
		t.Errorf("warnings %q do not say why the USB stick was left", r.rep.Warnings)
	}

	busy := buildHost(t, faketree.Host{
		Disks: []faketree.Disk{
			{Name: "nvme0n1", Size: 64 << 20},
			{Name: "nvme1n1", Size: 96 << 20, Partitions: []string{"nvme1n1p1"}},
		},
		Mounts: []string{"/dev/nvme1n1p1 /srv ext4"},
	})
	before := diskBytes(t, busy, "nvme0n1")
	r = write(t, busy, "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", "/dev/nvme0n1", "--wipe-other-disks")
	wantCode(t, r, report.CodeDiskBusy)
	if !strings.Contains(r.rep.Error.Message, "/dev/nvme1n1p1 mounted on /srv") || !bytes.Equal(diskBytes(t, busy, "nvme0n1"), before) {
		t.Fatalf("a busy other disk: %s, and the install disk must be untouched", r.rep.Error.Message)
	}

	img := filepath.Join(t.TempDir(), "disk.img")
	os.WriteFile(img, nil, 0o644)
	os.Truncate(img, 64<<20)
	r = write(t, "", "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", img, "--wipe-other-disks")
	wantCode(t, r, report.CodeInvalidArgument)
}

// TestLoopWipeOtherDisks: the host's disks are real loop devices described
// in a fake sysfs. The other disks carry a previous tenant's layouts (a DOS
// table with FAT and ext4, a GPT with swap and ext4, a whole-disk XFS as a
// previous Talos's EPHEMERAL): after write
// --wipe-other-disks, util-linux's blkid and wipefs find nothing on them,
// nor at the old partitions' offsets. A disk the kernel holds (a mounted
// partition the fake sysfs does not show) is refused by the exclusive open.
// About 20 s on a loaded 2-core machine (filling 500 MiB of loop devices).
func TestLoopWipeOtherDisks(t *testing.T) {
	fixtures(t)
	for _, c := range []string{"blkid", "wipefs", "sfdisk", "mkfs.vfat", "mkfs.xfs", "mkswap"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Fatalf("%s not found: run `make deps`", c)
		}
	}
	srv := newServer(t)
	sys := loopdev.Attach(t, 64<<20, 512)
	dos := loopdev.Attach(t, 64<<20, 512)
	gpt := loopdev.Attach(t, 64<<20, 512)
	whole := loopdev.Attach(t, 320<<20, 512)

	sfdisk := exec.Command("sfdisk", "-q", dos.Path)
	sfdisk.Stdin = strings.NewReader("label: dos\nstart=2048, size=32768, type=c\nstart=34816, size=65536, type=83\n")
	if out, err := sfdisk.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	loopdev.Run(t, "partx", "-a", dos.Path)
	loopdev.Run(t, "mkfs.vfat", dos.Path+"p1")
	loopdev.Run(t, "mkfs.ext4", "-q", "-F", dos.Path+"p2")
	gptParts := gpt.Partition(t, 16, 32)
	loopdev.Run(t, "mkswap", gptParts[0])
	loopdev.Run(t, "mkfs.ext4", "-q", "-F", gptParts[1])
	loopdev.Run(t, "mkfs.xfs", "-q", "-f", whole.Path)
	// Where the old filesystems started, probed on the whole device.
	oldOffsets := map[*loopdev.Device][]int64{dos: {0, 2048 * 512, 34816 * 512}, gpt: {0, 1 << 20, 17 << 20}, whole: {0}}
	for d, offs := range oldOffsets {
		for _, off := range offs {
			if loopdev.Signatures(t, d.Path, off) == "" {
				t.Fatalf("the test's layout left nothing at %s+%d", d.Path, off)
			}
		}
	}
	exec.Command("partx", "-d", dos.Path).Run()
	exec.Command("partx", "-d", gpt.Path).Run()

	h := faketree.Host{Disks: []faketree.Disk{
		{Name: "nvme0n1", Size: sys.Size, Device: sys.Path, WWID: "eui.0"},
		{Name: "nvme1n1", Size: dos.Size, Device: dos.Path, WWID: "eui.1"},
		{Name: "nvme2n1", Size: gpt.Size, Device: gpt.Path, WWID: "eui.2"},
		{Name: "sda", Size: whole.Size, Device: whole.Path, Rotational: true},
	}}
	root := buildHost(t, h)
	r := write(t, root, "--image", srv.url("zst"), "--sha256", rawSHA, "--disk", "auto", "--image-size", fmt.Sprint(imageSize), "--wipe-other-disks")
	wantCode(t, r, "")
	if r.rep.Disk.Name != "nvme0n1" || !holds(t, sys, rawImage) {
		t.Fatalf("install disk %+v", r.rep.Disk)
	}
	for d, offs := range oldOffsets {
		for _, off := range offs {
			if s := loopdev.Signatures(t, d.Path, off); s != "" {
				t.Errorf("%s+%d after the wipe: %s", d.Path, off, s)
			}
		}
	}
	for _, d := range r.rep.Disks {
		if d.Wiped != (d.Name != "nvme0n1") {
			t.Errorf("%s wiped=%v", d.Name, d.Wiped)
		}
	}

	// The kernel holds the disk (a mounted partition): the exclusive open
	// refuses it, after the image was written.
	parts := dos.Partition(t, 16)
	loopdev.Mount(t, parts[0])
	r = write(t, buildHost(t, h), "--image", srv.url("zst"), "--sha256", rawSHA, "--disk", "/dev/nvme0n1", "--wipe-other-disks")
	wantCode(t, r, report.CodeDiskBusy)
	if !strings.Contains(r.rep.Error.Message, "the image is written and verified") || !strings.Contains(r.rep.Error.Message, "kernel holds it") {
		t.Fatalf("a disk the kernel holds: %s", r.rep.Error.Message)
	}
}
