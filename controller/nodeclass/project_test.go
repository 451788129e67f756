package nodeclass

import "testing"

// projectMismatch: one controller serves one project; an empty side is no
// mismatch.
func TestProjectMismatch(t *testing.T) {
	for _, tc := range []struct {
		spec, controller string
		mismatch         bool
	}{
		{"", "", false},
		{"p1", "", false},
		{"", "p1", false},
		{"p1", "p1", false},
		{"p1", "p2", true},
	} {
		if err := projectMismatch(tc.spec, tc.controller); (err != nil) != tc.mismatch {
			t.Errorf("projectMismatch(%q, %q) = %v, want mismatch %v", tc.spec, tc.controller, err, tc.mismatch)
		}
	}
}
