package harness

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/invariants"
)

// A claim seen deleting keeps its deletion timestamp; one that was deleted
// and gone between two polls counts as deleting from the last poll that
// listed it, never as live and not deleting until it vanished.
func TestClaimWatchDeletionBetweenPolls(t *testing.T) {
	cw := &ClaimWatch{claims: map[string]invariants.Claim{}, seen: map[string]time.Time{}}
	t0 := time.Date(2026, 11, 28, 18, 0, 0, 0, time.UTC)
	created := metav1.NewTime(t0.Add(-time.Minute))
	deleting := metav1.NewTime(t0.Add(time.Second))
	a := karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "a", CreationTimestamp: created}}
	b := karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "b", CreationTimestamp: created}}
	cw.saw([]karpv1.NodeClaim{a, b}, t0)
	b.DeletionTimestamp = &deleting
	cw.saw([]karpv1.NodeClaim{a, b}, t0.Add(2*time.Second))
	cw.saw(nil, t0.Add(5*time.Second))
	got := cw.Claims()
	lastListed := t0.Add(2 * time.Second)
	if c := got["a"]; !c.Deleting.Equal(lastListed) || !c.Gone.Equal(t0.Add(5*time.Second)) {
		t.Errorf("a, gone between polls: deleting %s gone %s, want %s and %s", c.Deleting, c.Gone, lastListed, t0.Add(5*time.Second))
	}
	if c := got["b"]; !c.Deleting.Equal(deleting.Time) || !c.Gone.Equal(t0.Add(5*time.Second)) {
		t.Errorf("b, seen deleting: deleting %s gone %s, want %s", c.Deleting, c.Gone, deleting.Time)
	}
}
