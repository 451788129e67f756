package spare

import (
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// takenTags is the take's decision on fresh tags: only a spare that is not
// quarantined nor waiting for its erase is taken, and a take writes the claim
// and the ordered phase.
func TestTakenTagsTakesOnlyAPlainSpare(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	spare := install.SetPhaseIn(nil, install.PhaseSpare, now.Add(-time.Hour))
	with := func(key, value string) []string {
		tags, _ := scaleway.SetTagIn(append([]string(nil), spare...), key, value)
		return tags
	}
	fresh := &baremetal.Server{Status: baremetal.ServerStatusReady}
	want := takeRequest{claim: "c", nodePool: "p", reservation: "r", now: now}
	for name, tc := range map[string]struct {
		tags []string
		take bool
	}{
		"spare":       {spare, true},
		"ordered":     {install.SetPhaseIn(nil, install.PhaseOrdered, now), false},
		"quarantined": {with(TagQuarantine, "bad disk"), false},
		"erasing":     {with(install.TagErasePending, "1"), false},
	} {
		t.Run(name, func(t *testing.T) {
			out, _, ok := takenTags(tc.tags, fresh, want)
			if ok != tc.take {
				t.Fatalf("took = %v, want %v", ok, tc.take)
			}
			if !ok {
				return
			}
			got := &baremetal.Server{Tags: out}
			if install.PhaseOf(got) != install.PhaseOrdered {
				t.Errorf("phase = %q, want ordered", install.PhaseOf(got))
			}
			for key, v := range map[string]string{scaleway.TagNodeClaim: "c", scaleway.TagNodePool: "p", scaleway.TagReservation: "r"} {
				if got, _ := scaleway.TagValue(out, key); got != v {
					t.Errorf("%s = %q, want %q", key, got, v)
				}
			}
		})
	}
}
