package talosvolumes

import "testing"

// TestSignatures pins what each magic at its offset is read as, and that a
// GPT wins over a filesystem magic in the same bytes (the order counts).
func TestSignatures(t *testing.T) {
	with := func(marks map[int]string) []byte {
		b := make([]byte, 64<<10)
		for off, m := range marks {
			copy(b[off:], m)
		}
		return b
	}
	for _, tc := range []struct {
		b    []byte
		want string
	}{
		{with(map[int]string{512: "EFI PART", 0: "XFSB"}), "gpt"},
		{with(map[int]string{0: "XFSB"}), "xfs"},
		{with(map[int]string{0x438: "\x53\xef"}), "ext"},
		{with(map[int]string{4086: "SWAPSPACE2"}), "swap"},
		{with(map[int]string{510: "\x55\xaa", 82: "FAT32"}), "vfat"},
		{with(map[int]string{510: "\x55\xaa"}), ""},
		{with(map[int]string{1024: "LABELONE", 1048: "LVM2 001"}), "lvm2"},
		{with(nil), ""},
		{nil, ""},
	} {
		got := ""
		for _, s := range signatures {
			if s.match(tc.b) {
				got = s.kind
				break
			}
		}
		if got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}
