package breaker

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
)

// Each constructor gives the reason, type and message the inline calls gave
// before events.go, word for word, on a NodeClass known by name and kind.
func TestEventConstructors(t *testing.T) {
	next := metav1.NewTime(time.Date(2026, 11, 28, 14, 0, 0, 0, time.FixedZone("CET", 3600)))
	st := &v1alpha1.InstallsStatus{ConsecutiveFailures: 3, NextAttempt: &next}
	for _, c := range []struct {
		ev          events.Event
		typ, reason string
		wantMessage string
	}{
		{breakerOpened("default", st), corev1.EventTypeWarning, "InstallBreakerOpened", describe(st) + "; no server is ordered for this NodeClass before 2026-11-28T13:00:00Z"},
		{breakerClosed("default", "default-abc"), corev1.EventTypeNormal, "InstallBreakerClosed", "nodeclaim default-abc installed and joined: servers are ordered again"},
	} {
		ev := c.ev
		obj, ok := ev.InvolvedObject.(*v1alpha1.ScalewayElasticMetalNodeClass)
		if !ok || obj.Name != "default" || obj.GetObjectKind().GroupVersionKind().Kind != "ScalewayElasticMetalNodeClass" {
			t.Errorf("%s is on %#v, want the nodeclass default with its kind", c.reason, ev.InvolvedObject)
		}
		if ev.Type != c.typ || ev.Reason != c.reason || ev.Message != c.wantMessage {
			t.Errorf("event %s/%s %q, want %s/%s %q", ev.Type, ev.Reason, ev.Message, c.typ, c.reason, c.wantMessage)
		}
		if want := []string{"default", c.reason, c.wantMessage}; !slices.Equal(ev.DedupeValues, want) {
			t.Errorf("%s dedupes on %q, want %q", c.reason, ev.DedupeValues, want)
		}
	}
}
