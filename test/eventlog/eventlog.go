// Package eventlog is a Karpenter events.Recorder for tests: it keeps what
// was published, in order.
package eventlog

import (
	"strings"
	"sync"

	"sigs.k8s.io/karpenter/pkg/events"
)

// Recorder keeps every published event.
type Recorder struct {
	mu     sync.Mutex
	events []events.Event
}

// Publish implements events.Recorder.
func (r *Recorder) Publish(evs ...events.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, evs...)
}

// Reasons are the published events' reasons, in order, comma-separated.
func (r *Recorder) Reasons() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.events))
	for _, e := range r.events {
		out = append(out, e.Reason)
	}
	return strings.Join(out, ",")
}

// Has reports whether an event of reason was published.
func (r *Recorder) Has(reason string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Reason == reason {
			return true
		}
	}
	return false
}

// Last is the last published event (the zero Event when none).
func (r *Recorder) Last() events.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) == 0 {
		return events.Event{}
	}
	return r.events[len(r.events)-1]
}
