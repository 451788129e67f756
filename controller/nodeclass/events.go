package nodeclass

import (
	"fmt"
	"slices"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
)

// Condition reasons the status controller sets (the image conditions take
// imagesource's reasons, JoinConfigReady's are beside joinReason).
const (
	ReasonScalewayAPIUnavailable = "ScalewayAPIUnavailable"
	ReasonProjectMismatch        = "ProjectMismatch"
)

// Event reasons of the root condition; a sub-condition's event carries the
// condition's type when it turns True and its reason when it turns False.
const (
	EventReady    = "Ready"
	EventNotReady = "NotReady"
)

// publishTransitions emits one event per condition whose status or reason
// changed between before and after, so `kubectl get events` tells when and
// why a NodeClass stopped (or started) accepting servers.
func (c *StatusController) publishTransitions(before, after *v1alpha1.ScalewayElasticMetalNodeClass) {
	if c.Recorder == nil {
		return
	}
	old := map[string]status.Condition{}
	for _, cond := range before.Status.Conditions {
		old[cond.Type] = cond
	}
	// Sub-conditions first, the root last: the last event read says where
	// the NodeClass stands.
	conds := slices.Clone(after.Status.Conditions)
	var rootEv *events.Event
	for i := range conds {
		cond := conds[i]
		prev, seen := old[cond.Type]
		if seen && prev.Status == cond.Status && prev.Reason == cond.Reason {
			continue
		}
		var was *status.Condition
		if seen {
			was = &prev
		}
		if cond.Type == status.ConditionReady {
			rootEv = conditionEvent(after, cond, was)
			continue
		}
		c.Recorder.Publish(*conditionEvent(after, cond, was))
	}
	if rootEv != nil {
		c.Recorder.Publish(*rootEv)
	}
}

// conditionEvent describes cond's new state; a recovery names what it
// recovered from, so that it reads as news and is not folded into the
// first "is True" of the NodeClass's life.
func conditionEvent(nc *v1alpha1.ScalewayElasticMetalNodeClass, cond status.Condition, was *status.Condition) *events.Event {
	ev := &events.Event{InvolvedObject: nc, Type: corev1.EventTypeNormal}
	recovered := ""
	if was != nil && was.Status == metav1.ConditionFalse {
		recovered = fmt.Sprintf(" (was False: %s)", was.Reason)
	}
	switch {
	case cond.Type == status.ConditionReady && cond.Status == metav1.ConditionTrue:
		ev.Reason, ev.Message = EventReady, "NodeClass is Ready: servers may be ordered for it"+recovered
	case cond.Type == status.ConditionReady:
		ev.Type, ev.Reason = corev1.EventTypeWarning, EventNotReady
		ev.Message = fmt.Sprintf("NodeClass is not Ready, no server is ordered for it: %s", cond.Message)
	case cond.Status == metav1.ConditionTrue:
		ev.Reason, ev.Message = cond.Type, cond.Type+" is True"+recovered
	default:
		ev.Type, ev.Reason = corev1.EventTypeWarning, cond.Reason
		ev.Message = fmt.Sprintf("%s is %s: %s", cond.Type, cond.Status, cond.Message)
	}
	// The transition time keeps a second, later transition to the same
	// state from being taken for a duplicate.
	ev.DedupeValues = []string{nc.Name, ev.Reason, ev.Message, cond.LastTransitionTime.String()}
	return ev
}
