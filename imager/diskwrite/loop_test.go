package diskwrite

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/loopdev"
)

// TestBlockDevice writes a real 4Kn loop device. The caller's idea of the
// disk is wrong on purpose (512-byte sectors, a larger capacity): the
// device's own answers decide, before anything is written.
func TestBlockDevice(t *testing.T) {
	d := loopdev.Attach(t, 32<<20, 4096)
	before := d.Bytes(t)
	img512, sum512 := talosImage(t, 12<<20, 512, 41)
	tg, _, err := Check(img512[:HeadSize], Options{Path: d.Path, Capacity: 1 << 30, SectorSize: 512, ExpectedSHA256: sum512})
	if !errors.Is(err, ErrSectorSize) || tg.SectorSize != 4096 || tg.Capacity != 32<<20 || !tg.BlockDevice {
		t.Fatalf("Check of a 512-byte image on a 4Kn device: %v, %+v", err, tg)
	}
	res, err := Write(context.Background(), bytes.NewReader(img512), Options{Path: d.Path, Capacity: 1 << 30, SectorSize: 512, ExpectedSHA256: sum512})
	if !errors.Is(err, ErrSectorSize) || res.Written || !res.BlockDevice {
		t.Fatalf("512-byte image on a 4Kn device: %v, %+v", err, res)
	}
	big, sumBig := talosImage(t, 40<<20, 4096, 42)
	if _, err := Write(context.Background(), bytes.NewReader(big), Options{Path: d.Path, Capacity: 1 << 30, SectorSize: 4096, ExpectedSHA256: sumBig}); !errors.Is(err, ErrTooSmall) {
		t.Fatalf("image larger than the device: %v", err)
	}
	if !bytes.Equal(d.Bytes(t), before) {
		t.Fatal("a refused write changed the device")
	}

	img, sum := talosImage(t, 24<<20, 4096, 43)
	var logs strings.Builder
	res, err = Write(context.Background(), bytes.NewReader(img), Options{Path: d.Path, Capacity: 1 << 30, SectorSize: 512, ExpectedSHA256: sum, Readback: true,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	got := d.Bytes(t)
	if !bytes.Equal(got[:len(img)], img) {
		t.Fatal("the device does not hold the image")
	}
	// Zero runs are zeroed by the device (loop: a hole in its backing file).
	if !res.Direct || !res.ReadbackVerified || res.ZeroBytesSkipped < 8<<20 || res.RawBytes != int64(len(img)) {
		t.Fatalf("result %+v, logs %q", res, logs.String())
	}
}

// TestExclusiveOpen: the kernel's exclusive open refuses a mounted device
// even when nothing else noticed; the device is left as it was. The
// filesystem is frozen so that only a write under test can change its bytes.
func TestExclusiveOpen(t *testing.T) {
	d := loopdev.Attach(t, 32<<20, 512)
	loopdev.Freeze(t, loopdev.Mount(t, d.Path))
	before := d.Ends(t)
	img, sum := talosImage(t, 12<<20, 512, 51)
	if _, _, err := Check(img[:HeadSize], Options{Path: d.Path, Capacity: 32 << 20, ExpectedSHA256: sum}); !errors.Is(err, ErrBusy) {
		t.Fatalf("Check of a mounted device: %v", err)
	}
	res, err := Write(context.Background(), bytes.NewReader(img), Options{Path: d.Path, Capacity: 32 << 20, ExpectedSHA256: sum})
	if !errors.Is(err, ErrBusy) || res.Written {
		t.Fatalf("mounted device: %v, %+v", err, res)
	}
	if !bytes.Equal(d.Ends(t), before) {
		t.Fatal("the refused write changed the device")
	}
}

// TestNoHolesNoDirect writes onto ramfs, which has neither O_DIRECT nor
// hole punching: the zero runs are written, and the result says so.
func TestNoHolesNoDirect(t *testing.T) {
	loopdev.Require(t)
	dir := t.TempDir()
	loopdev.Run(t, "mount", "-t", "ramfs", "-o", "size=64m", "em-imager-test", dir)
	t.Cleanup(func() { loopdev.Run(t, "umount", dir) })
	disk := filepath.Join(dir, "disk.img")
	os.WriteFile(disk, bytes.Repeat([]byte{0xEE}, 24<<20), 0o644)
	img, sum := talosImage(t, 20<<20, 512, 61)
	var out strings.Builder
	res, err := Write(context.Background(), bytes.NewReader(img), Options{Path: disk, Capacity: 24 << 20, ExpectedSHA256: sum,
		Log: slog.New(slog.NewTextHandler(&out, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readDisk(t, disk)[:len(img)], img) {
		t.Fatal("the zero runs do not read back as zeros")
	}
	// One record a line: O_DIRECT refused, no hole punching.
	logs := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if res.Direct || res.ZeroBytesSkipped != 0 || len(logs) != 2 {
		t.Fatalf("result %+v, logs %q: nothing was skipped and O_DIRECT was not used", res, logs)
	}
}
