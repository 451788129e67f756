package warmpool

import (
	"fmt"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/objectevent"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// The events the warm pool records on its NodeClass, one constructor each,
// so that a reason and its message are written in one place.
// docs/troubleshooting.md lists every reason.
const (
	EventWarmPoolReleased      = "WarmPoolReleased"
	EventWarmPoolDemoted       = "WarmPoolDemoted"
	EventWarmPoolSpendLimit    = "WarmPoolSpendLimit"
	EventWarmPoolOrdered       = "WarmPoolOrdered"
	EventWarmPoolOrderFailed   = "WarmPoolOrderFailed"
	EventWarmPoolOrdersBlocked = "WarmPoolOrdersBlocked"
)

// released: a pool server bought as billing was given back.
func released(nc *v1alpha1.ScalewayElasticMetalNodeClass, s *baremetal.Server, billing catalog.BillingPeriod) events.Event {
	return objectevent.For(nc, corev1.EventTypeNormal, EventWarmPoolReleased,
		fmt.Sprintf("released warm-pool server %s (%s, %s) in %s: %s", s.ID, s.OfferName, billing, s.Zone, releaseWhy(s)))
}

// releaseWhy says why a pool server is given back: it is broken, or the
// pool wants fewer.
func releaseWhy(s *baremetal.Server) string {
	if s.Status == baremetal.ServerStatusError || s.Status == baremetal.ServerStatusOutOfStock {
		return "it is in status " + string(s.Status)
	}
	return "the pool wants fewer"
}

// demoted: a monthly pool server left the pool and stays as a spare.
func demoted(nc *v1alpha1.ScalewayElasticMetalNodeClass, s *baremetal.Server) events.Event {
	return objectevent.For(nc, corev1.EventTypeNormal, EventWarmPoolDemoted,
		fmt.Sprintf("monthly server %s (%s) in %s left the warm pool: kept as an ordinary spare until its paid period ends", s.ID, s.OfferName, s.Zone))
}

// spendLimitReached: the slot k was not ordered because a spend limit would
// be passed.
func spendLimitReached(nc *v1alpha1.ScalewayElasticMetalNodeClass, k Key, err error) events.Event {
	return objectevent.For(nc, corev1.EventTypeWarning, EventWarmPoolSpendLimit,
		fmt.Sprintf("warm-pool server %s not ordered: %v", k, err))
}

// slotOrdered: the slot k's server was ordered.
func slotOrdered(nc *v1alpha1.ScalewayElasticMetalNodeClass, k Key, serverID string) events.Event {
	return objectevent.For(nc, corev1.EventTypeNormal, EventWarmPoolOrdered,
		fmt.Sprintf("ordered warm-pool server %s (%s) in %s: server %s", k.Offer, k.Billing, k.Zone, serverID))
}

// orderFailedMessage is both the failed order's event message and its
// condition message.
func orderFailedMessage(k Key, err error) string {
	return fmt.Sprintf("ordering warm-pool server %s: %s: %v", k, scaleway.Classify(err), err)
}

// orderFailed: the slot k's order failed.
func orderFailed(nc *v1alpha1.ScalewayElasticMetalNodeClass, k Key, err error) events.Event {
	return objectevent.For(nc, corev1.EventTypeWarning, EventWarmPoolOrderFailed, orderFailedMessage(k, err))
}

// ordersBlocked: a gate (readiness, breaker, spend limits) stopped every
// order of the pass.
func ordersBlocked(nc *v1alpha1.ScalewayElasticMetalNodeClass, err error) events.Event {
	return objectevent.For(nc, corev1.EventTypeWarning, EventWarmPoolOrdersBlocked, err.Error())
}
