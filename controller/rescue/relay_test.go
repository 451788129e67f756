package rescue

import (
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// TestRelayProgressSplitsProgressFromOtherLines: JSON progress lines reach
// onProgress, every other line (a JSON object without a phase too) lands in
// the tail that explains a failed run.
func TestRelayProgressSplitsProgressFromOtherLines(t *testing.T) {
	in := strings.Join([]string{
		`{"phase":"write","bytesIn":10,"bytesOut":20,"rawMBps":1}`,
		`plain warning`,
		`{"other":"json"}`,
		`{"phase":"done","bytesIn":10,"bytesOut":20,"rawMBps":1}`,
	}, "\n")
	var got []string
	var tail tailBuffer
	relayProgress(strings.NewReader(in), func(p report.Progress) { got = append(got, p.Phase) }, &tail)
	if strings.Join(got, ",") != "write,done" {
		t.Fatalf("progress phases: %v", got)
	}
	if tail.String() != `plain warning | {"other":"json"}` {
		t.Fatalf("tail: %q", tail.String())
	}
	// No callback: progress lines are still not kept in the tail.
	var tail2 tailBuffer
	relayProgress(strings.NewReader(in), nil, &tail2)
	if tail2.String() != tail.String() {
		t.Fatalf("tail without a callback: %q", tail2.String())
	}
}
