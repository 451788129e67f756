package configpart

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/testimage"
)

// A config with something that must never leak.
var config = []byte("version: v1alpha1\nmachine:\n  type: worker\n  token: topsecret.bootstraptoken\ncluster:\n  token: abcdef.0123456789abcdef\n")

const imageSize = 64 << 20

// image writes a Talos-like image (testimage: EFI, BIOS, BOOT, META, STATE,
// EPHEMERAL) at the start of a sparse disk file of diskSize bytes.
func image(t *testing.T, sectorSize int, diskSize int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk.img")
	if _, err := testimage.Write(p, testimage.Spec{Size: imageSize, DataBytes: 1 << 20, SectorSize: sectorSize, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, diskSize); err != nil {
		t.Fatal(err)
	}
	return p
}

func tool(t *testing.T, name string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s is not installed (make deps)", name)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}

// partitionLines is sgdisk's view of the table: one line per partition.
func partitionLines(t *testing.T, disk string) []string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(tool(t, "sgdisk", "-p", disk), "\n") {
		if regexp.MustCompile(`^\s+\d+\s+\d+\s+\d+`).MatchString(l) {
			lines = append(lines, strings.Join(strings.Fields(l), " "))
		}
	}
	return lines
}

func uniqueGUID(t *testing.T, disk, n string) string {
	t.Helper()
	m := regexp.MustCompile(`Partition unique GUID: (\S+)`).FindStringSubmatch(tool(t, "sgdisk", "-i", n, disk))
	if m == nil {
		t.Fatalf("sgdisk -i %s %s: no unique GUID", n, disk)
	}
	return m[1]
}

func sgdiskVerify(t *testing.T, disk string) {
	t.Helper()
	if out := tool(t, "sgdisk", "-v", disk); !strings.Contains(out, "No problems found") {
		t.Fatalf("sgdisk -v %s:\n%s", disk, out)
	}
}

// fsckPartition runs fsck.fat read-only on a copy of the partition.
func fsckPartition(t *testing.T, disk string, off, size int64) string {
	t.Helper()
	src, err := os.Open(disk)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	p := filepath.Join(t.TempDir(), "part.img")
	dst, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, io.NewSectionReader(src, off, size)); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	return tool(t, "fsck.fat", "-n", "-v", p)
}

func sector(t *testing.T, disk string, off int64, n int) []byte {
	t.Helper()
	f, err := os.Open(disk)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}

// written hashes where Write writes: the GPT areas at both ends, the
// image's old backup GPT and the partition after the image.
func written(t *testing.T, disk string) string {
	t.Helper()
	st, err := os.Stat(disk)
	if err != nil || !st.Mode().IsRegular() {
		return ""
	}
	h := sha256.New()
	for _, r := range [][2]int64{{0, 1 << 20}, {imageSize - 1<<20, 1<<20 + PartitionSize}, {st.Size() - 1<<20, 1 << 20}} {
		h.Write(sector(t, disk, max(0, min(r[0], st.Size()-r[1])), int(min(r[1], st.Size()))))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestWriteOnSparseFile(t *testing.T) {
	disk := image(t, 512, 1<<30)
	before := partitionLines(t, disk)
	guids := map[string]string{}
	for i := range before {
		n := strings.Fields(before[i])[0]
		guids[n] = uniqueGUID(t, disk, n)
	}
	mbr := sector(t, disk, 0, 512)

	var warnings strings.Builder
	res, err := Write(context.Background(), disk, config, Options{Log: slog.New(slog.NewTextHandler(&warnings, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if res.SHA256 != sha(config) || res.Bytes != len(config) || !res.Verified || res.Replaced || res.BlockDevice || res.SectorSize != 512 {
		t.Fatalf("result %+v", res)
	}
	// After the image's last partition, on the next MiB, PartitionSize long.
	if res.StartBytes != imageSize || res.SizeBytes != PartitionSize || res.PartitionNumber != 7 {
		t.Fatalf("partition %d at %d (%d bytes), want 7 at %d (%d bytes)", res.PartitionNumber, res.StartBytes, res.SizeBytes, imageSize, PartitionSize)
	}

	// sgdisk: the table is valid (backup GPT at the disk's end), the image's
	// partitions are untouched, one more partition named metal-iso.
	sgdiskVerify(t, disk)
	after := partitionLines(t, disk)
	if len(after) != len(before)+1 || strings.Join(after[:len(before)], "\n") != strings.Join(before, "\n") {
		t.Fatalf("partitions before:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
	}
	if want := "7 131072 229375 48.0 MiB 0700 metal-iso"; after[len(before)] != want {
		t.Fatalf("new partition %q, want %q", after[len(before)], want)
	}
	for n, g := range guids {
		if got := uniqueGUID(t, disk, n); got != g {
			t.Fatalf("partition %s GUID changed: %s -> %s", n, g, got)
		}
	}
	if !bytes.Equal(sector(t, disk, 0, 512), mbr) {
		t.Fatal("the MBR (boot code, protective entry) changed")
	}
	if bytes.Contains(sector(t, disk, imageSize-512, 512), []byte("EFI PART")) {
		t.Fatal("the image's old backup GPT header is still there")
	}
	if !bytes.HasPrefix(sector(t, disk, 1<<30-512, 512), []byte("EFI PART")) {
		t.Fatal("no backup GPT header in the disk's last sector")
	}

	// The filesystem, read by other tools: mtools and fsck.fat.
	if got := tool(t, "mtype", "-i", disk+"@@"+itoa(res.StartBytes), "::config.yaml"); got != string(config) {
		t.Fatalf("mtype config.yaml: %q", got)
	}
	label := tool(t, "mlabel", "-s", "-i", disk+"@@"+itoa(res.StartBytes), "::")
	if !strings.Contains(label, "metal-iso") {
		t.Fatalf("volume label: %q", label)
	}
	if out := fsckPartition(t, disk, res.StartBytes, res.SizeBytes); strings.Contains(out, "Warning") || !strings.Contains(out, "2 files") {
		t.Fatalf("fsck.fat:\n%s", out)
	}

	// Read back through the library, as the simulated Talos does.
	got, v, err := Read(disk, 0)
	if err != nil || !bytes.Equal(got, config) || v.PartitionNumber != 7 || v.Label != PartitionName {
		t.Fatalf("Read: %q %+v %v", got, v, err)
	}

	// Still sparse: a 1 GiB disk holds the 1 MiB of image data and the FAT.
	var st syscall.Stat_t
	if err := syscall.Stat(disk, &st); err != nil {
		t.Fatal(err)
	}
	if used := st.Blocks * 512; used > 16<<20 {
		t.Fatalf("the disk file uses %d bytes: the partition was not written sparsely", used)
	}
	if strings.Contains(warnings.String(), "topsecret") {
		t.Fatal("the config leaked into a warning")
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A 4Kn-style image: the GPT is laid out for 4096-byte sectors; the FAT uses
// them too (Linux mounts a FAT only with sectors of at least the device's).
func Test4KnImage(t *testing.T) {
	disk := image(t, 4096, 1<<30)
	if _, err := Write(context.Background(), disk, config, Options{SectorSize: 512}); !errors.Is(err, ErrSectorSize) {
		t.Fatalf("512-byte disk with a 4096-byte GPT: %v, want ErrSectorSize", err)
	}
	res, err := Write(context.Background(), disk, config, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.SectorSize != 4096 || res.StartBytes != imageSize || res.SizeBytes != PartitionSize || !res.Verified {
		t.Fatalf("result %+v", res)
	}
	if !bytes.HasPrefix(sector(t, disk, 1<<30-4096, 4096), []byte("EFI PART")) || bytes.Contains(sector(t, disk, imageSize-4096, 4096), []byte("EFI PART")) {
		t.Fatal("the backup GPT header is not (only) in the disk's last 4096-byte sector")
	}
	// fsck.fat checks the structure (mtools cannot read 4096-byte FATs);
	// FAT32 on 4 KiB clusters has fewer than 65525 of them, a warning only.
	if out := fsckPartition(t, disk, res.StartBytes, res.SizeBytes); !strings.Contains(out, "2 files") || !strings.Contains(out, "4096 bytes per logical sector") {
		t.Fatalf("fsck.fat:\n%s", out)
	}
	got, _, err := Read(disk, 4096)
	if err != nil || !bytes.Equal(got, config) {
		t.Fatalf("Read: %q %v", got, err)
	}
}

// Running it twice replaces the content; it never adds a second partition.
func TestIdempotent(t *testing.T) {
	disk := image(t, 512, 160<<20)
	first, err := Write(context.Background(), disk, config, Options{})
	if err != nil {
		t.Fatal(err)
	}
	table := partitionLines(t, disk)
	second := []byte("version: v1alpha1\nmachine:\n  type: worker\n# second run\n")
	res, err := Write(context.Background(), disk, second, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Replaced || res.PartitionNumber != first.PartitionNumber || res.StartBytes != first.StartBytes || res.SHA256 != sha(second) {
		t.Fatalf("second run %+v, first %+v", res, first)
	}
	if got := partitionLines(t, disk); strings.Join(got, "\n") != strings.Join(table, "\n") {
		t.Fatalf("the table changed on the second run:\n%s\n---\n%s", strings.Join(table, "\n"), strings.Join(got, "\n"))
	}
	sgdiskVerify(t, disk)
	if got := tool(t, "mtype", "-i", disk+"@@"+itoa(res.StartBytes), "::config.yaml"); got != string(second) {
		t.Fatalf("config after the second run: %q", got)
	}
	if got := tool(t, "mdir", "-b", "-i", disk+"@@"+itoa(res.StartBytes), "::"); strings.Count(got, "\n") != 1 {
		t.Fatalf("the partition holds more than config.yaml: %q", got)
	}
}

func TestRefusals(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		disk   func(t *testing.T) string
		config []byte
		want   error
	}{
		{"empty config", func(t *testing.T) string { return image(t, 512, 160<<20) }, []byte(" \n"), ErrConfig},
		{"config too large", func(t *testing.T) string { return image(t, 512, 160<<20) }, bytes.Repeat([]byte("a"), MaxConfigSize+1), ErrConfig},
		{"binary config", func(t *testing.T) string { return image(t, 512, 160<<20) }, []byte("version\x00"), ErrConfig},
		{"blank disk", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "blank.img")
			os.WriteFile(p, nil, 0o600)
			os.Truncate(p, 160<<20)
			return p
		}, config, ErrNotImaged},
		{"write failed: first MiB wiped", func(t *testing.T) string {
			// What em-imager leaves after a failed write: no primary GPT,
			// even if a backup survived somewhere.
			p := image(t, 512, 160<<20)
			f, _ := os.OpenFile(p, os.O_RDWR, 0)
			f.WriteAt(make([]byte, 1<<20), 0)
			f.Close()
			return p
		}, config, ErrNotImaged},
		{"primary GPT damaged", func(t *testing.T) string {
			p := image(t, 512, imageSize)
			f, _ := os.OpenFile(p, os.O_RDWR, 0)
			f.WriteAt([]byte{0xFF}, 1024+40) // first entry's start LBA: the entries' CRC fails
			f.Close()
			return p
		}, config, ErrNotImaged},
		{"no room after the image", func(t *testing.T) string { return image(t, 512, imageSize+PartitionSize) }, config, ErrNoSpace},
		{"booted since imaging", func(t *testing.T) string {
			p := image(t, 512, 256<<20)
			if _, err := Write(ctx, p, config, Options{}); err != nil {
				t.Fatal(err)
			}
			// Talos made its partitions after metal-iso.
			tool(t, "sgdisk", "-n", "0:0:+100M", "-c", "0:STATE", p)
			return p
		}, config, ErrChanged},
		{"not a disk", func(t *testing.T) string { return t.TempDir() }, config, ErrNotImaged},
	} {
		t.Run(c.name, func(t *testing.T) {
			disk := c.disk(t)
			before := written(t, disk)
			res, err := Write(ctx, disk, c.config, Options{})
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
			if strings.Contains(err.Error(), "topsecret") || res.Verified {
				t.Fatalf("error %q result %+v", err, res)
			}
			if after := written(t, disk); after != before {
				t.Fatal("a refused write changed the disk")
			}
		})
	}
}

// Read fails the way Talos does when there is no usable metal-iso volume.
func TestReadMissing(t *testing.T) {
	disk := image(t, 512, 160<<20)
	if _, _, err := Read(disk, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no partition: %v", err)
	}
	// A partition with the right name but no filesystem: Talos's volume
	// match wants a filesystem (volume.name != '').
	tool(t, "sgdisk", "-e", "-n", "0:0:+48M", "-c", "0:metal-iso", disk)
	if _, _, err := Read(disk, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("partition without a filesystem: %v", err)
	}
	// Write replaces it (it is the last partition); then remove the file.
	res, err := Write(context.Background(), disk, config, Options{})
	if err != nil || !res.Replaced {
		t.Fatalf("write over the unformatted partition: %+v %v", res, err)
	}
	tool(t, "mdel", "-i", disk+"@@"+itoa(res.StartBytes), "::config.yaml")
	if _, _, err := Read(disk, 0); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("volume without config.yaml: %v", err)
	}
}

// A FAT labelled metal-iso counts too, whatever the partition's name (Talos
// matches volume.label or volume.partition_label).
func TestReadByLabel(t *testing.T) {
	disk := image(t, 512, 160<<20)
	res, err := Write(context.Background(), disk, config, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tool(t, "sgdisk", "-c", itoa(int64(res.PartitionNumber))+":CONFIG", disk)
	got, v, err := Read(disk, 0)
	if err != nil || !bytes.Equal(got, config) || v.Label != PartitionName {
		t.Fatalf("Read by label: %q %+v %v", got, v, err)
	}
}

func TestInterruptedBeforeCommit(t *testing.T) {
	disk := image(t, 512, 160<<20)
	table := partitionLines(t, disk)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Write(ctx, disk, config, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v", err)
	}
	if got := partitionLines(t, disk); strings.Join(got, "\n") != strings.Join(table, "\n") {
		t.Fatal("an interrupted write-config changed the partition table")
	}
}

// Config sizes around cluster boundaries and the maximum come back exactly
// (go-diskfs v1.9.4 over-reads files whose reads start inside a cluster:
// 1500 bytes came back as 1536).
func TestConfigSizes(t *testing.T) {
	disk := image(t, 512, 160<<20)
	for _, n := range []int{1, 511, 512, 513, 1500, 2000, 20001, MaxConfigSize} {
		cfg := bytes.Repeat([]byte("key: value\n"), n/11+1)[:n]
		res, err := Write(context.Background(), disk, cfg, Options{})
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		got, _, err := Read(disk, 0)
		if err != nil || !bytes.Equal(got, cfg) {
			t.Fatalf("%d bytes: read back %d bytes, %v", n, len(got), err)
		}
		if out := tool(t, "mdir", "-i", disk+"@@"+itoa(res.StartBytes), "::config.yaml"); !strings.Contains(strings.ReplaceAll(out, " ", ""), strconv.Itoa(n)+"bytes") {
			t.Fatalf("%d bytes: mdir says\n%s", n, out)
		}
	}
}
