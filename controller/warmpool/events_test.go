package warmpool

import (
	"errors"
	"slices"
	"testing"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
)

// Each constructor gives the reason, type and message the inline calls gave
// before events.go, word for word.
func TestEventConstructors(t *testing.T) {
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	nc.Name = "default"
	srv := &baremetal.Server{ID: "srv-1", OfferName: "EM-A116X-SSD", Zone: "fr-par-2", Status: baremetal.ServerStatusReady}
	broken := &baremetal.Server{ID: "srv-2", OfferName: "EM-A116X-SSD", Zone: "fr-par-2", Status: baremetal.ServerStatusError}
	k := Key{Zone: "fr-par-2", Offer: "EM-A116X-SSD", Billing: catalog.BillingHourly}
	boom := errors.New("boom")
	for _, c := range []struct {
		ev          events.Event
		typ, reason string
		wantMessage string
	}{
		{released(nc, srv, catalog.BillingHourly), corev1.EventTypeNormal, "WarmPoolReleased", "released warm-pool server srv-1 (EM-A116X-SSD, hourly) in fr-par-2: the pool wants fewer"},
		{released(nc, broken, catalog.BillingMonthly), corev1.EventTypeNormal, "WarmPoolReleased", "released warm-pool server srv-2 (EM-A116X-SSD, monthly) in fr-par-2: it is in status error"},
		{demoted(nc, srv), corev1.EventTypeNormal, "WarmPoolDemoted", "monthly server srv-1 (EM-A116X-SSD) in fr-par-2 left the warm pool: kept as an ordinary spare until its paid period ends"},
		{spendLimitReached(nc, k, boom), corev1.EventTypeWarning, "WarmPoolSpendLimit", "warm-pool server fr-par-2/EM-A116X-SSD/hourly not ordered: boom"},
		{slotOrdered(nc, k, "srv-1"), corev1.EventTypeNormal, "WarmPoolOrdered", "ordered warm-pool server EM-A116X-SSD (hourly) in fr-par-2: server srv-1"},
		{orderFailed(nc, k, boom), corev1.EventTypeWarning, "WarmPoolOrderFailed", "ordering warm-pool server fr-par-2/EM-A116X-SSD/hourly: other: boom"},
		{ordersBlocked(nc, boom), corev1.EventTypeWarning, "WarmPoolOrdersBlocked", "boom"},
	} {
		ev := c.ev
		if ev.InvolvedObject != nc || ev.Type != c.typ || ev.Reason != c.reason || ev.Message != c.wantMessage {
			t.Errorf("event %s/%s %q on %v, want %s/%s %q on the nodeclass", ev.Type, ev.Reason, ev.Message, ev.InvolvedObject, c.typ, c.reason, c.wantMessage)
		}
		if want := []string{nc.Name, c.reason, c.wantMessage}; !slices.Equal(ev.DedupeValues, want) {
			t.Errorf("%s dedupes on %q, want %q", c.reason, ev.DedupeValues, want)
		}
	}
}
