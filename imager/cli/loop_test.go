package cli

import (
	"bytes"
	"encoding/json"
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

// These tests write real loop block devices (root; they fail without loop
// devices, never skip). With no --sysroot, em-imager reads this machine's
// own /sys, /proc and /dev; loop devices are virtual, so they are named
// with --allow-virtual. About 35 s in all on a loaded 2-core VM, beside the
// fixtures every test here shares.

// holds reports whether the device starts with the image.
func holds(t *testing.T, d *loopdev.Device, img []byte) bool {
	t.Helper()
	return bytes.Equal(d.Bytes(t)[:len(img)], img)
}

// TestLoopAutoMatchesInspect: a host described in a fake sysfs whose two
// NVMe disks are real loop devices (their numbers, mknod'ed): inspect and
// write --disk auto choose alike, with or without the image size, whether
// or not the server answers Range, and write goes through the kernel.
func TestLoopAutoMatchesInspect(t *testing.T) {
	fixtures(t)
	small, big := loopdev.Attach(t, 64<<20, 512), loopdev.Attach(t, 96<<20, 512)
	devs := map[string]*loopdev.Device{"/dev/nvme0n1": small, "/dev/nvme1n1": big}
	assertChooseAlike(t, func() string {
		return buildHost(t, faketree.Host{Disks: []faketree.Disk{
			{Name: "nvme0n1", Size: small.Size, Device: small.Path},
			{Name: "nvme1n1", Size: big.Size, Device: big.Path},
		}})
	}, func(t *testing.T, _ string, r run) {
		if d := devs[r.rep.Disk.Path]; !holds(t, d, rawImage) || !r.rep.Image.DirectIO {
			t.Fatalf("%s does not hold the image (report %+v)", d.Path, r.rep.Image)
		}
	})
}

// refused runs em-imager write on this machine, which must fail with code
// and leave the first and last MiB of the device (where partition tables
// live) byte for byte as they were.
func refused(t *testing.T, d *loopdev.Device, code string, args ...string) run {
	t.Helper()
	before := d.Ends(t)
	r := write(t, "", args...)
	wantCode(t, r, code)
	if !bytes.Equal(d.Ends(t), before) {
		t.Fatalf("the refused run changed %s: %s", d.Path, r.rep.Error.Message)
	}
	return r
}

// TestLoopByIDLink: a /dev/disk/by-id link works, and is refused when the
// device it points at has a mounted partition; refusals leave the ends of
// the device byte for byte as they were.
func TestLoopByIDLink(t *testing.T) {
	fixtures(t)
	srv := newServer(t)
	d := loopdev.Attach(t, 64<<20, 512)
	link := d.Link(t, "em-imager-test")
	r := refused(t, d, report.CodeDiskUnsuitable, "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", link)
	if !strings.Contains(r.rep.Error.Message, "--allow-virtual") {
		t.Fatalf("without --allow-virtual: %s", r.rep.Error.Message)
	}
	r = write(t, "", "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", link, "--allow-virtual")
	wantCode(t, r, "")
	if r.rep.Disk.Path != d.Path || r.rep.Disk.Requested != link || r.rep.Disk.SizeBytes != d.Size || !holds(t, d, rawImage) {
		t.Fatalf("disk %+v", r.rep.Disk)
	}

	m := loopdev.Attach(t, 64<<20, 512)
	parts := m.Partition(t, 8, 16)
	mnt := loopdev.Mount(t, parts[1])
	mlink := m.Link(t, "em-imager-test")
	r = refused(t, m, report.CodeDiskBusy, "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", mlink, "--allow-virtual")
	if !strings.Contains(r.rep.Error.Message, parts[1]+" mounted on "+mnt) {
		t.Fatalf("mounted: %s", r.rep.Error.Message)
	}
}

// TestLoop4Kn: a 512-byte image on a 4Kn device is refused with the
// device's GPT intact; a 4Kn image is written.
func TestLoop4Kn(t *testing.T) {
	fixtures(t)
	srv := newServer(t)
	d := loopdev.Attach(t, 64<<20, 4096)
	loopdev.Run(t, "sgdisk", "-o", "-n1:0:+16M", d.Path)
	r := refused(t, d, report.CodeDiskUnsuitable, "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", d.Path, "--allow-virtual")
	if !strings.Contains(r.rep.Error.Message, "512-byte sectors") {
		t.Fatal(r.rep.Error.Message)
	}
	if out := loopdev.Run(t, "sgdisk", "-v", d.Path); !strings.Contains(out, "No problems found") {
		t.Fatalf("the old GPT is damaged:\n%s", out)
	}
	r = write(t, "", "--image", srv.url("raw4k"), "--sha256", raw4kSHA, "--disk", d.Path, "--allow-virtual", "--verify-readback")
	wantCode(t, r, "")
	if !holds(t, d, files["raw4k"]) || r.rep.Disk.LogicalSectorSize != 4096 || !r.rep.Image.ReadbackVerified {
		t.Fatalf("4Kn image: %+v %+v", r.rep.Disk, r.rep.Image)
	}
}

// TestLoopTooSmall: an image the device cannot hold, whose size nothing
// declared (no --image-size, a server without Range, so no xz index), is
// refused from its GPT before the first byte is written.
func TestLoopTooSmall(t *testing.T) {
	fixtures(t)
	srv := newServer(t)
	srv.mode.Store("norange")
	d := loopdev.Attach(t, 16<<20, 512)
	refused(t, d, report.CodeDiskTooSmall, "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", d.Path, "--allow-virtual")
}

// TestLoopCorruptOverValidGPT: corrupt input over a device that held a
// valid GPT (sgdisk's: backup at the end; then em-imager's own image: backup
// where the image ended) leaves no GPT header anywhere.
func TestLoopCorruptOverValidGPT(t *testing.T) {
	fixtures(t)
	srv := newServer(t)
	d := loopdev.Attach(t, 64<<20, 512)
	loopdev.Run(t, "sgdisk", "-o", "-n1:0:0", d.Path)
	if h := d.GPTHeaders(t); len(h) != 2 || h[0] != 512 || h[1] != int(d.Size)-512 {
		t.Fatalf("sgdisk's GPT headers at %v", h)
	}
	for _, previous := range []string{"sgdisk", "em-imager"} {
		if previous == "em-imager" {
			srv.mode.Store("")
			wantCode(t, write(t, "", "--image", srv.url("raw"), "--sha256", rawSHA, "--disk", d.Path, "--allow-virtual"), "")
			if h := d.GPTHeaders(t); len(h) != 2 || h[1] != imageSize-512 {
				t.Fatalf("the image's GPT headers at %v", h)
			}
		}
		srv.mode.Store("flip")
		r := write(t, "", "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", d.Path, "--allow-virtual")
		wantCode(t, r, report.CodeCorruptInput)
		if h := d.GPTHeaders(t); len(h) != 0 {
			t.Fatalf("after %s's GPT: GPT headers left at %v", previous, h)
		}
	}
}

// TestLoopPartitioned: a partition is refused (name the whole disk), a
// disk with a mounted partition is busy, and once unmounted it is written.
func TestLoopPartitioned(t *testing.T) {
	fixtures(t)
	srv := newServer(t)
	d := loopdev.Attach(t, 64<<20, 512)
	parts := d.Partition(t, 8, 16)
	mnt := loopdev.Mount(t, parts[1])
	r := refused(t, d, report.CodeDiskUnsuitable, "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", parts[0], "--allow-virtual")
	if !strings.Contains(r.rep.Error.Message, "name the whole disk") {
		t.Fatal(r.rep.Error.Message)
	}
	refused(t, d, report.CodeDiskBusy, "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", d.Path, "--allow-virtual")
	loopdev.Unmount(t, mnt)
	r = write(t, "", "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", d.Path, "--allow-virtual", "--verify-readback")
	wantCode(t, r, "")
	if !holds(t, d, rawImage) || !r.rep.Image.ReadbackVerified {
		t.Fatalf("image %+v", r.rep.Image)
	}
}

// TestLoopDevRoot runs em-imager chrooted onto an ext4 filesystem on a
// loop device, in its own mount namespace, with a crafted /proc whose only
// mount line names the root device /dev/root (as a kernel that mounted
// root= without an initramfs does) and no mountinfo: stat("/") still finds
// the device, and em-imager refuses it.
func TestLoopDevRoot(t *testing.T) {
	fixtures(t)
	bin := imagerBinary(t)
	d := loopdev.Attach(t, 64<<20, 512)
	loopdev.Run(t, "mkfs.ext4", "-q", "-F", d.Path)
	dir := t.TempDir()
	img := filepath.Join(dir, "metal-amd64.raw")
	os.WriteFile(img, rawImage, 0o644)
	script := `set -e
R=$DIR/root
mkdir -p $R
mount -t ext4 $DEV $R
mkdir -p $R/sys $R/dev $R/proc/self
mount --rbind /sys $R/sys
mount --rbind /dev $R/dev
printf '/dev/root / ext4 rw,relatime 0 0\n' > $R/proc/self/mounts
printf 'Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n' > $R/proc/swaps
cp $BIN $R/em-imager
cp $IMG $R/metal-amd64.raw
sync
chroot $R /em-imager inspect --disk $DEV --allow-virtual > $DIR/named.json || true
chroot $R /em-imager inspect --image-size $SIZE > $DIR/auto.json || true
chroot $R /em-imager write --image /metal-amd64.raw --sha256 $SHA --disk $DEV --allow-virtual --progress none > $DIR/write.json || true
umount -R $R/sys $R/dev
umount $R
`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "DIR="+dir, "DEV="+d.Path, "BIN="+bin, "IMG="+img, "SHA="+rawSHA, fmt.Sprintf("SIZE=%d", imageSize))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	parse := func(name string) *report.Report {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		var r report.Report
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, b)
		}
		return &r
	}
	for _, name := range []string{"named.json", "write.json"} {
		r := parse(name)
		if r.Error == nil || r.Error.Code != report.CodeDiskBusy || !strings.Contains(r.Error.Message, "running system's root") {
			t.Fatalf("%s: %+v", name, r.Error)
		}
	}
	if reason := rejectedReason(parse("auto.json"), d.Path); !strings.Contains(reason, "running system's root") {
		t.Fatalf("auto: %s rejected with %q", d.Path, reason)
	}
}
