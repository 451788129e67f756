package kubeversion

import (
	"errors"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		talos, kubelet, cp string
		want               string // "" ok, else part of the reason
	}{
		{"v1.12.4", "1.34.2", "1.34.5", ""},
		{"v1.12.4", "1.31.0", "1.34.5", ""}, // three minors older: allowed
		{"v1.12.4", "1.30.0", "1.34.5", "more than 3"},
		{"v1.12.4", "1.35.0", "1.34.5", "newer than the API server"},
		{"v1.12.4", "1.36.0", "", "too new to be used with Talos"}, // Talos machinery's own default on Talos 1.12
		{"v1.12.4", "1.29.9", "", "too old"},
		{"v1.12.4", "1.34.0", "", ""},
		{"v1.13.0", "1.36.0", "1.36.1", ""},
		{"v1.12.4", "banana", "1.34.5", "not a version"},
		{"nope", "1.34.0", "1.34.5", "Talos version"},
		{"v1.12.4", "1.34.0", "x", "API server version"},
	} {
		err := Check(tc.talos, tc.kubelet, tc.cp)
		var skew *SkewError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Check(%s, %s, %s) = %v, want ok", tc.talos, tc.kubelet, tc.cp, err)
		case tc.want != "" && (!errors.As(err, &skew) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Check(%s, %s, %s) = %v, want a SkewError saying %q", tc.talos, tc.kubelet, tc.cp, err, tc.want)
		}
	}
}
