// Package breaker is the install-failure breaker: a NodeClass whose installs
// keep failing stops buying servers.
//
// Failures are counted per NodeClass. Threshold consecutive failures (no
// install joined in between) within Window open the breaker: Create orders
// nothing for the NodeClass, whose InstallsHealthy condition (and so Ready)
// turns False. After a backoff (Backoff, doubled at each failed probe up to
// MaxBackoff) one probe order is allowed; its install joining closes the
// breaker, failing opens it again. A new NodeClass generation or a change of
// its join Secret (resourceVersion) resets the breaker at once: the failures
// were the old settings'. Failures tied to the hardware (see Hardware) also
// hide the offering (zone, offer, billing period) in the catalogue, so that
// Karpenter picks another. A NodeClaim deleted before its install joined
// (Karpenter's registration timeout, nodeinstall.Controller.Deleted) is a
// failure too (CodeDeletedBeforeJoin), and a NodeClaim counts once whoever
// reports it.
//
// The state lives in the NodeClass's status (status.installs), not in
// memory: a restarted controller does not buy again for a NodeClass whose
// installs fail. Policy holds the pure state machine; Store reads and writes
// it on the NodeClass.
package breaker

import (
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// Defaults of Policy.
const (
	DefaultThreshold  = 2
	DefaultWindow     = time.Hour
	DefaultBackoff    = 30 * time.Minute
	DefaultMaxBackoff = 8 * time.Hour
)

// Policy is the breaker's state machine. Zero fields take the defaults.
type Policy struct {
	// Threshold consecutive failures within Window open the breaker.
	Threshold int32
	Window    time.Duration
	// Backoff before the first probe; doubled after each failed probe, up to MaxBackoff.
	Backoff    time.Duration
	MaxBackoff time.Duration
}

func (p Policy) withDefaults() Policy {
	if p.Threshold <= 0 {
		p.Threshold = DefaultThreshold
	}
	if p.Window <= 0 {
		p.Window = DefaultWindow
	}
	if p.Backoff <= 0 {
		p.Backoff = DefaultBackoff
	}
	if p.MaxBackoff < p.Backoff {
		p.MaxBackoff = max(DefaultMaxBackoff, p.Backoff)
	}
	return p
}

// backoff after the n-th opening (n >= 1).
func (p Policy) backoff(n int32) time.Duration {
	d := p.Backoff
	for i := int32(1); i < n && d < p.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, p.MaxBackoff)
}

// Key is what the counted failures were made with: a change of either resets the breaker.
type Key struct {
	Generation                int64
	JoinSecretResourceVersion string
}

// Current is st if it was counted under key, else nil (the breaker is reset).
func Current(st *v1alpha1.InstallsStatus, key Key) *v1alpha1.InstallsStatus {
	if st == nil || st.Generation != key.Generation || st.JoinSecretResourceVersion != key.JoinSecretResourceVersion {
		return nil
	}
	return st
}

// Failure counts one failed install and returns the new state (st is not
// modified). While open, only the probe's failure opens the breaker again
// (with a doubled backoff): installs ordered before it opened that fail
// afterwards add to the count, not to the backoff.
func (p Policy) Failure(st *v1alpha1.InstallsStatus, key Key, f v1alpha1.InstallFailure, now time.Time) *v1alpha1.InstallsStatus {
	p = p.withDefaults()
	next := &v1alpha1.InstallsStatus{}
	if cur := Current(st, key); cur != nil {
		next = cur.DeepCopy()
	}
	next.Generation, next.JoinSecretResourceVersion = key.Generation, key.JoinSecretResourceVersion
	if next.Opened == 0 && next.WindowStart != nil && now.Sub(next.WindowStart.Time) > p.Window {
		next.ConsecutiveFailures, next.WindowStart = 0, nil
	}
	if next.ConsecutiveFailures == 0 {
		next.WindowStart = &metav1.Time{Time: now}
	}
	next.ConsecutiveFailures++
	f.Time = &metav1.Time{Time: now}
	next.LastFailure = &f
	switch {
	case next.Opened == 0 && next.ConsecutiveFailures >= p.Threshold:
		next.Opened = 1
	case next.Opened > 0 && next.ProbeNodeClaim != "" && f.NodeClaim == next.ProbeNodeClaim:
		next.Opened++
		next.ProbeNodeClaim = ""
	default:
		return next
	}
	next.NextAttempt = &metav1.Time{Time: now.Add(p.backoff(next.Opened))}
	return next
}

// State of the breaker.
type State string

const (
	// Closed: orders go ahead.
	Closed State = "closed"
	// Open: no order until NextAttempt.
	Open State = "open"
	// ProbeAllowed: the backoff is over; the next order is the probe.
	ProbeAllowed State = "probe_allowed"
	// Probing: the probe's install runs; no other order.
	Probing State = "probing"
)

// States are every State, for metrics that start at zero.
var States = []State{Closed, Open, ProbeAllowed, Probing}

// StateOf st at now. probeAlive says whether st's probe NodeClaim still
// exists (a probe whose NodeClaim is gone ended without a verdict: another
// probe may go).
func StateOf(st *v1alpha1.InstallsStatus, now time.Time, probeAlive bool) State {
	switch {
	case st == nil || st.Opened == 0:
		return Closed
	case st.NextAttempt != nil && now.Before(st.NextAttempt.Time):
		return Open
	case st.ProbeNodeClaim != "" && probeAlive:
		return Probing
	}
	return ProbeAllowed
}

// Codes of failures that are not em-imager's.
const (
	CodePhaseFailed = "phase_failed"
	// CodeDeletedBeforeJoin: the NodeClaim was deleted (by Karpenter's
	// registration timeout or otherwise) before its install joined.
	CodeDeletedBeforeJoin = "deleted_before_join"
)

// CodeOf is em-imager's error code in err, CodeDeletedBeforeJoin, or CodePhaseFailed.
func CodeOf(err error) string {
	var re *report.Error
	if errors.As(err, &re) && re.Code != "" {
		return re.Code
	}
	if errors.Is(err, install.ErrDeletedBeforeJoin) {
		return CodeDeletedBeforeJoin
	}
	return CodePhaseFailed
}

// Hardware reports whether a failure with code says something about the
// offering's hardware rather than the NodeClass: a disk error while the
// NodeClass lets em-imager choose the disk (rescue.disk auto). With an
// explicit path the path is the likelier culprit, and hiding the offering
// from every NodeClass would punish the others.
func Hardware(code, diskSelector string) bool {
	if diskSelector != "" && diskSelector != "auto" {
		return false
	}
	switch code {
	case report.CodeDiskNotFound, report.CodeDiskTooSmall, report.CodeDiskUnsuitable:
		return true
	}
	return false
}

// Reasons of InstallsHealthy.
const (
	// ReasonInstallsFailing: the breaker is open; no order before the next attempt.
	ReasonInstallsFailing = "InstallsFailing"
	// ReasonInstallProbing: one probe order's install runs; no other order meanwhile.
	ReasonInstallProbing = "InstallProbing"
	// ReasonProbeAllowed: the backoff is over; the next order is a probe (the condition is True).
	ReasonProbeAllowed = "ProbeAllowed"
)

// Condition is InstallsHealthy for st at now: status, reason and message.
func Condition(st *v1alpha1.InstallsStatus, now time.Time, probeAlive bool) (bool, string, string) {
	switch StateOf(st, now, probeAlive) {
	case Open:
		return false, ReasonInstallsFailing, fmt.Sprintf("%s; no server is ordered before %s",
			describe(st), st.NextAttempt.UTC().Format(time.RFC3339))
	case Probing:
		return false, ReasonInstallProbing, fmt.Sprintf("%s; nodeclaim %s is the probe, no other server is ordered until its install ends",
			describe(st), st.ProbeNodeClaim)
	case ProbeAllowed:
		return true, ReasonProbeAllowed, fmt.Sprintf("%s; the next order is a probe", describe(st))
	}
	return true, "", ""
}

func describe(st *v1alpha1.InstallsStatus) string {
	s := fmt.Sprintf("%d consecutive install failures", st.ConsecutiveFailures)
	if f := st.LastFailure; f != nil {
		s += fmt.Sprintf(", the last in phase %s with code %s (nodeclaim %s, offering %s)", f.Phase, f.Code, f.NodeClaim, f.Offering)
	}
	return s
}
