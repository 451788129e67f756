package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// TestResolveImageFlags pins the flag checks resolveImage makes before any manifest is fetched:
// which combinations are refused, with which message, and what a command that writes needs.
func TestResolveImageFlags(t *testing.T) {
	sha := strings.Repeat("ab", 32)
	for _, c := range []struct {
		name    string
		f       imageFlags
		needSHA bool
		want    string // start of the error message, "" for none
	}{
		{"image and sha", imageFlags{image: "http://x/i.raw", sha: " " + strings.ToUpper(sha) + " "}, true, ""},
		{"inspect needs neither", imageFlags{}, false, ""},
		{"bad format", imageFlags{format: "rar"}, false, "--format: "},
		{"negative size", imageFlags{imageSize: -1}, false, "--image-size must not be negative"},
		{"short sha", imageFlags{sha: "abc"}, false, "--sha256 must be 64 hex digits, got 3 characters"},
		{"pin without manifest", imageFlags{manifestSHA: sha}, false, "--manifest-sha256 pins a --manifest"},
		{"write without image", imageFlags{sha: sha}, true, "--image or --manifest is required"},
		{"write without sha", imageFlags{image: "http://x/i.raw"}, true, "--sha256 is required with --image"},
	} {
		spec, rerr := resolveImage(context.Background(), c.f, c.needSHA)
		switch {
		case c.want == "" && rerr != nil:
			t.Errorf("%s: %v", c.name, rerr.Message)
		case c.want == "" && spec.sha != strings.ToLower(strings.TrimSpace(c.f.sha)):
			t.Errorf("%s: sha %q", c.name, spec.sha)
		case c.want != "" && (rerr == nil || rerr.Code != report.CodeInvalidArgument || !strings.HasPrefix(rerr.Message, c.want)):
			t.Errorf("%s: got %+v, want %s...", c.name, rerr, c.want)
		}
	}
}
