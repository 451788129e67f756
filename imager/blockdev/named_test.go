package blockdev

import (
	"errors"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// TestNamedProblem tables why a named disk is refused, in the order the
// checks run (the running system's use first), and that removable and USB
// disks pass: the operator named them.
func TestNamedProblem(t *testing.T) {
	ok := Info{Disk: report.Disk{SizeBytes: 1 << 30, Removable: true}, USB: true}
	for _, tc := range []struct {
		name         string
		edit         func(*Info)
		allowVirtual bool
		want         error
		words        string
	}{
		{"removable USB disk", func(*Info) {}, false, nil, ""},
		{"mounted", func(in *Info) { in.Uses = []string{"/dev/sda1 mounted on /boot"} }, false, ErrBusy, "used by the running system"},
		{"mounted and read-only: busy first", func(in *Info) { in.Uses, in.ReadOnly = []string{"swap"}, true }, false, ErrBusy, "swap"},
		{"held by RAID", func(in *Info) { in.Holders = []string{"md0"} }, false, ErrBusy, "held by md0"},
		{"virtual", func(in *Info) { in.Virtual = true }, false, ErrUnsuitable, "--allow-virtual"},
		{"virtual allowed", func(in *Info) { in.Virtual = true }, true, nil, ""},
		{"read-only", func(in *Info) { in.ReadOnly = true }, false, ErrUnsuitable, "read-only"},
		{"no medium", func(in *Info) { in.SizeBytes = 0 }, false, ErrUnsuitable, "no medium"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := ok
			tc.edit(&in)
			err := namedProblem(in, "/dev/sdb", tc.allowVirtual)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "/dev/sdb") || !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("err %v, want %v naming /dev/sdb and saying %q", err, tc.want, tc.words)
			}
		})
	}
}
