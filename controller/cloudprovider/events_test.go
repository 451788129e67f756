package cloudprovider

import (
	"errors"
	"slices"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
)

// Each constructor gives the reason, type and message the inline calls gave
// before events.go, word for word: operators and docs/troubleshooting.md
// read them.
func TestEventConstructors(t *testing.T) {
	claim := &karpv1.NodeClaim{}
	claim.Name = "default-abc"
	srv := &baremetal.Server{ID: "srv-1", OfferName: "EM-A116X-SSD"}
	p := pick{offer: &baremetal.Offer{Name: "EM-A116X-SSD"}, zone: "fr-par-2", billing: catalog.BillingMonthly}
	boom := errors.New("boom")
	for _, c := range []struct {
		ev          events.Event
		typ, reason string
		wantMessage string
	}{
		{reservedSpareTaken(claim, srv, "fr-par-2", "r1"), corev1.EventTypeNormal, "ReusedSpare", "took spare server srv-1 (EM-A116X-SSD) in fr-par-2 from reservation r1"},
		{spareTaken(claim, p, srv), corev1.EventTypeNormal, "ReusedSpare", "reusing spare monthly server srv-1 (EM-A116X-SSD) in fr-par-2"},
		{spendLimitReached(claim, p, boom), corev1.EventTypeWarning, "SpendLimitReached", "EM-A116X-SSD (monthly) in fr-par-2 not ordered: boom"},
		{ordered(claim, p, srv), corev1.EventTypeNormal, "Ordered", "ordered EM-A116X-SSD (monthly) in fr-par-2: server srv-1"},
		{orderRefused(claim, p, boom), corev1.EventTypeWarning, "OrderRefused", "EM-A116X-SSD (monthly) in fr-par-2: boom"},
		{orderMayBeTaken(claim, p), corev1.EventTypeWarning, "OrderInFlight", "the order of EM-A116X-SSD in fr-par-2 may have been taken; looking for its server before any new order"},
		{earlierOrderInFlight(claim, "fr-par-1"), corev1.EventTypeWarning, "OrderInFlight", "an earlier order in fr-par-1 may have been taken; waiting for its server before any spare or new order"},
		{orderingElsewhereInFlight(claim, 90*time.Second+400*time.Millisecond), corev1.EventTypeWarning, "OrderInFlight", "an earlier controller process began giving this nodeclaim a server 1m30s ago; waiting for it to show before any spare or new order"},
		{offeringUnavailable(claim, p, boom), corev1.EventTypeWarning, "OfferingUnavailable", "EM-A116X-SSD (monthly) in fr-par-2: other"},
		{keptAsSpare(claim, "srv-1", "monthly server paid until x"), corev1.EventTypeNormal, "KeptAsSpare", "server srv-1 kept as a spare: monthly server paid until x"},
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
