package nodeinstall

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
)

// Each constructor gives the reason, type and message the inline calls gave
// before events.go, word for word; a failure's message is cut at 1000 bytes.
func TestEventConstructors(t *testing.T) {
	claim := &karpv1.NodeClaim{}
	claim.Name = "default-abc"
	long := errors.New(strings.Repeat("x", 2000))
	failedLong := installFailed(claim, install.PhaseImaging, long, "server released")
	for _, c := range []struct {
		ev          events.Event
		typ, reason string
		wantMessage string
	}{
		{installProgress(claim, install.PhaseRescue, "booting into rescue"), corev1.EventTypeNormal, "InstallRescue", "booting into rescue"},
		{installProgress(claim, install.PhaseImaging, "writing"), corev1.EventTypeNormal, "InstallImaging", "writing"},
		{installFailed(claim, install.PhaseBooting, errors.New("no node"), "server kept as a spare"), corev1.EventTypeWarning, "InstallFailed",
			"install failed in phase booting: no node; the nodeclaim is deleted so that Karpenter replaces it; server kept as a spare"},
		{failedLong, corev1.EventTypeWarning, "InstallFailed", ("install failed in phase imaging: " + long.Error())[:1000] + "..."},
	} {
		ev := c.ev
		if ev.InvolvedObject != claim || ev.Type != c.typ || ev.Reason != c.reason || ev.Message != c.wantMessage {
			t.Errorf("event %s/%s %q on %v, want %s/%s %q on the claim", ev.Type, ev.Reason, ev.Message, ev.InvolvedObject, c.typ, c.reason, c.wantMessage)
		}
		if want := []string{claim.Name, c.reason, c.wantMessage}; !slices.Equal(ev.DedupeValues, want) {
			t.Errorf("%s dedupes on %q, want %q", c.reason, ev.DedupeValues, want)
		}
	}
}
