package breaker

import (
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
)

// TestOpens tables when counting one failure opened the breaker: the
// first opening, and an opening again after a close; a failure counted
// while open, or one that does not open it, is not.
func TestOpens(t *testing.T) {
	st := func(opened int32) *v1alpha1.InstallsStatus { return &v1alpha1.InstallsStatus{Opened: opened} }
	for _, tc := range []struct {
		name          string
		before, after *v1alpha1.InstallsStatus
		want          bool
	}{
		{"first failure, still closed", nil, st(0), false},
		{"first opening from no status", nil, st(1), true},
		{"first opening from a status", st(0), st(1), true},
		{"again after a close", st(1), st(2), true},
		{"counted while open", st(2), st(2), false},
	} {
		if got := opens(tc.before, tc.after); got != tc.want {
			t.Errorf("%s: opens = %v, want %v", tc.name, got, tc.want)
		}
	}
}
