package erase

import (
	"reflect"
	"strings"
	"testing"
)

// TestOverwriteRanges: small partitions whole, large ones at both ends,
// everything with full; Left says what stays.
func TestOverwriteRanges(t *testing.T) {
	const mib = 1 << 20
	parts := [][2]int64{{mib, 2 * mib}, {2 * mib, 2*mib + 4*Span}}
	data, method, left := overwriteRanges(parts, 1<<30, mib, false)
	want := [][2]int64{{mib, 2 * mib}, {2 * mib, 2*mib + Span}, {2*mib + 3*Span, 2*mib + 4*Span}}
	if !reflect.DeepEqual(data, want) || method != MethodOverwrite || !strings.Contains(left, "1 partition(s) larger than 1 MiB") {
		t.Fatalf("parts: %v %q %q", data, method, left)
	}
	if _, _, left := overwriteRanges(nil, 1<<30, mib, false); !strings.HasPrefix(left, "no partition table") {
		t.Fatalf("no parts: %q", left)
	}
	if _, _, left := overwriteRanges(parts[:1], 1<<30, mib, false); !strings.HasPrefix(left, "the space outside") {
		t.Fatalf("small parts: %q", left)
	}
	data, method, left = overwriteRanges(parts, 1<<30, mib, true)
	if !reflect.DeepEqual(data, [][2]int64{{0, 1 << 30}}) || method != MethodOverwriteFull || left != "" {
		t.Fatalf("full: %v %q %q", data, method, left)
	}
}
