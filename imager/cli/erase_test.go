package cli

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// TestEraseAllDisksFakeHost: erase --all-disks takes every disk of the
// host but virtual, USB and removable ones (listed with the reason), erases
// them all and reports each; a flag error or no disk named is refused.
func TestEraseAllDisksFakeHost(t *testing.T) {
	root := host(t)
	for _, n := range []string{"nvme0n1", "sda"} {
		oldInstall(t, filepath.Join(root, "dev", n))
	}
	usb := diskBytes(t, root, "sdb")
	r := eraseRun(t, "--sysroot", root, "--all-disks")
	wantCode(t, r, "")
	var got []string
	for _, e := range r.rep.Erased {
		got = append(got, fmt.Sprintf("%s:%s:%v", e.Name, e.Method, e.Complete && e.Verified))
	}
	if want := "[nvme0n1:discard:true nvme1n1:discard:true sda:discard:true]"; fmt.Sprint(got) != want {
		t.Fatalf("erased %v, want %s", got, want)
	}
	for _, n := range []string{"nvme0n1", "sda"} {
		if b := diskBytes(t, root, n); bytes.Count(b, []byte{0}) != len(b) {
			t.Errorf("%s is not all zeroes", n)
		}
	}
	if !bytes.Equal(diskBytes(t, root, "sdb"), usb) || !strings.Contains(strings.Join(r.rep.Warnings, "\n"), "/dev/sdb: not erased: USB device") {
		t.Errorf("the USB stick: warnings %q", r.rep.Warnings)
	}
	wantCode(t, eraseRun(t, "--sysroot", root), report.CodeInvalidArgument)
	wantCode(t, eraseRun(t, "--sysroot", root, "--all-disks", "--disk", "/dev/sda"), report.CodeInvalidArgument)
	wantCode(t, eraseRun(t, "--sysroot", root, "--all-disks", "--method", "shred"), report.CodeInvalidArgument)
}
