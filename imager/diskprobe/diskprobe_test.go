package diskprobe

import (
	"bytes"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/loopdev"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/testimage"
)

// The disks are made by the tools an operator's previous OS was made with
// (sgdisk, sfdisk, mkfs.*), never by this package's own idea of the formats.

func run(t *testing.T, args ...string) {
	t.Helper()
	if _, err := exec.LookPath(args[0]); err != nil {
		t.Fatalf("%s not found: run `make deps`", args[0])
	}
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func sparse(t *testing.T, name string, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return p
}

// place copies a filesystem image into the disk file at off, skipping
// zeros (both files are sparse).
func place(t *testing.T, disk string, off int64, fsImage string) {
	t.Helper()
	src, err := os.ReadFile(fsImage)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(disk, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zero := make([]byte, 64<<10)
	for i := 0; i < len(src); i += len(zero) {
		c := src[i:min(i+len(zero), len(src))]
		if !bytes.Equal(c, zero[:len(c)]) {
			if _, err := f.WriteAt(c, off+int64(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func probeFile(t *testing.T, p string, ss int) Contents {
	t.Helper()
	c, err := Probe(p, ss)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestGPTWithFilesystems(t *testing.T) {
	disk := sparse(t, "disk.img", 1<<30)
	run(t, "sgdisk", "-o",
		"-n1:2048:+100M", "-t1:ef00", "-c1:EFI",
		"-n2:0:+400M", "-c2:BOOT",
		"-n3:0:+64M", "-t3:8200", "-c3:swap",
		"-n4:0:+128M", "-c4:data",
		"-n5:0:+16M", "-t5:fd00", disk)
	efi := sparse(t, "efi", 100<<20)
	run(t, "mkfs.vfat", "-F", "32", "-n", "ESP", efi)
	place(t, disk, 1<<20, efi)
	boot := sparse(t, "boot", 400<<20)
	run(t, "mkfs.xfs", "-q", "-f", "-L", "BOOT", boot)
	place(t, disk, 101<<20, boot)
	swap := sparse(t, "swap", 64<<20)
	run(t, "mkswap", "-L", "swappy", swap)
	place(t, disk, 501<<20, swap)
	data := sparse(t, "data", 128<<20)
	run(t, "mkfs.ext4", "-q", "-F", "-L", "data", data)
	place(t, disk, 565<<20, data)

	c := probeFile(t, disk, 512)
	want := []Partition{
		{Number: 1, Name: "EFI", Type: "EFI system", Start: 1 << 20, Size: 100 << 20, Filesystem: "vfat", Label: "ESP"},
		{Number: 2, Name: "BOOT", Type: "Linux filesystem", Start: 101 << 20, Size: 400 << 20, Filesystem: "xfs", Label: "BOOT"},
		{Number: 3, Name: "swap", Type: "Linux swap", Start: 501 << 20, Size: 64 << 20, Filesystem: "swap", Label: "swappy"},
		{Number: 4, Name: "data", Type: "Linux filesystem", Start: 565 << 20, Size: 128 << 20, Filesystem: "ext4", Label: "data"},
		{Number: 5, Type: "Linux RAID", Start: 693 << 20, Size: 16 << 20},
	}
	if c.Table != "gpt" || c.TableNote != "" || c.SectorSize != 512 || len(c.Partitions) != len(want) {
		t.Fatalf("contents %+v", c)
	}
	for i, w := range want {
		if c.Partitions[i] != w {
			t.Errorf("partition %d: %+v, want %+v", i+1, c.Partitions[i], w)
		}
	}
	const line = `GPT, 5 partitions: 1 "EFI" 105 MB vfat "ESP", 2 "BOOT" 419 MB xfs, 3 "swap" 67.1 MB swap "swappy", 4 "data" 134 MB ext4, 5 16.8 MB Linux RAID`
	if c.String() != line {
		t.Fatalf("String:\n%s\nwant\n%s", c, line)
	}

	// The primary header damaged, then wiped: the backup still tells.
	f, _ := os.OpenFile(disk, os.O_RDWR, 0)
	f.WriteAt([]byte{0xff}, 512+20)
	c = probeFile(t, disk, 512)
	if c.Table != "gpt" || !strings.Contains(c.TableNote, "checksum") || len(c.Partitions) != 5 {
		t.Fatalf("damaged header: %+v", c)
	}
	f.WriteAt(make([]byte, 1<<20), 0)
	f.Close()
	c = probeFile(t, disk, 512)
	if c.Table != "gpt" || !strings.Contains(c.TableNote, "backup") || len(c.Partitions) != 5 || c.Partitions[3].Filesystem != "ext4" {
		t.Fatalf("primary wiped: %+v", c)
	}
}

func TestMBR(t *testing.T) {
	disk := sparse(t, "disk.img", 256<<20)
	cmd := exec.Command("sfdisk", "-q", disk)
	cmd.Stdin = strings.NewReader("label: dos\nstart=2048, size=131072, type=83\nsize=65536, type=82\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	data := sparse(t, "data", 64<<20)
	run(t, "mkfs.ext4", "-q", "-F", "-O", "^has_journal,^extent,^64bit,^flex_bg", "-L", "old", data)
	place(t, disk, 1<<20, data)
	c := probeFile(t, disk, 512)
	if c.Table != "mbr" || len(c.Partitions) != 2 || c.Partitions[0].Filesystem != "ext2" || c.Partitions[0].Label != "old" ||
		c.Partitions[0].Type != "Linux" || c.Partitions[1].Type != "Linux swap" || c.Partitions[1].Start != 65<<20 {
		t.Fatalf("contents %+v", c)
	}
	if got := c.String(); got != `MBR, 2 partitions: 1 67.1 MB ext2 "old", 2 33.6 MB Linux swap` {
		t.Fatalf("String: %s", got)
	}
}

func TestWholeDiskBlankAndUnknown(t *testing.T) {
	disk := sparse(t, "disk.img", 64<<20)
	if c := probeFile(t, disk, 512); !c.Blank || c.String() != "nothing: its first MiB is zeros" {
		t.Fatalf("blank: %+v", c)
	}
	run(t, "mkfs.ext4", "-q", "-F", "-L", "whole", disk)
	if c := probeFile(t, disk, 512); c.Table != "" || c.Filesystem != "ext4" || c.Label != "whole" ||
		c.String() != `ext4 "whole" on the whole disk, no partition table` {
		t.Fatalf("whole-disk ext4: %+v", c)
	}
	run(t, "mkfs.vfat", "-n", "STICK", disk)
	if c := probeFile(t, disk, 512); c.Filesystem != "vfat" || c.Label != "STICK" || c.Table != "" {
		t.Fatalf("whole-disk FAT (its boot sector ends in 55 AA too): %+v", c)
	}
	noise := make([]byte, 1<<20)
	rand.Read(noise)
	os.WriteFile(disk, noise, 0o644)
	if c := probeFile(t, disk, 512); c.Blank || c.Table != "" || c.Filesystem != "" || !strings.Contains(c.String(), "recognises") {
		t.Fatalf("random data: %+v", c)
	}
}

// A Talos image at both sector sizes, the way em-imager leaves a disk.
func TestTalosImage(t *testing.T) {
	for _, ss := range []int{512, 4096} {
		p := filepath.Join(t.TempDir(), "talos.raw")
		if _, err := testimage.Write(p, testimage.Spec{Size: 32 << 20, DataBytes: 1 << 20, SectorSize: ss, Seed: 1}); err != nil {
			t.Fatal(err)
		}
		c := probeFile(t, p, 0)
		var names []string
		for _, q := range c.Partitions {
			names = append(names, q.Name)
		}
		if c.Table != "gpt" || c.SectorSize != ss || c.TableNote != "" || strings.Join(names, ",") != "EFI,BIOS,BOOT,META,STATE,EPHEMERAL" {
			t.Fatalf("%d-byte sectors: %+v", ss, c)
		}
	}
}

// TestBlockDevice reads a real 4Kn loop device partitioned by sgdisk, one
// partition holding ext4 (made through the partition's own device).
func TestBlockDevice(t *testing.T) {
	loopdev.Require(t)
	d := loopdev.Attach(t, 64<<20, 4096)
	parts := d.Partition(t, 16, 16)
	loopdev.Run(t, "mkfs.ext4", "-q", "-F", "-L", "second", parts[1])
	c := probeFile(t, d.Path, 4096)
	if c.Table != "gpt" || c.SectorSize != 4096 || len(c.Partitions) != 2 || c.Partitions[1].Filesystem != "ext4" ||
		c.Partitions[1].Label != "second" || c.Partitions[1].Size != 16<<20 {
		t.Fatalf("contents %+v", c)
	}
}
