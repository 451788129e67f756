package wipe

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/loopdev"
)

// These tests lay out disk images (regular files) with the tools a previous
// tenant's installer would have used (sgdisk, sfdisk, mkfs.*, mkswap), wipe
// them, and ask util-linux's blkid and wipefs, not this package, whether
// anything is left. loop_test.go in imager/cli does the same through the
// kernel on loop devices.

func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, c := range tools {
		if _, err := exec.LookPath(c); err != nil {
			t.Fatalf("%s not found: run `make deps` (gdisk, util-linux, e2fsprogs, xfsprogs, dosfstools)", c)
		}
	}
}

func run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// disk makes a file of size bytes of random-looking data (a used disk is
// never blank): one random MiB over and over, each copy stamped with its
// offset so no two are alike.
func disk(t *testing.T, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1<<20)
	rand.Read(b)
	for off := int64(0); off < size; off += int64(len(b)) {
		copy(b, fmt.Sprint(off))
		if _, err := f.WriteAt(b[:min(int64(len(b)), size-off)], off); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func TestWipeLayouts(t *testing.T) {
	need(t, "blkid", "wipefs", "sgdisk", "sfdisk", "mkfs.ext4", "mkfs.xfs", "mkfs.vfat", "mkswap")
	const mib = 1 << 20
	cases := []struct {
		name string
		size int64
		// lay lays the disk out and returns the offsets of what it made.
		lay func(t *testing.T, p string) []int64
	}{
		{"gpt-ext4-xfs-partitions", 400 * mib, func(t *testing.T, p string) []int64 {
			run(t, "sgdisk", "-o", "-n1:1M:+32M", "-n2:0:+320M", p)
			run(t, "mkfs.ext4", "-q", "-F", "-E", "offset="+fmt.Sprint(1*mib), p, "32M")
			// mkfs.xfs has no offset option: make it in a file and copy it in.
			x := filepath.Join(t.TempDir(), "xfs.img")
			run(t, "truncate", "-s", "320M", x)
			run(t, "mkfs.xfs", "-q", "-f", x)
			xb, _ := os.ReadFile(x)
			f, _ := os.OpenFile(p, os.O_WRONLY, 0)
			f.WriteAt(xb, 33*mib)
			f.Close()
			return []int64{0, 1 * mib, 33 * mib}
		}},
		{"dos-vfat-swap", 64 * mib, func(t *testing.T, p string) []int64 {
			cmd := exec.Command("sfdisk", "-q", p)
			cmd.Stdin = strings.NewReader("label: dos\nstart=2048, size=32768, type=c\nstart=34816, size=32768, type=82\n")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("sfdisk: %v\n%s", err, out)
			}
			run(t, "mkfs.vfat", "--offset", "2048", p, "16384")
			s := filepath.Join(t.TempDir(), "swap.img")
			run(t, "truncate", "-s", "16M", s)
			run(t, "mkswap", s)
			sb, _ := os.ReadFile(s)
			f, _ := os.OpenFile(p, os.O_WRONLY, 0)
			f.WriteAt(sb, 34816*512)
			f.Close()
			return []int64{0, 2048 * 512, 34816 * 512}
		}},
		{"whole-disk-xfs", 320 * mib, func(t *testing.T, p string) []int64 {
			run(t, "mkfs.xfs", "-q", "-f", p)
			return []int64{0}
		}},
		// An image written to a bigger disk: its backup GPT is where the
		// image ended, not at the end of the disk.
		{"image-gpt-backup-inside", 64 * mib, func(t *testing.T, p string) []int64 {
			img := filepath.Join(t.TempDir(), "img.raw")
			run(t, "truncate", "-s", "16M", img)
			run(t, "sgdisk", "-o", "-n1:0:0", img)
			ib, _ := os.ReadFile(img)
			f, _ := os.OpenFile(p, os.O_WRONLY, 0)
			f.WriteAt(ib, 0)
			f.Close()
			return []int64{0}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := disk(t, c.size)
			offsets := c.lay(t, p)
			for _, off := range offsets {
				if loopdev.Signatures(t, p, off) == "" {
					t.Fatalf("the layout left nothing at %d for the test to find", off)
				}
			}
			middle := make([]byte, 4096)
			f, _ := os.Open(p)
			f.ReadAt(middle, c.size/2)
			f.Close()

			res, err := Disk(context.Background(), p, c.size, 512)
			if err != nil {
				t.Fatal(err)
			}
			for _, off := range offsets {
				if s := loopdev.Signatures(t, p, off); s != "" {
					t.Errorf("after the wipe, at %d: %s", off, s)
				}
			}
			b, _ := os.ReadFile(p)
			if i := bytes.Index(b, []byte("EFI PART")); i >= 0 {
				t.Errorf("a GPT header is left at %d", i)
			}
			if !bytes.Equal(b[c.size/2:c.size/2+4096], middle) {
				t.Error("the wipe touched the middle of the disk: it erases signatures, not data")
			}
			if res.Bytes > 8*Span || res.Ranges == 0 {
				t.Errorf("result %+v", res)
			}
			t.Logf("%+v", res)
		})
	}
}

// TestWipeRefusesMissing: a disk that is not there is an error, not a no-op.
func TestWipeRefusesMissing(t *testing.T) {
	if _, err := Disk(context.Background(), filepath.Join(t.TempDir(), "nope"), 1<<20, 512); err == nil {
		t.Fatal("wiping a missing disk succeeded")
	}
}

func TestMerge(t *testing.T) {
	got := MergeRanges([][2]int64{{-10, 100}, {90, 300}, {5000, 6000}, {9000, 12000}, {100, 50}}, 10000, 512)
	want := [][2]int64{{0, 512}, {4608, 6144}, {8704, 10000}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("merge = %v, want %v", got, want)
	}
}
