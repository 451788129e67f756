package faketree

import (
	"path/filepath"
	"testing"
)

// TestDiskParent pins where each kind of disk hangs in sysfs: the imager tells buses apart
// (USB, virtual) by these paths.
func TestDiskParent(t *testing.T) {
	pci := filepath.Join("/s", "devices", "pci0000:00", "0000:00:11.0")
	for _, c := range []struct {
		d    Disk
		want string
	}{
		{Disk{Name: "sda", USB: true}, filepath.Join(pci, "usb1", "1-1", "1-1:1.0", "host6", "target6:0:0", "6:0:0:0")},
		{Disk{Name: "nvme0n1"}, filepath.Join(pci, "nvme", "nvme0")},
		{Disk{Name: "sdb"}, filepath.Join(pci, "ata1", "host0", "target0:0:0", "0:0:0:0")},
		{Disk{Name: "loop3"}, filepath.Join("/s", "devices", "virtual")},
		{Disk{Name: "zram0"}, filepath.Join("/s", "devices", "virtual")},
		{Disk{Name: "vda"}, pci},
	} {
		if got := diskParent("/s", 1, c.d); got != c.want {
			t.Errorf("diskParent(%+v) = %s, want %s", c.d, got, c.want)
		}
	}
}
