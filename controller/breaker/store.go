package breaker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/clocks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// Offerings hides an offering (*catalog.Catalog).
type Offerings interface {
	MarkUnavailable(zone, offerName string, billing catalog.BillingPeriod, reason catalog.UnavailableReason)
}

// Store keeps the breaker's state in NodeClass status.
type Store struct {
	// Kube reads NodeClasses and NodeClaims and writes NodeClass status.
	Kube client.Client
	// Secrets reads join Secrets (for their resourceVersion; a joinsecret.Reader).
	Secrets   client.Reader
	Policy    Policy
	Offerings Offerings
	Recorder  events.Recorder
	Metrics   *Metrics
	Clock     clock.Clock

	// countMu serialises Failed; counted holds the NodeClaims whose failure
	// this process recorded, and when: a failed install is seen both by
	// its worker and by Delete (Karpenter's registration timeout can delete
	// the NodeClaim at the instant the install gives up), and counts once.
	countMu sync.Mutex
	counted map[string]time.Time
}

// CountedFor is how long a NodeClaim's recorded failure is remembered in
// memory to keep it from being counted twice. Both counts come within
// seconds of each other; after a restart the status's last failure
// (which names its NodeClaim) still keeps the likeliest repeat out.
const CountedFor = 24 * time.Hour

func (s *Store) now() clock.Clock { return clocks.Or(s.Clock) }

// keyOf is nc's breaker key: its generation and its join Secret's
// resourceVersion ("" when the Secret is gone). Any other error reading the
// Secret is returned: taken for a changed Secret, it would reset the breaker.
func (s *Store) keyOf(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass) (Key, error) {
	key := Key{Generation: nc.Generation}
	if s.Secrets == nil {
		return key, nil
	}
	ref := nc.Spec.Talos.JoinSecretRef
	sec := &corev1.Secret{}
	err := s.Secrets.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, sec)
	switch {
	case err == nil:
		key.JoinSecretResourceVersion = sec.ResourceVersion
	case !apierrors.IsNotFound(err):
		return key, fmt.Errorf("reading join Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return key, nil
}

// probeAlive reports whether the probe NodeClaim of st exists.
func (s *Store) probeAlive(ctx context.Context, st *v1alpha1.InstallsStatus) bool {
	if st == nil || st.ProbeNodeClaim == "" {
		return false
	}
	err := s.Kube.Get(ctx, types.NamespacedName{Name: st.ProbeNodeClaim}, &karpv1.NodeClaim{})
	return !apierrors.IsNotFound(err) // an error reading it: assume alive, order nothing
}

// Sync brings nc's breaker up to date in memory, for the status controller
// that writes the status: a stale state (new generation, Secret changed) is
// dropped, and InstallsHealthy is set. It returns when the condition will
// change by itself (the end of a backoff), zero if never.
func (s *Store) Sync(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass) (next int64) {
	if nc.Status.Installs != nil {
		// A Secret that cannot be read now leaves the state as it is.
		if key, err := s.keyOf(ctx, nc); err == nil && Current(nc.Status.Installs, key) == nil {
			nc.Status.Installs = nil
		}
	}
	s.setCondition(ctx, nc)
	if st := nc.Status.Installs; st != nil && st.NextAttempt != nil && s.now().Now().Before(st.NextAttempt.Time) {
		return st.NextAttempt.UnixNano()
	}
	return 0
}

// setCondition sets InstallsHealthy from the state and updates the state gauge.
func (s *Store) setCondition(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass) State {
	st := nc.Status.Installs
	alive := s.probeAlive(ctx, st)
	ok, reason, msg := Condition(st, s.now().Now(), alive)
	conds := nc.StatusConditions()
	switch {
	case ok && reason == "":
		conds.SetTrue(v1alpha1.ConditionTypeInstallsHealthy)
	case ok:
		conds.SetTrueWithReason(v1alpha1.ConditionTypeInstallsHealthy, reason, msg)
	default:
		conds.SetFalse(v1alpha1.ConditionTypeInstallsHealthy, reason, msg)
	}
	state := StateOf(st, s.now().Now(), alive)
	s.Metrics.setState(nc.Name, state)
	return state
}

// Admit decides whether Create may order a server for claim: nil when the
// breaker is closed or this order is the probe (recorded in the status
// before the order), else a NodeClassNotReadyError: the whole NodeClass
// cannot install, so Karpenter deletes the NodeClaim and, once the
// NodeClass is not Ready, schedules onto other NodePools.
//
// It always reads the NodeClass afresh, never trusting the caller's cached
// copy: a failure recorded a moment ago must stop the very next order (one
// read per order, and every order costs at least an hour of a server).
func (s *Store) Admit(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass, claim string) error {
	var refusal error
	err := s.update(ctx, nc.Name, false, func(fresh *v1alpha1.ScalewayElasticMetalNodeClass, key Key) {
		refusal = nil
		st := Current(fresh.Status.Installs, key)
		if st != nil && st.ProbeNodeClaim == claim {
			return // the probe's Create again
		}
		switch StateOf(st, s.now().Now(), s.probeAlive(ctx, st)) {
		case Open, Probing:
			_, _, msg := Condition(st, s.now().Now(), true)
			refusal = fmt.Errorf("nodeclass %s: install-failure breaker: %s", fresh.Name, msg)
		case ProbeAllowed:
			st = st.DeepCopy()
			st.ProbeNodeClaim = claim
		}
		fresh.Status.Installs = st
	})
	if err != nil {
		return fmt.Errorf("install-failure breaker of nodeclass %s: %w", nc.Name, err)
	}
	if refusal != nil {
		s.Metrics.refusedOrder(nc.Name)
		return cloudprovider.NewNodeClassNotReadyError(refusal)
	}
	return nil
}

// Failure is one failed install, as nodeinstall sees it.
type Failure struct {
	Claim *karpv1.NodeClaim
	// Server is the server the install ran on (nil when gone).
	Server  *baremetal.Server
	Billing catalog.BillingPeriod
	Err     error
}

// Failed counts a failed install against its NodeClass (and its offering
// when the failure is the hardware's). Only a *install.PhaseError after
// delivery is an install failure: a delivery that failed or timed out (phase
// ordered) is Scaleway's, and a server taken away or a NodeClass gone say
// nothing about whether the NodeClass can install.
//
// A NodeClaim counts once, whoever reports it (its install's worker, Delete):
// a second report of a NodeClaim this process already counted, or the one
// the status names as the last failure, changes nothing.
func (s *Store) Failed(ctx context.Context, f Failure) error {
	pe := countable(f)
	if pe == nil {
		return nil
	}
	s.countMu.Lock()
	defer s.countMu.Unlock()
	now := s.now().Now()
	if at, ok := s.counted[f.Claim.Name]; ok && now.Sub(at) < CountedFor {
		return nil
	}
	name := f.Claim.Spec.NodeClassRef.Name
	code := CodeOf(pe.Err)
	var opened, repeated bool
	var after *v1alpha1.InstallsStatus
	var disk string
	err := s.update(ctx, name, true, func(fresh *v1alpha1.ScalewayElasticMetalNodeClass, key Key) {
		disk = fresh.Spec.Rescue.Disk
		before := Current(fresh.Status.Installs, key)
		if repeated = failedLastFor(before, f.Claim.Name); repeated {
			return // counted already (by a process that has restarted since)
		}
		after = s.Policy.Failure(before, key, v1alpha1.InstallFailure{
			Phase: string(pe.Phase), Code: code, Offering: offeringOf(f), NodeClaim: f.Claim.Name,
		}, s.now().Now())
		opened = opens(before, after)
		fresh.Status.Installs = after
	})
	if repeated && err == nil {
		s.remember(f.Claim.Name, now)
		return nil
	}
	s.Metrics.failure(name, string(pe.Phase), code)
	if f.Server != nil && Hardware(code, disk) {
		s.Offerings.MarkUnavailable(string(f.Server.Zone), f.Server.OfferName, f.Billing, catalog.ReasonInstallFailed)
	}
	if err != nil {
		return fmt.Errorf("counting the install failure of nodeclaim %s against nodeclass %s: %w", f.Claim.Name, name, err)
	}
	s.remember(f.Claim.Name, now)
	if opened {
		s.Metrics.openedFor(name)
		s.publish(breakerOpened(name, after))
	}
	return nil
}

// countable is the install failure f reports, nil when f says nothing about
// whether its NodeClass can install: not a phase error, no NodeClass, a
// delivery that failed (Scaleway's), or a server taken away.
func countable(f Failure) *install.PhaseError {
	var pe *install.PhaseError
	if !errors.As(f.Err, &pe) || f.Claim.Spec.NodeClassRef == nil || pe.Phase == install.PhaseOrdered || scaleway.IsNotFound(pe.Err) {
		return nil
	}
	return pe
}

// offeringOf names the offering f's server was ordered as, "" without one.
func offeringOf(f Failure) string {
	if f.Server == nil {
		return ""
	}
	return fmt.Sprintf("%s/%s/%s", f.Server.Zone, f.Server.OfferName, f.Billing)
}

// failedLastFor says whether the status already names claim as its last
// failure: counted by a process that has restarted since.
func failedLastFor(before *v1alpha1.InstallsStatus, claim string) bool {
	return before != nil && before.LastFailure != nil && before.LastFailure.NodeClaim == claim
}

// opens says whether counting a failure (before -> after) opened the
// breaker: for the first time, or again after a close.
func opens(before, after *v1alpha1.InstallsStatus) bool {
	first := after.Opened == 1 && (before == nil || before.Opened == 0)
	again := before != nil && after.Opened > before.Opened && before.Opened > 0
	return first || again
}

// remember records that claim's failure was counted at now, and forgets
// the NodeClaims counted more than CountedFor ago (under countMu).
func (s *Store) remember(claim string, now time.Time) {
	if s.counted == nil {
		s.counted = map[string]time.Time{}
	}
	for name, at := range s.counted {
		if now.Sub(at) >= CountedFor {
			delete(s.counted, name)
		}
	}
	s.counted[claim] = now
}

// Joined closes the breaker of claim's NodeClass: an install succeeded.
func (s *Store) Joined(ctx context.Context, claim *karpv1.NodeClaim) error {
	if claim.Spec.NodeClassRef == nil {
		return nil
	}
	name := claim.Spec.NodeClassRef.Name
	wasOpen := false
	err := s.update(ctx, name, false, func(fresh *v1alpha1.ScalewayElasticMetalNodeClass, _ Key) {
		wasOpen = fresh.Status.Installs != nil && fresh.Status.Installs.Opened > 0
		fresh.Status.Installs = nil
	})
	if err == nil && wasOpen {
		s.publish(breakerClosed(name, claim.Name))
	}
	return client.IgnoreNotFound(err)
}

// update applies change to a fresh copy of NodeClass name and writes its
// status (InstallsHealthy included) with an optimistic lock, retrying
// conflicts. The key (one Secret read) is read when the NodeClass has a
// breaker state, or always with needKey (a failure records it); without
// either, change gets the zero Key.
func (s *Store) update(ctx context.Context, name string, needKey bool, change func(*v1alpha1.ScalewayElasticMetalNodeClass, Key)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
		if err := s.Kube.Get(ctx, types.NamespacedName{Name: name}, nc); err != nil {
			return err
		}
		var key Key
		if needKey || nc.Status.Installs != nil {
			var err error
			if key, err = s.keyOf(ctx, nc); err != nil {
				return err
			}
		}
		stored := nc.DeepCopy()
		change(nc, key)
		s.setCondition(ctx, nc)
		if equality.Semantic.DeepEqual(stored.Status, nc.Status) {
			return nil
		}
		return s.Kube.Status().Patch(ctx, nc, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{}))
	})
}

// publish records ev (events.go) on the store's recorder, if any.
func (s *Store) publish(ev events.Event) {
	if s.Recorder != nil {
		s.Recorder.Publish(ev)
	}
}
