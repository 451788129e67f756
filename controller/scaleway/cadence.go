package scaleway

import (
	"slices"
	"sync"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

// Transition names a kind of wait whose duration is steady enough to be
// learned (per offer and zone): Elastic Metal delivers in 4-5 minutes and
// reboots in 2-3, rarely much faster.
type Transition string

const (
	// TransitionDelivery: from the order to the server ready.
	TransitionDelivery Transition = "delivery"
	// TransitionRebootRescue, TransitionRebootNormal: from a reboot request
	// to the server ready in that boot type.
	TransitionRebootRescue Transition = "reboot-rescue"
	TransitionRebootNormal Transition = "reboot-normal"
)

// RebootTo is the transition of a reboot into bootType.
func RebootTo(bootType baremetal.ServerBootType) Transition {
	return Transition("reboot-" + string(bootType))
}

// WaitOption tunes a Poller wait.
type WaitOption func(*waitSpec)

type waitSpec struct {
	key   expectKey
	since time.Time
}

type expectKey struct {
	zone  scw.Zone
	offer string
	kind  Transition
}

// Expecting says the wait is for a transition of kind of a server of offer
// that started at since (the order, the reboot request; zero: the wait's
// start). Once such waits
// were seen to end, the zone's lists follow Cadence around the expected
// end instead of the fixed interval, and this wait's duration is learned.
func Expecting(kind Transition, offer string, since time.Time) WaitOption {
	return func(w *waitSpec) {
		w.key.kind, w.key.offer, w.since = kind, offer, since
	}
}

// Cadence is when the next list should start, after one started at last,
// for a waiter whose transition is expected to end at due: sparse (four
// intervals) early in the wait, but never past the start of the dense
// window, two intervals before due; dense (a third of the interval) from
// there to four intervals after due; the plain interval after that (the
// expectation was wrong: this server is slow, nothing is gained by
// polling it densely).
func Cadence(last, due time.Time, interval time.Duration) time.Time {
	denseFrom := due.Add(-2 * interval)
	switch {
	case last.Before(denseFrom):
		next := last.Add(4 * interval)
		if next.After(denseFrom) {
			next = denseFrom
		}
		return next
	case last.Before(due.Add(4 * interval)):
		return last.Add(max(interval/3, time.Millisecond))
	default:
		return last.Add(interval)
	}
}

// CadencePrior is Cadence for an expectation taken from priors rather than
// learned: dense around due, but never sparser than the plain interval (a
// prior may not fit this offer: a faster server is noticed no later than
// without it).
func CadencePrior(last, due time.Time, interval time.Duration) time.Time {
	next := Cadence(last, due, interval)
	if plain := last.Add(interval); plain.Before(next) {
		return plain
	}
	return next
}

// priors are what a transition is expected to take before this process saw
// one of its kind end (the first nodes after a start): the short side of
// Scaleway's recorded durations (deliveries 4m40s-5m15s, reboots
// 2m20s-2m45s), so that the dense window (30 s before to 60 s after)
// covers them and the first nodes notice each transition within a third
// of an interval instead of a whole one.
var priors = map[Transition]time.Duration{
	TransitionDelivery:     4*time.Minute + 30*time.Second,
	TransitionRebootRescue: 2*time.Minute + 15*time.Second,
	TransitionRebootNormal: 2*time.Minute + 15*time.Second,
}

// expectSamples is how many recent durations a key keeps.
const expectSamples = 8

// expectations are the recent durations of each kind of transition, per
// offer and zone, learned from the waits this process saw end. None known
// (a new offer, a restart): the kind's prior, on CadencePrior.
type expectations struct {
	mu      sync.Mutex
	samples map[expectKey][]time.Duration
}

func (e *expectations) observe(k expectKey, d time.Duration) {
	if d < 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.samples == nil {
		e.samples = map[expectKey][]time.Duration{}
	}
	s := append(e.samples[k], d)
	if len(s) > expectSamples {
		s = s[len(s)-expectSamples:]
	}
	e.samples[k] = s
}

// due is when a waiter expects its transition to end, and whether that
// comes from a prior rather than waits seen to end.
type due struct {
	at    time.Time
	prior bool
}

// next is when the next list should start for this waiter, the last one
// having started at last: Cadence, or CadencePrior for a prior.
func (d due) next(last time.Time, interval time.Duration) time.Time {
	if d.prior {
		return CadencePrior(last, d.at, interval)
	}
	return Cadence(last, d.at, interval)
}

// due is when a transition of kind k that started at since should end: after
// the shortest recent duration (the dense polling starts before the
// fastest of them would end: a shorter guess costs a few lists, a longer
// one costs time on every node), or none learned, after the kind's prior.
// Zero for a kind without either.
func (e *expectations) due(k expectKey, since time.Time) due {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s := e.samples[k]; len(s) > 0 {
		return due{at: since.Add(slices.Min(s))}
	}
	if d, ok := priors[k.kind]; ok {
		return due{at: since.Add(d), prior: true}
	}
	return due{}
}
