package diskimage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/configpart"
)

func buildImage(t *testing.T, size int64, opts ...ImageOption) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "metal-amd64.raw")
	if err := BuildTalosLikeImage(p, size, opts...); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestImageBootsAndCarriesVersion(t *testing.T) {
	p := buildImage(t, 16<<20, WithTalosVersion("v1.12.3"))
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != 16<<20 {
		t.Fatalf("size %d, want %d", st.Size(), 16<<20)
	}
	l, err := InspectFile(p)
	if err != nil {
		t.Fatalf("fresh image does not boot: %v", err)
	}
	if l.TalosVersion != "v1.12.3" {
		t.Fatalf("version %q", l.TalosVersion)
	}
	var names []string
	for _, part := range l.Partitions {
		names = append(names, part.Name)
	}
	if got := strings.Join(names, ","); got != "BIOS,EFI,BOOT,META,STATE" {
		t.Fatalf("partitions %s", got)
	}
}

// sgdisk is an independent GPT implementation: it must find the table valid.
func TestImageIsValidGPTForSgdisk(t *testing.T) {
	sgdisk, err := exec.LookPath("sgdisk")
	if err != nil {
		t.Fatal("sgdisk not found: run `make deps` (Debian package gdisk)")
	}
	p := buildImage(t, 8<<20)
	out, err := exec.Command(sgdisk, "-v", p).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "No problems found") {
		t.Fatalf("sgdisk -v: %v\n%s", err, out)
	}
	out, err = exec.Command(sgdisk, "-p", p).CombinedOutput()
	if err != nil {
		t.Fatalf("sgdisk -p: %v\n%s", err, out)
	}
	for _, name := range []string{"BIOS", "EFI", "BOOT", "META", "STATE"} {
		if !strings.Contains(string(out), name) {
			t.Errorf("sgdisk does not list partition %s:\n%s", name, out)
		}
	}
}

func TestImageIsDeterministic(t *testing.T) {
	digest := func(opts ...ImageOption) [32]byte {
		h := sha256.New()
		if err := WriteTalosLikeImage(h, 8<<20, opts...); err != nil {
			t.Fatal(err)
		}
		return [32]byte(h.Sum(nil))
	}
	if first, second := digest(), digest(); first != second {
		t.Fatal("same size and version gave different images")
	}
	if digest(WithTalosVersion("v1.12.0")) == digest(WithTalosVersion("v1.12.1")) {
		t.Fatal("different versions gave the same image")
	}
}

func TestImageRejectsBadArguments(t *testing.T) {
	for _, tc := range []struct {
		size    int64
		version string
	}{
		{size: 4 << 20, version: "v1"},
		{size: 8<<20 + 512, version: "v1"},
		{size: 8 << 20, version: ""},
		{size: 8 << 20, version: "v1\nv2"},
	} {
		err := WriteTalosLikeImage(io.Discard, tc.size, WithTalosVersion(tc.version))
		if err == nil {
			t.Errorf("size %d version %q: no error", tc.size, tc.version)
		}
	}
}

// A disk bigger than the image (the usual case) boots once the image is at its start.
func TestImageOnLargerDiskBoots(t *testing.T) {
	img := buildImage(t, 8<<20)
	disk := filepath.Join(t.TempDir(), "nvme0n1")
	data, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(disk)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := InspectFile(disk); err != nil {
		t.Fatalf("image on a larger disk: %v", err)
	}
}

func TestInspectRefusesDamagedDisks(t *testing.T) {
	img := buildImage(t, 8<<20)
	orig, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Inspect(bytes.NewReader(orig), int64(len(orig)))
	if err != nil {
		t.Fatal(err)
	}
	boot, _ := l.Partition("BOOT")
	for _, tc := range []struct {
		name   string
		damage func(b []byte) []byte
		want   string
	}{
		{"empty disk", func(b []byte) []byte { return make([]byte, len(b)) }, "no GPT header"},
		{"first MiB wiped", func(b []byte) []byte { clear(b[:1<<20]); return b }, "no GPT header"},
		{"header bit flip", func(b []byte) []byte { b[512+40] ^= 1; return b }, "header CRC"},
		{"entries bit flip", func(b []byte) []byte { b[1024+60] ^= 1; return b }, "entries CRC"},
		{"no boot marker", func(b []byte) []byte { b[boot.Offset] ^= 0xff; return b }, "boot marker"},
		{"truncated", func(b []byte) []byte { return b[:2048] }, "read GPT entries"},
		{"partition beyond disk", func(b []byte) []byte { return b[:4<<20] }, "outside the disk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.damage(bytes.Clone(orig))
			_, err := Inspect(bytes.NewReader(d), int64(len(d)))
			if !errors.Is(err, ErrNotBootable) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want not bootable with %q", err, tc.want)
			}
		})
	}
}

func TestStateRoundTripAndReset(t *testing.T) {
	p := buildImage(t, 8<<20)
	got, err := ReadState(p)
	if err != nil || got != nil {
		t.Fatalf("fresh image state = %q, %v; want none", got, err)
	}
	cfg := []byte("version: v1alpha1\nmachine:\n  type: worker\n")
	if err := WriteState(p, cfg); err != nil {
		t.Fatal(err)
	}
	if got, err = ReadState(p); err != nil || !bytes.Equal(got, cfg) {
		t.Fatalf("state = %q, %v", got, err)
	}
	if _, err := InspectFile(p); err != nil {
		t.Fatalf("state write broke the boot check: %v", err)
	}
	if err := WriteState(p, make([]byte, 2<<20)); err == nil {
		t.Fatal("oversized config accepted")
	}
	// Corrupt the stored config: the checksum catches it.
	l, _ := InspectFile(p)
	state, _ := l.Partition("STATE")
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("X"), state.Offset+50); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := ReadState(p); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("corrupt state: %v", err)
	}
	// Rewriting the image (reinstall) drops the config.
	if err := BuildTalosLikeImage(p, 8<<20); err != nil {
		t.Fatal(err)
	}
	if got, err = ReadState(p); err != nil || got != nil {
		t.Fatalf("after reinstall state = %q, %v", got, err)
	}
}

func TestStateOnUnbootableDisk(t *testing.T) {
	p := filepath.Join(t.TempDir(), "disk")
	if err := os.WriteFile(p, make([]byte, 8<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteState(p, []byte("x")); !errors.Is(err, ErrNotBootable) {
		t.Fatalf("WriteState on empty disk: %v", err)
	}
	if _, err := ReadState(p); !errors.Is(err, ErrNotBootable) {
		t.Fatalf("ReadState on empty disk: %v", err)
	}
}

func BenchmarkWriteTalosLikeImage(b *testing.B) {
	b.SetBytes(64 << 20)
	for b.Loop() {
		if err := WriteTalosLikeImage(io.Discard, 64<<20); err != nil {
			b.Fatal(err)
		}
	}
}

// The firmware boots the UKI: its kernel arguments come back from the disk.
func TestKernelArgs(t *testing.T) {
	l, err := InspectFile(buildImage(t, 8<<20))
	if err != nil || l.KernelArgs != DefaultKernelArgs {
		t.Fatalf("default: %q %v", l.KernelArgs, err)
	}
	p := buildImage(t, 16<<20, WithKernelArgs(MetalISOKernelArgs), WithTalosVersion("v1.12.2"))
	if l, err = InspectFile(p); err != nil || l.KernelArgs != MetalISOKernelArgs || l.TalosVersion != "v1.12.2" {
		t.Fatalf("metal-iso: %+v %v", l, err)
	}
	if err := WriteTalosLikeImage(io.Discard, 8<<20, WithKernelArgs(" ")); err == nil {
		t.Fatal("empty kernel arguments accepted")
	}
	// No UKI in the EFI partition: nothing for the firmware to boot.
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(make([]byte, 1<<20), 2<<20) // the EFI FAT's boot sector and FATs
	f.Close()
	if _, err := InspectFile(p); !errors.Is(err, ErrNotBootable) || !strings.Contains(err.Error(), "EFI") {
		t.Fatalf("EFI partition wiped: %v", err)
	}
}

// em-imager write-config's partition after the image leaves it bootable, and
// the config is where the simulated Talos reads it.
func TestBootsWithMetalISOPartition(t *testing.T) {
	img := buildImage(t, 16<<20, WithKernelArgs(MetalISOKernelArgs))
	if err := os.Truncate(img, 256<<20); err != nil {
		t.Fatal(err)
	}
	cfg := []byte("version: v1alpha1\n")
	if _, err := configpart.Write(context.Background(), img, cfg, configpart.Options{}); err != nil {
		t.Fatal(err)
	}
	l, err := InspectFile(img)
	if err != nil {
		t.Fatal(err)
	}
	state, _ := l.Partition("STATE")
	if p, ok := l.Partition(configpart.PartitionName); !ok || p.Offset != state.Offset+state.Size {
		t.Fatalf("partitions %+v", l.Partitions)
	}
	if got, _, err := configpart.Read(img, SectorSize); err != nil || !bytes.Equal(got, cfg) {
		t.Fatalf("config: %q %v", got, err)
	}
	// STATE still works (Talos stores the config it read there).
	if err := WriteState(img, cfg); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadState(img); err != nil || !bytes.Equal(got, cfg) {
		t.Fatalf("STATE: %q %v", got, err)
	}
}
