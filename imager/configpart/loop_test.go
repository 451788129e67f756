package configpart

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/loopdev"
	"golang.org/x/sys/unix"
)

func readInt(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// blkidExport is util-linux's low-level probe of a device, as KEY=VALUE.
func blkidExport(t *testing.T, dev string) map[string]string {
	t.Helper()
	kv := map[string]string{}
	for _, l := range strings.Split(tool(t, "blkid", "-p", "-o", "export", dev), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			kv[k] = v
		}
	}
	return kv
}

// TestLoopDevice writes the partition on a real block device (a loop device
// over a sparse file) with 512- and 4096-byte logical sectors, and checks it
// with the kernel (its partition list in sysfs), blkid, sgdisk and fsck.fat.
// This kernel has no vfat driver, so nothing is mounted.
func TestLoopDevice(t *testing.T) {
	for _, ss := range []int{512, 4096} {
		t.Run(strconv.Itoa(ss), func(t *testing.T) {
			dev := loopdev.AttachFile(t, image(t, ss, 256<<20), ss).Path
			res, err := Write(context.Background(), dev, config, Options{SectorSize: ss})
			if err != nil {
				t.Fatal(err)
			}
			if !res.BlockDevice || res.SectorSize != ss || !res.Verified || res.StartBytes != imageSize || res.PartitionNumber != 7 {
				t.Fatalf("result %+v", res)
			}
			// sgdisk reads the device's sector size: this checks the 4Kn table too.
			sgdiskVerify(t, dev)
			lines := partitionLines(t, dev)
			last := strings.Fields(lines[len(lines)-1])
			if len(lines) != 7 || last[0] != "7" || last[len(last)-1] != PartitionName || last[len(last)-2] != "0700" {
				t.Fatalf("sgdisk -p %s:\n%s", dev, strings.Join(lines, "\n"))
			}
			if start, _ := strconv.ParseInt(last[1], 10, 64); start*int64(ss) != res.StartBytes {
				t.Fatalf("sgdisk sees partition 7 at sector %d, Write reported byte %d", start, res.StartBytes)
			}

			// The kernel re-read the table (BLKRRPART, or BLKPG when the
			// loop device has no partition scanning): partition 7 is known
			// with the extent Write reported (sysfs counts 512-byte units).
			name := strings.TrimPrefix(dev, "/dev/")
			sys := "/sys/block/" + name + "/" + name + "p7/"
			if start, size := readInt(t, sys+"start"), readInt(t, sys+"size"); start*512 != res.StartBytes || size*512 != res.SizeBytes {
				t.Fatalf("the kernel sees partition 7 at %d+%d bytes, Write reported %d+%d", start*512, size*512, res.StartBytes, res.SizeBytes)
			}
			part := dev + "p7"
			kv := blkidExport(t, part)
			if kv["TYPE"] != "vfat" || kv["LABEL"] != PartitionName || kv["PART_ENTRY_NAME"] != PartitionName || kv["BLOCK_SIZE"] != strconv.Itoa(ss) {
				t.Fatalf("blkid -p %s: %v", part, kv)
			}
			if out := tool(t, "fsck.fat", "-n", "-v", part); !strings.Contains(out, "2 files") {
				t.Fatalf("fsck.fat %s:\n%s", part, out)
			}
			if ss == 512 {
				if got := tool(t, "mtype", "-i", part, "::config.yaml"); got != string(config) {
					t.Fatalf("mtype: %q", got)
				}
			}
			got, _, err := Read(dev, 0)
			if err != nil || !bytes.Equal(got, config) {
				t.Fatalf("Read %s: %q %v", dev, got, err)
			}

			// A partition held exclusively (mounted, in a RAID...) makes the
			// disk busy: the kernel refuses O_EXCL on the whole disk.
			fd, err := unix.Open(part, unix.O_RDONLY|unix.O_EXCL, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Write(context.Background(), dev, config, Options{}); !errors.Is(err, ErrBusy) {
				unix.Close(fd)
				t.Fatalf("write while a partition is held: %v, want ErrBusy", err)
			}
			unix.Close(fd)

			// Second run on the block device: replaced in place.
			second := []byte("version: v1alpha1\n# replaced\n")
			res2, err := Write(context.Background(), dev, second, Options{})
			if err != nil || !res2.Replaced || res2.PartitionNumber != 7 {
				t.Fatalf("second run: %+v %v", res2, err)
			}
			if got, _, err := Read(dev, 0); err != nil || !bytes.Equal(got, second) {
				t.Fatalf("after the second run: %q %v", got, err)
			}
			if n := len(partitionLines(t, dev)); n != 7 {
				t.Fatalf("%d partitions after the second run", n)
			}
		})
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Fatal(err)
	}
}
