package breaker

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/objectevent"
)

// Event reasons on the NodeClass, one constructor each below, so that a
// reason and its message are written in one place. docs/troubleshooting.md
// lists every reason.
const (
	// EventBreakerOpened: consecutive install failures stopped orders for the NodeClass.
	EventBreakerOpened = "InstallBreakerOpened"
	// EventBreakerClosed: an install joined after the breaker had opened.
	EventBreakerClosed = "InstallBreakerClosed"
)

// nodeClassEvent is the shape both events share: the NodeClass, known here
// by name only, is the object, and the name, reason and message together
// make it distinct.
func nodeClassEvent(nodeClass, typ, reason, msg string) events.Event {
	obj := &v1alpha1.ScalewayElasticMetalNodeClass{}
	obj.Name = nodeClass
	obj.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind("ScalewayElasticMetalNodeClass"))
	return objectevent.For(obj, typ, reason, msg)
}

// breakerOpened: the failures counted in st opened the breaker until its
// next attempt.
func breakerOpened(nodeClass string, st *v1alpha1.InstallsStatus) events.Event {
	return nodeClassEvent(nodeClass, corev1.EventTypeWarning, EventBreakerOpened,
		fmt.Sprintf("%s; no server is ordered for this NodeClass before %s",
			describe(st), st.NextAttempt.UTC().Format("2006-01-02T15:04:05Z")))
}

// breakerClosed: the claim's install joined and closed the breaker.
func breakerClosed(nodeClass, claim string) events.Event {
	return nodeClassEvent(nodeClass, corev1.EventTypeNormal, EventBreakerClosed,
		fmt.Sprintf("nodeclaim %s installed and joined: servers are ordered again", claim))
}
