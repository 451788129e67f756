package blockdev

import (
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// TestParseMountinfoLine: the source comes after the "-" separator, whose
// position moves with the optional fields; escapes are undone.
func TestParseMountinfoLine(t *testing.T) {
	m, ok := parseMountinfoLine(`36 35 259:2 / /mnt\040data rw,noatime shared:1 master:2 - ext4 /dev/nvme0n1p2 rw`)
	if !ok || m.source != "/dev/nvme0n1p2" || m.mount != "/mnt data" || m.major != 259 || m.minor != 2 {
		t.Fatalf("got %+v, %v", m, ok)
	}
	if _, ok := parseMountinfoLine("36 35 0:5 / /dev rw"); ok {
		t.Fatal("a line without the separator parsed")
	}
}

// TestUnfitReason: the first reason a disk is no data disk, "" for one.
func TestUnfitReason(t *testing.T) {
	for _, c := range []struct {
		in   Info
		want string
	}{
		{Info{}, "no medium (size 0)"},
		{Info{Disk: report.Disk{SizeBytes: 1, ReadOnly: true}, USB: true}, "read-only"},
		{Info{Disk: report.Disk{SizeBytes: 1}, USB: true}, "USB device"},
		{Info{Disk: report.Disk{SizeBytes: 1, Removable: true}}, "removable media"},
		{Info{Disk: report.Disk{SizeBytes: 1}}, ""},
	} {
		if got := unfitReason(c.in); got != c.want {
			t.Errorf("unfitReason(%+v) = %q, want %q", c.in, got, c.want)
		}
	}
}
