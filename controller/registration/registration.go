// Package registration keeps Karpenter's registration timeout in step with
// the install of a bare-metal server. It is the only place the provider
// writes a NodeClaim's Registered condition.
//
// Why: Karpenter core (v1.14.1, pkg/controllers/nodeclaim/lifecycle/
// liveness.go) deletes a launched NodeClaim whose Registered condition has
// not turned True within registrationTimeout (15 minutes, a constant),
// counted from the condition's LastTransitionTime. Core initialises the
// condition (Unknown) with the NodeClaim's creation time and keeps that time
// while the status stays Unknown (operatorpkg's Set). Create returns as soon
// as the server is ordered, so the 15 minutes would have to cover delivery
// (4-5 minutes, up to an hour), rescue, imaging and the boot: every slow
// install would be deleted after being paid for, then ordered again.
// Upstream has no setting for it (kubernetes-sigs/karpenter#357 is open;
// #1452, #2313 proposing one are open, #2412 and #2451 closed unmerged).
//
// So, while the install runs, the install controller holds the window: it
// moves the condition's LastTransitionTime so that core's 15 minutes end at
// the install's own deadline (the current phase's timeout, plus Grace so the
// provider's failure handling, with its event and spare policy, comes
// first), and, once the server boots its OS, to the moment the boot started:
// from there core's own 15 minutes decide. The time written is never in the
// future; while the deadline is far it is "now", refreshed every Refresh.
// Writes use optimistic locking (core patches NodeClaim status with a plain
// merge patch, which replaces the whole conditions list: a concurrent write
// of core's wins, and the next Hold writes again). Core changes nothing else
// in the condition while it stays Unknown, and only the time is touched.
//
// An upgrade of Karpenter that changes any of this must fail
// TestWindowAgainstCoreLifecycle, which drives core's real lifecycle
// controller.
package registration

import (
	"context"
	"time"

	"github.com/awslabs/operatorpkg/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/clocks"
)

// Timeout is Karpenter core's registrationTimeout.
const Timeout = 15 * time.Minute

// Defaults of Window.
const (
	DefaultRefresh = 5 * time.Minute
	DefaultGrace   = 2 * time.Minute
)

// Window moves NodeClaims' registration windows.
type Window struct {
	Kube  client.Client
	Clock clock.Clock
	// Refresh: while core's timeout is far from the install's deadline, the
	// time is moved to now once it is older than this (default 5m).
	Refresh time.Duration
	// Grace is added to a running phase's deadline (default 2m).
	Grace time.Duration
}

// Installing makes core time claim's registration out no earlier than the
// deadline of the phase the install runs in, plus Grace.
func (w *Window) Installing(ctx context.Context, claim *karpv1.NodeClaim, phaseDeadline time.Time) (bool, error) {
	return w.hold(ctx, claim, phaseDeadline.Add(w.grace()))
}

// Booting starts core's own registration window when the server started
// booting its OS: core deletes the claim Timeout after since.
func (w *Window) Booting(ctx context.Context, claim *karpv1.NodeClaim, since time.Time) (bool, error) {
	return w.hold(ctx, claim, since.Add(Timeout))
}

// Expires is when core will time claim's registration out as it stands
// (zero when the condition is not Unknown).
func Expires(claim *karpv1.NodeClaim) time.Time {
	c := registered(claim)
	if c == nil {
		return time.Time{}
	}
	return c.LastTransitionTime.Add(Timeout)
}

func registered(claim *karpv1.NodeClaim) *status.Condition {
	for i := range claim.Status.Conditions {
		c := &claim.Status.Conditions[i]
		if c.Type == karpv1.ConditionTypeRegistered {
			if c.Status != metav1.ConditionUnknown {
				return nil
			}
			return c
		}
	}
	return nil
}

// hold writes the condition's time so that core's timeout fires at deadline;
// it reports whether it wrote. It does nothing before core has initialised
// the condition, or once it is True or False.
func (w *Window) hold(ctx context.Context, claim *karpv1.NodeClaim, deadline time.Time) (bool, error) {
	cur := registered(claim)
	if cur == nil {
		return false, nil
	}
	now := w.clock().Now().Truncate(time.Second) // the API keeps seconds
	target := deadline.Add(-Timeout).Truncate(time.Second)
	have := cur.LastTransitionTime.Time
	if target.After(now) {
		if now.Sub(have) < w.refresh() {
			return false, nil
		}
		target = now
	} else if have.Equal(target) {
		return false, nil
	}
	patched := claim.DeepCopy()
	for i := range patched.Status.Conditions {
		if patched.Status.Conditions[i].Type == karpv1.ConditionTypeRegistered {
			patched.Status.Conditions[i].LastTransitionTime = metav1.NewTime(target)
		}
	}
	if err := w.Kube.Status().Patch(ctx, patched, client.MergeFromWithOptions(claim, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, err
	}
	claim.Status = patched.Status
	claim.ResourceVersion = patched.ResourceVersion
	return true, nil
}

func (w *Window) clock() clock.Clock { return clocks.Or(w.Clock) }

func (w *Window) refresh() time.Duration {
	if w.Refresh > 0 {
		return w.Refresh
	}
	return DefaultRefresh
}

func (w *Window) grace() time.Duration {
	if w.Grace > 0 {
		return w.Grace
	}
	return DefaultGrace
}
