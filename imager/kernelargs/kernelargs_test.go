package kernelargs

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/fat32"
	"github.com/diskfs/go-diskfs/partition/gpt"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/testimage"
)

// What the Image Factory builds for a schematic with
// customization.extraKernelArgs: [talos.config=metal-iso].
const factoryCmdline = "talos.platform=metal console=tty0 init_on_alloc=1 slab_nomerge pti=on consoleblank=0 nvme_core.io_timeout=4294967295 printk.devkmsg=on selinux=1 talos.config=metal-iso"

func TestParse(t *testing.T) {
	got := Parse(`  console=ttyS0 quiet  talos.config=metal-iso  dyndbg="file x.c +p" talos.config=https://x ` + "\n")
	want := []Param{
		{Key: "console", Value: "ttyS0", HasValue: true},
		{Key: "quiet"},
		{Key: "talos.config", Value: "metal-iso", HasValue: true},
		{Key: "dyndbg", Value: "file x.c +p", HasValue: true},
		{Key: "talos.config", Value: "https://x", HasValue: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse:\n%+v\nwant\n%+v", got, want)
	}
	for cmdline, want := range map[string]bool{
		factoryCmdline:                                   true,
		"talos.platform=metal":                           false,
		"talos.config=none":                              false,
		"talos.config=metal-iso-2":                       false,
		"xtalos.config=metal-iso":                        false,
		"talos.config=http://h/c talos.config=metal-iso": false, // Talos takes the first
		`talos.config="metal-iso"`:                       true,
	} {
		if MetalISO(cmdline) != want {
			t.Errorf("MetalISO(%q) = %v", cmdline, !want)
		}
	}
}

func image(t *testing.T, sectorSize int, cmdline string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "metal-amd64.raw")
	if _, err := testimage.Write(p, testimage.Spec{Size: 48 << 20, DataBytes: 4 << 20, SectorSize: sectorSize, Seed: 5, UKICmdline: cmdline, TalosVersion: "v1.12.4"}); err != nil {
		t.Fatal(err)
	}
	return p
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return string(out)
}

func TestFromDisk(t *testing.T) {
	for _, ss := range []int{512, 4096} {
		t.Run(strconv.Itoa(ss), func(t *testing.T) {
			img := image(t, ss, factoryCmdline)
			got, err := FromDisk(img, ss)
			if err != nil {
				t.Fatal(err)
			}
			if got.Cmdline != factoryCmdline || got.Source != "EFI/Linux/Talos-v1.12.4.efi" || !MetalISO(got.Cmdline) {
				t.Fatalf("FromDisk: %+v", got)
			}
		})
	}
	// Without the schematic's argument.
	img := image(t, 512, "talos.platform=metal console=tty0")
	if got, err := FromDisk(img, 512); err != nil || MetalISO(got.Cmdline) || got.Cmdline != "talos.platform=metal console=tty0" {
		t.Fatalf("plain image: %+v %v", got, err)
	}
	// An image whose EFI partition holds no FAT (GRUB-only, or not Talos).
	img = image(t, 512, "")
	if _, err := FromDisk(img, 512); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no UKI: %v", err)
	}
	if _, err := FromDisk(filepath.Join(t.TempDir(), "none"), 512); err == nil {
		t.Fatal("a missing file has a command line")
	}
}

// The PE file is real enough for binutils: objdump finds its sections and
// objcopy extracts the same command line.
func TestUKIWithBinutils(t *testing.T) {
	img := image(t, 512, factoryCmdline)
	fs := esp(t, img, true)
	f, err := fs.OpenFile("/EFI/Linux/Talos-v1.12.4.efi", os.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	uki := filepath.Join(t.TempDir(), "uki.efi")
	if err := os.WriteFile(uki, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if h := run(t, "objdump", "-h", uki); !strings.Contains(h, ".cmdline") || !strings.Contains(h, ".linux") || !strings.Contains(h, "pei-x86-64") {
		t.Fatalf("objdump -h:\n%s", h)
	}
	out := filepath.Join(t.TempDir(), "cmdline")
	run(t, "objcopy", "-O", "binary", "--only-section=.cmdline", uki, out)
	if b, _ := os.ReadFile(out); strings.TrimRight(string(b), "\x00") != factoryCmdline {
		t.Fatalf("objcopy .cmdline: %q", b)
	}
}

// A second UKI (an upgraded disk): which one boots is sd-boot's state.
func TestSeveralUKIs(t *testing.T) {
	img := image(t, 512, factoryCmdline)
	f, err := esp(t, img, false).OpenFile("/EFI/Linux/Talos-v1.12.5.efi", os.O_CREATE|os.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(testimage.UKI("talos.platform=metal", "v1.12.5", nil))
	f.Close()
	if _, err := FromDisk(img, 512); err == nil || !strings.Contains(err.Error(), "several") {
		t.Fatalf("two UKIs: %v", err)
	}
}

// esp opens the image's EFI system partition with go-diskfs.
func esp(t *testing.T, img string, readOnly bool) *fat32.FileSystem {
	t.Helper()
	b, err := file.OpenFromPathWithExclusive(img, readOnly, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	tb, err := gpt.Read(b, 512, 512)
	if err != nil {
		t.Fatal(err)
	}
	p := tb.Partitions[0]
	fs, err := fat32.Read(b, int64(p.End-p.Start+1)*512, int64(p.Start)*512, 512)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}
