// Package loopdev attaches real loop block devices for em-imager's tests, so
// that they go through the kernel's block layer (exclusive opens, O_DIRECT,
// BLKGETSIZE64/BLKSSZGET, fallocate, partitions, mounts, sysfs) rather than
// through files. It needs root and losetup, partx, sgdisk and mkfs.ext4
// (`make deps`); without them the test fails, loudly, never skips.
//
// Other tests on the same machine may use loop devices at the same time, so
// a device is only ever detached by its own name, and only while it still
// is the one this test attached (same backing file).
package loopdev

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Device is one attached loop device.
type Device struct {
	Path       string // /dev/loopN
	Name       string // loopN
	File       string // backing file
	Size       int64
	SectorSize int
}

// Run runs a command and fails the test with its output if it fails.
func Run(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		tb.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Require fails the test unless it can attach loop devices.
func Require(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Fatal("the loop device tests need root (CI runs `make test` as root): they write real block devices")
	}
	for _, c := range []string{"losetup", "partx", "sgdisk", "mkfs.ext4", "mount", "umount", "unshare", "chroot"} {
		if _, err := exec.LookPath(c); err != nil {
			tb.Fatalf("%s not found: run `make deps` (util-linux, mount, gdisk, e2fsprogs)", c)
		}
	}
}

// Attach makes a size-byte backing file under the test's temporary
// directory, fills it with random bytes (a disk is never blank) and
// attaches it with the given logical sector size (512 when 0). The device
// is detached when the test ends.
func Attach(tb testing.TB, size int64, sectorSize int) *Device {
	tb.Helper()
	Require(tb)
	if sectorSize == 0 {
		sectorSize = 512
	}
	file := filepath.Join(tb.TempDir(), "disk.img")
	f, err := os.Create(file)
	if err != nil {
		tb.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		rand.Read(buf)
		if _, err := f.WriteAt(buf[:min(int64(len(buf)), size-off)], off); err != nil {
			tb.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return AttachFile(tb, file, sectorSize)
}

// AttachFile attaches an existing file with the given logical sector size
// (512 when 0), detached when the test ends.
func AttachFile(tb testing.TB, file string, sectorSize int) *Device {
	tb.Helper()
	Require(tb)
	if sectorSize == 0 {
		sectorSize = 512
	}
	st, err := os.Stat(file)
	if err != nil {
		tb.Fatal(err)
	}
	path := strings.TrimSpace(Run(tb, "losetup", "--show", "--find", "--sector-size", fmt.Sprint(sectorSize), file))
	d := &Device{Path: path, Name: filepath.Base(path), File: file, Size: st.Size(), SectorSize: sectorSize}
	tb.Cleanup(func() { d.detach(tb) })
	// Partitions added with BLKPG (partx, em-imager) outlive a detach: a
	// device an earlier user left with partitions would refuse ours
	// ("partx: error adding partitions 1-2"). The device is ours now.
	exec.Command("partx", "-d", path).Run()
	if got := strings.TrimSpace(readSys(d.Name, "queue", "logical_block_size")); got != fmt.Sprint(sectorSize) {
		tb.Fatalf("%s: logical block size %s, want %d", path, got, sectorSize)
	}
	return d
}

func readSys(name string, elem ...string) string {
	b, _ := os.ReadFile(filepath.Join(append([]string{"/sys/block", name}, elem...)...))
	return string(b)
}

func (d *Device) detach(tb testing.TB) {
	back := strings.TrimSuffix(strings.TrimSpace(readSys(d.Name, "loop", "backing_file")), " (deleted)")
	if back != d.File {
		tb.Errorf("%s is no longer backed by %s (now %q): not detaching it", d.Path, d.File, back)
		return
	}
	// Partitions added with partx stay in sysfs after a detach otherwise.
	exec.Command("partx", "-d", d.Path).Run()
	if out, err := exec.Command("losetup", "-d", d.Path).CombinedOutput(); err != nil {
		tb.Errorf("losetup -d %s: %v\n%s", d.Path, err, out)
	}
}

// Partition writes a GPT with partitions of the given sizes in MiB
// (sgdisk) and tells the kernel about them (partx: this kernel may have no
// partition table parser of its own), returning their device paths.
func (d *Device) Partition(tb testing.TB, mib ...int) []string {
	tb.Helper()
	args := []string{"sgdisk", "-o"}
	for i, m := range mib {
		args = append(args, fmt.Sprintf("-n%d:0:+%dM", i+1, m))
	}
	Run(tb, append(args, d.Path)...)
	Run(tb, "partx", "-a", d.Path)
	var out []string
	for i := range mib {
		p := fmt.Sprintf("%sp%d", d.Path, i+1)
		if _, err := os.Stat(p); err != nil {
			tb.Fatalf("partition %s: %v", p, err)
		}
		out = append(out, p)
	}
	return out
}

// Mount makes an ext4 filesystem on dev and mounts it on a temporary
// directory, unmounted when the test ends unless Unmount did it before.
func Mount(tb testing.TB, dev string) string {
	tb.Helper()
	// No lazy initialisation: nothing writes the device in the background
	// while a test compares its bytes.
	Run(tb, "mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", dev)
	dir := tb.TempDir()
	Run(tb, "mount", "-t", "ext4", dev, dir)
	tb.Cleanup(func() {
		if exec.Command("mountpoint", "-q", dir).Run() == nil {
			Unmount(tb, dir)
		}
	})
	return dir
}

// Freeze flushes the filesystem mounted at dir and holds its writes until
// the test ends: the kernel rewrites an ext4 superblock on its own (mount
// time, bytes written), so a test comparing the bytes of a mounted device
// must freeze it first or see writes nobody under test made.
func Freeze(tb testing.TB, dir string) {
	tb.Helper()
	Run(tb, "fsfreeze", "--freeze", dir)
	tb.Cleanup(func() {
		if out, err := exec.Command("fsfreeze", "--unfreeze", dir).CombinedOutput(); err != nil {
			tb.Errorf("fsfreeze --unfreeze %s: %v\n%s", dir, err, out)
		}
	})
}

// Unmount unmounts what Mount mounted.
func Unmount(tb testing.TB, dir string) {
	tb.Helper()
	if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
		tb.Errorf("umount %s: %v\n%s", dir, err, out)
	}
}

// Bytes reads the whole device, bypassing nothing: the kernel's view of it.
func (d *Device) Bytes(tb testing.TB) []byte {
	tb.Helper()
	f, err := os.Open(d.Path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	// A write through another descriptor with O_DIRECT may leave stale
	// cached pages: drop them first.
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	b := make([]byte, d.Size)
	if _, err := f.ReadAt(b, 0); err != nil {
		tb.Fatal(err)
	}
	return b
}

// Ends is the device's first and last MiB.
func (d *Device) Ends(tb testing.TB) []byte {
	tb.Helper()
	b := d.Bytes(tb)
	return append(append([]byte{}, b[:1<<20]...), b[len(b)-1<<20:]...)
}

// GPTHeaders lists every offset of the device holding a GPT header signature.
func (d *Device) GPTHeaders(tb testing.TB) []int {
	tb.Helper()
	b := d.Bytes(tb)
	var out []int
	for i := 0; ; {
		j := bytes.Index(b[i:], []byte("EFI PART"))
		if j < 0 {
			return out
		}
		out = append(out, i+j)
		i += j + 1
	}
}

// Link makes a udev-like link to the device under /dev/disk/by-id (this
// machine may run no udev), removed when the test ends.
func (d *Device) Link(tb testing.TB, name string) string {
	tb.Helper()
	dir := "/dev/disk/by-id"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	p := filepath.Join(dir, fmt.Sprintf("%s-%s-%d", name, d.Name, os.Getpid()))
	if err := os.Symlink("../../"+d.Name, p); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.Remove(p) })
	return p
}

// Signatures is what blkid's low-level probe (as Talos and Rook probe) finds
// at offset of path, plus what wipefs would erase at offset 0; "" when
// nothing.
func Signatures(tb testing.TB, path string, offset int64) string {
	tb.Helper()
	out, _ := exec.Command("blkid", "-p", "-O", fmt.Sprint(offset), path).CombinedOutput()
	found := strings.TrimSpace(string(out))
	if offset == 0 {
		w, err := exec.Command("wipefs", "--no-act", path).CombinedOutput()
		if err != nil {
			tb.Fatalf("wipefs %s: %v\n%s", path, err, w)
		}
		found += strings.TrimSpace(string(w))
	}
	return found
}
