package blockdev

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/faketree"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// TestIdentities: the report carries what Talos selects disks by, read the
// way Talos reads it: the serial from device/serial only (a SCSI VPD serial
// is reported, and said to be one), the WWID, and the bus path.
func TestIdentities(t *testing.T) {
	root := build(t, faketree.Host{Disks: []faketree.Disk{
		{Name: "nvme0n1", Size: 960 * gib, Serial: "S64FNE0R800001", WWID: "eui.002538b81123f0a1"},
		{Name: "sda", Size: 8000 * gib, Rotational: true, WWID: "naa.5000c500a1b2c3d4"},
		{Name: "loop0", Size: gib},
	}})
	// The SATA disk's serial only in its VPD page, as the kernel shows SCSI disks.
	vpd := append([]byte{0, 0x80, 0, 12}, []byte("  ZL2ABCDE   ")...)
	dev, _ := filepath.EvalSymlinks(root.Sys("block", "sda", "device"))
	if err := os.WriteFile(filepath.Join(dev, "vpd_pg80"), vpd, 0o644); err != nil {
		t.Fatal(err)
	}
	disks, err := Disks(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(disks) != 2 {
		t.Fatalf("disks %+v, want nvme0n1 and sda (no loop device)", disks)
	}
	nv, sd := disks[0], disks[1]
	if nv.Serial != "S64FNE0R800001" || nv.SerialSource != report.SerialFromSysfs || nv.WWID != "eui.002538b81123f0a1" ||
		nv.BusPath != "/pci0000:00/0000:00:10.0/nvme/nvme0" {
		t.Errorf("nvme0n1 %+v", nv)
	}
	if sd.Serial != "ZL2ABCDE" || sd.SerialSource != report.SerialFromVPD || sd.WWID != "naa.5000c500a1b2c3d4" ||
		sd.BusPath != "/pci0000:00/0000:00:11.0/ata1/host0/target0:0:0/0:0:0:0" || !sd.Rotational {
		t.Errorf("sda %+v", sd)
	}
}

// TestOthers: the disks --wipe-other-disks wipes, the ones it leaves and
// says why, and a busy one refusing the whole run.
func TestOthers(t *testing.T) {
	h := faketree.Host{Disks: []faketree.Disk{
		{Name: "loop0", Size: gib},
		{Name: "nvme0n1", Size: 960 * gib},
		{Name: "nvme1n1", Size: 7680 * gib},
		{Name: "sda", Size: 32 * gib, USB: true},
		{Name: "sdb", Size: 64 * gib, Removable: true},
		{Name: "sdc", Size: 500 * gib, ReadOnly: true},
		{Name: "sdd", Size: 0},
	}}
	root := build(t, h)
	chosen := &report.Disk{Name: "nvme0n1", Path: "/dev/nvme0n1", Transport: "nvme"}
	others, skipped, err := Others(root, chosen)
	if err != nil {
		t.Fatal(err)
	}
	if len(others) != 1 || others[0].Name != "nvme1n1" {
		t.Fatalf("others %+v, want nvme1n1 only", others)
	}
	why := map[string]string{}
	for _, s := range skipped {
		why[s.Path] = s.Reason
	}
	for path, want := range map[string]string{"/dev/sda": "USB", "/dev/sdb": "removable", "/dev/sdc": "read-only", "/dev/sdd": "size 0"} {
		if !strings.Contains(why[path], want) {
			t.Errorf("%s: %q, want it left (%s)", path, why[path], want)
		}
	}

	h.Disks[2].Partitions = []string{"nvme1n1p1"}
	h.Mounts = []string{"/dev/nvme1n1p1 /mnt ext4"}
	if _, _, err := Others(build(t, h), chosen); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "/dev/nvme1n1p1 mounted on /mnt") {
		t.Fatalf("a mounted data disk: %v", err)
	}
	h.Mounts = nil
	h.Disks[2].Holders = []string{"md127"}
	if _, _, err := Others(build(t, h), chosen); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "md127") {
		t.Fatalf("a RAID member: %v", err)
	}
	if _, _, err := Others(root, &report.Disk{Path: "/tmp/disk.img", Transport: "file"}); !errors.Is(err, ErrUnsuitable) {
		t.Fatalf("an image file as the install disk must not wipe the host's disks: %v", err)
	}
}
