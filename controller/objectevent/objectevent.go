// Package objectevent builds the Karpenter event every controller package
// records on one object (a NodeClaim, a NodeClass), so that each package's
// events.go only says which reason and message.
package objectevent

import (
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/karpenter/pkg/events"
)

// For is the event of type typ with reason and msg on obj; the object's
// name, the reason and the message together make it distinct, so the same
// message is not repeated while it holds and a new one is recorded.
func For(obj client.Object, typ, reason, msg string) events.Event {
	return events.Event{InvolvedObject: obj, Type: typ, Reason: reason, Message: msg,
		DedupeValues: []string{obj.GetName(), reason, msg}}
}
