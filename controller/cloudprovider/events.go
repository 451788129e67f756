package cloudprovider

import (
	"fmt"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/objectevent"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// The events this package records on a NodeClaim, one constructor each, so
// that a reason and its message are written in one place and a unit test
// reads them without a world. docs/troubleshooting.md lists every reason.
const (
	EventReusedSpare         = "ReusedSpare"
	EventSpendLimitReached   = "SpendLimitReached"
	EventOrdered             = "Ordered"
	EventOrderRefused        = "OrderRefused"
	EventOrderInFlight       = "OrderInFlight"
	EventOfferingUnavailable = "OfferingUnavailable"
	EventKeptAsSpare         = "KeptAsSpare"
)

// reservedSpareTaken: the claim took a spare held by a reservation.
func reservedSpareTaken(claim *karpv1.NodeClaim, srv *baremetal.Server, zone, reservation string) events.Event {
	return objectevent.For(claim, corev1.EventTypeNormal, EventReusedSpare,
		fmt.Sprintf("took spare server %s (%s) in %s from reservation %s", srv.ID, srv.OfferName, zone, reservation))
}

// spareTaken: the claim took a kept server instead of an order.
func spareTaken(claim *karpv1.NodeClaim, p pick, srv *baremetal.Server) events.Event {
	return objectevent.For(claim, corev1.EventTypeNormal, EventReusedSpare,
		fmt.Sprintf("reusing spare %s server %s (%s) in %s", p.billing, srv.ID, srv.OfferName, p.zone))
}

// spendLimitReached: the offering was not ordered because a spend limit
// would be passed.
func spendLimitReached(claim *karpv1.NodeClaim, p pick, err error) events.Event {
	return objectevent.For(claim, corev1.EventTypeWarning, EventSpendLimitReached,
		fmt.Sprintf("%s (%s) in %s not ordered: %v", p.offer.Name, p.billing, p.zone, err))
}

// ordered: a new server was ordered for the claim.
func ordered(claim *karpv1.NodeClaim, p pick, srv *baremetal.Server) events.Event {
	return objectevent.For(claim, corev1.EventTypeNormal, EventOrdered,
		fmt.Sprintf("ordered %s (%s) in %s: server %s", p.offer.Name, p.billing, p.zone, srv.ID))
}

// orderRefused: Scaleway refused the order outright.
func orderRefused(claim *karpv1.NodeClaim, p pick, err error) events.Event {
	return objectevent.For(claim, corev1.EventTypeWarning, EventOrderRefused,
		fmt.Sprintf("%s (%s) in %s: %v", p.offer.Name, p.billing, p.zone, err))
}

// orderMayBeTaken: this order's answer was lost, so it may have been taken.
func orderMayBeTaken(claim *karpv1.NodeClaim, p pick) events.Event {
	return objectevent.For(claim, corev1.EventTypeWarning, EventOrderInFlight,
		fmt.Sprintf("the order of %s in %s may have been taken; looking for its server before any new order", p.offer.Name, p.zone))
}

// earlierOrderInFlight: an earlier order of the claim, whose answer was
// lost, may still show; Create waits for it.
func earlierOrderInFlight(claim *karpv1.NodeClaim, zone scw.Zone) events.Event {
	return objectevent.For(claim, corev1.EventTypeWarning, EventOrderInFlight,
		fmt.Sprintf("an earlier order in %s may have been taken; waiting for its server before any spare or new order", zone))
}

// orderingElsewhereInFlight: another controller process began giving the
// claim a server ago; Create waits for it to show.
func orderingElsewhereInFlight(claim *karpv1.NodeClaim, ago time.Duration) events.Event {
	return objectevent.For(claim, corev1.EventTypeWarning, EventOrderInFlight,
		fmt.Sprintf("an earlier controller process began giving this nodeclaim a server %s ago; waiting for it to show before any spare or new order", ago.Round(time.Second)))
}

// offeringUnavailable: the order failed for want of stock or quota, and the
// next offering is tried.
func offeringUnavailable(claim *karpv1.NodeClaim, p pick, err error) events.Event {
	return objectevent.For(claim, corev1.EventTypeWarning, EventOfferingUnavailable,
		fmt.Sprintf("%s (%s) in %s: %s", p.offer.Name, p.billing, p.zone, scaleway.Classify(err)))
}

// keptAsSpare: the deleted claim's server stays as a spare, for why.
func keptAsSpare(claim *karpv1.NodeClaim, serverID, why string) events.Event {
	return objectevent.For(claim, corev1.EventTypeNormal, EventKeptAsSpare,
		fmt.Sprintf("server %s kept as a spare: %s", serverID, why))
}

// publish records ev on rec (nil: none).
func publish(rec events.Recorder, ev events.Event) {
	if rec != nil {
		rec.Publish(ev)
	}
}
