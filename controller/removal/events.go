package removal

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/objectevent"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// Event reasons on a NodeClass being deleted, one constructor each below, so
// that a reason and its message are written in one place.
// docs/troubleshooting.md lists every reason.
const (
	// ReasonWaitingForNodeClaims: NodeClaims still use the NodeClass.
	ReasonWaitingForNodeClaims = "WaitingForNodeClaims"
	// ReasonSparesReleased: its spares were deleted.
	ReasonSparesReleased = "SparesReleased"
	// ReasonSparesHandedOver: its spares were handed over (Keep).
	ReasonSparesHandedOver = "SparesHandedOver"
	// ReasonRemovalBlocked: the spares could not be listed or ended (the
	// Scaleway API failed); retried with backoff.
	ReasonRemovalBlocked = "RemovalBlocked"
)

// waitingForNodeClaims: the deletion waits for the named claims to go.
func waitingForNodeClaims(nc *v1alpha1.ScalewayElasticMetalNodeClass, claims []string) events.Event {
	return objectevent.For(nc, corev1.EventTypeNormal, ReasonWaitingForNodeClaims,
		fmt.Sprintf("deletion waits for %d nodeclaim(s) to go: %s", len(claims), strings.Join(claims, ", ")))
}

// recordBlocked: the record of a Keep deletion could not be written.
func recordBlocked(nc *v1alpha1.ScalewayElasticMetalNodeClass, err error) events.Event {
	return objectevent.For(nc, corev1.EventTypeWarning, ReasonRemovalBlocked,
		fmt.Sprintf("deletion waits (retried with backoff): %v", err))
}

// sparesBlocked: the NodeClass's spares could not be listed or ended.
func sparesBlocked(nc *v1alpha1.ScalewayElasticMetalNodeClass, err error) events.Event {
	return objectevent.For(nc, corev1.EventTypeWarning, ReasonRemovalBlocked,
		fmt.Sprintf("deletion waits: its spares cannot be ended yet (retried with backoff): %v", err))
}

// sparesEnded names the spares the deletion ended and says how: released,
// or handed over (tagged with the owner's name) as the billing policy asks.
func sparesEnded(nc *v1alpha1.ScalewayElasticMetalNodeClass, owner string, ended []string) events.Event {
	reason, what := ReasonSparesReleased, "released (the rest of their paid month is forfeited)"
	if nc.Spec.Billing.KeepSparesOnDeletion() {
		tag := scaleway.Tag(scaleway.TagHandedOverBy, owner)
		reason, what = ReasonSparesHandedOver, fmt.Sprintf("handed over: tagged %s, no longer managed; find them with `scw baremetal server list tags.0=%s zone=<zone>`", tag, tag)
	}
	return objectevent.For(nc, corev1.EventTypeNormal, reason, fmt.Sprintf("%d spare(s) %s: %s", len(ended), what, strings.Join(ended, ", ")))
}
