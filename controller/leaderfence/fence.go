// Package leaderfence stops a controller process that was frozen long
// enough to have lost its leader election Lease from writing to Scaleway.
//
// Leader election does not fence: a leader frozen (a stopped container, a
// paused host, a stall) past its Lease wakes up believing it still leads,
// and controller-runtime's renew loop takes up to its renew deadline (10s)
// to find out otherwise. Meanwhile its install workers reboot and retag
// servers the new leader is installing. The Fence notices the stall itself:
// a heartbeat that did not beat for MaxStall means the Lease may be
// another's. Any write to Scaleway is refused from then on, the check being
// made when the request is about to leave (before any other goroutine can
// act on the stale belief), and the process exits: its replacement starts
// as a standby.
package leaderfence

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// MaxStall is the default stall after which a process may have lost its
// Lease: controller-runtime's lease duration (15s) less its renew deadline
// (10s). A leader whose renewals failed until just before the deadline and
// that then stalls this long may see its Lease expire for the others.
const MaxStall = 5 * time.Second

// ErrStalled is returned for a write refused after a stall.
var ErrStalled = errors.New("leaderfence: this process stalled longer than its leader Lease allows; another replica may lead, nothing is written")

// Fence is a heartbeat and the verdict on it. The zero value is not usable:
// use New.
type Fence struct {
	maxStall time.Duration
	now      func() time.Time
	exit     func(stalled time.Duration)

	mu      sync.Mutex
	last    time.Time
	stalled time.Duration
	exited  bool
}

// New returns a Fence whose heartbeat starts now. exit is called once,
// on the first stall found (nil: nothing but the refusals).
func New(maxStall time.Duration, exit func(stalled time.Duration)) *Fence {
	return newFence(maxStall, time.Now, exit)
}

func newFence(maxStall time.Duration, now func() time.Time, exit func(time.Duration)) *Fence {
	if maxStall <= 0 {
		maxStall = MaxStall
	}
	return &Fence{maxStall: maxStall, now: now, exit: exit, last: now()}
}

// Run beats every interval until ctx ends. A beat that comes later than
// MaxStall after the previous one trips the fence.
func (f *Fence) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if f.Check() == nil {
				f.mu.Lock()
				f.last = f.now()
				f.mu.Unlock()
			}
		}
	}
}

// Check returns ErrStalled (wrapped with the stall) once the heartbeat has
// been silent longer than MaxStall, and forever after: a process that may
// have lost its Lease does not get it back by beating again.
func (f *Fence) Check() error {
	f.mu.Lock()
	if f.stalled == 0 {
		// The time read of the monotonic clock: a frozen process's clock
		// goes on while it is stopped.
		if gap := f.now().Sub(f.last); gap > f.maxStall {
			f.stalled = gap
		}
	}
	stalled, first := f.stalled, f.stalled > 0 && !f.exited
	if first {
		f.exited = true
	}
	f.mu.Unlock()
	if stalled == 0 {
		return nil
	}
	if first && f.exit != nil {
		f.exit(stalled)
	}
	return fmt.Errorf("%w (no heartbeat for %s, more than %s)", ErrStalled, stalled.Round(time.Millisecond), f.maxStall)
}

// Transport refuses every request but GET and HEAD once the fence tripped,
// before it leaves; reads go through (they change nothing).
func (f *Fence) Transport(base http.RoundTripper) http.RoundTripper {
	return roundTripper{f: f, base: base}
}

type roundTripper struct {
	f    *Fence
	base http.RoundTripper
}

func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		if err := rt.f.Check(); err != nil {
			if req.Body != nil {
				_ = req.Body.Close()
			}
			return nil, err
		}
	}
	return rt.base.RoundTrip(req)
}
