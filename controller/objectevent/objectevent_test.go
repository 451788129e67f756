package objectevent

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// The event is on the object given, and two messages for one object make
// two distinct events while the same message again does not.
func TestForDedupesOnNameReasonAndMessage(t *testing.T) {
	claim := &karpv1.NodeClaim{}
	claim.Name = "default-abc"
	a := For(claim, corev1.EventTypeWarning, "OrderRefused", "out of stock")
	if a.InvolvedObject != claim || a.Type != corev1.EventTypeWarning || a.Reason != "OrderRefused" || a.Message != "out of stock" {
		t.Fatalf("event %+v, want the claim, Warning, OrderRefused, out of stock", a)
	}
	if want := []string{"default-abc", "OrderRefused", "out of stock"}; !slices.Equal(a.DedupeValues, want) {
		t.Errorf("dedupe values %q, want %q", a.DedupeValues, want)
	}
	if b := For(claim, corev1.EventTypeWarning, "OrderRefused", "quota"); slices.Equal(a.DedupeValues, b.DedupeValues) {
		t.Error("two messages share dedupe values: the second would be dropped")
	}
}
