package removal

import (
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
)

// Each constructor gives the reason, type and message the inline calls gave
// before events.go, word for word.
func TestEventConstructors(t *testing.T) {
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	nc.Name = "default"
	keep := nc.DeepCopy()
	keep.Spec.Billing.SparesOnDeletion = v1alpha1.SparesKeep
	boom := errors.New("boom")
	for _, c := range []struct {
		ev          events.Event
		on          *v1alpha1.ScalewayElasticMetalNodeClass
		typ, reason string
		wantMessage string
	}{
		{waitingForNodeClaims(nc, []string{"a", "b"}), nc, corev1.EventTypeNormal, "WaitingForNodeClaims", "deletion waits for 2 nodeclaim(s) to go: a, b"},
		{recordBlocked(nc, boom), nc, corev1.EventTypeWarning, "RemovalBlocked", "deletion waits (retried with backoff): boom"},
		{sparesBlocked(nc, boom), nc, corev1.EventTypeWarning, "RemovalBlocked", "deletion waits: its spares cannot be ended yet (retried with backoff): boom"},
		{sparesEnded(nc, "prod", []string{"srv-1", "srv-2"}), nc, corev1.EventTypeNormal, "SparesReleased", "2 spare(s) released (the rest of their paid month is forfeited): srv-1, srv-2"},
		{sparesEnded(keep, "prod", []string{"srv-1"}), keep, corev1.EventTypeNormal, "SparesHandedOver",
			"1 spare(s) handed over: tagged karpenter-scaleway-em/handed-over-by=prod, no longer managed; find them with `scw baremetal server list tags.0=karpenter-scaleway-em/handed-over-by=prod zone=<zone>`: srv-1"},
	} {
		ev := c.ev
		if ev.InvolvedObject != c.on || ev.Type != c.typ || ev.Reason != c.reason || ev.Message != c.wantMessage {
			t.Errorf("event %s/%s %q on %v, want %s/%s %q on the nodeclass", ev.Type, ev.Reason, ev.Message, ev.InvolvedObject, c.typ, c.reason, c.wantMessage)
		}
		if want := []string{"default", c.reason, c.wantMessage}; !slices.Equal(ev.DedupeValues, want) {
			t.Errorf("%s dedupes on %q, want %q", c.reason, ev.DedupeValues, want)
		}
	}
}
