package blockdev

import (
	"errors"
	"testing"
)

// TestTransportRules pins how a disk's bus is named: the kernel name wins over the sysfs path,
// and USB over the ATA path a USB bridge also shows.
func TestTransportRules(t *testing.T) {
	for _, c := range []struct {
		name     string
		usb      bool
		resolved string
		want     string
	}{
		{"nvme0n1", false, "/sys/devices/pci0000:00/0000:00:10.0/nvme/nvme0 ", "nvme"},
		{"vda", false, "", "virtio"},
		{"loop0", false, "/sys/devices/virtual/block/loop0 ", "loop"},
		{"sda", true, "/sys/devices/x/usb1/ata1 ", "usb"},
		{"sda", false, "/sys/devices/x/ata1/host0 ", "sata"},
		{"sdb", false, "/sys/devices/x/host0 ", "scsi"},
		{"mmcblk0", false, "", ""},
	} {
		if got := transport(c.name, c.usb, c.resolved); got != c.want {
			t.Errorf("transport(%q, %v, %q) = %q, want %q", c.name, c.usb, c.resolved, got, c.want)
		}
	}
}

// TestNoneLeftError pins which error --disk auto gives when every disk is rejected.
func TestNoneLeftError(t *testing.T) {
	for _, c := range []struct {
		busy, small int
		want        error
	}{
		{0, 0, ErrNotFound},
		{1, 0, ErrBusy},
		{0, 2, ErrTooSmall},
		{1, 2, ErrBusy},
	} {
		if got := noneLeftError(c.busy, c.small); !errors.Is(got, c.want) {
			t.Errorf("noneLeftError(%d, %d) = %v, want %v", c.busy, c.small, got, c.want)
		}
	}
}
