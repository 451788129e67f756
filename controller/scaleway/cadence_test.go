package scaleway

import (
	"context"
	"net/http"
	"regexp"
	"sort"
	"sync"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

func TestCadence(t *testing.T) {
	const i = 15 * time.Second
	due := time.Date(2026, 1, 1, 12, 5, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		last time.Time
		want time.Time
	}{
		{"early: sparse", due.Add(-5 * time.Minute), due.Add(-4 * time.Minute)},
		{"sparse stops where the dense window starts", due.Add(-40 * time.Second), due.Add(-30 * time.Second)},
		{"dense before the expected end", due.Add(-30 * time.Second), due.Add(-25 * time.Second)},
		{"dense a little after it", due.Add(50 * time.Second), due.Add(55 * time.Second)},
		{"plain once well past it", due.Add(60 * time.Second), due.Add(75 * time.Second)},
	} {
		if got := Cadence(c.last, due, i); !got.Equal(c.want) {
			t.Errorf("%s: Cadence(due%+v) = due%+v, want due%+v", c.name, c.last.Sub(due), got.Sub(due), c.want.Sub(due))
		}
	}
}

// manualClock is a fake clock: time moves only when the test fires the
// earliest pending After.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []manualTimer
}

type manualTimer struct {
	at time.Time
	ch chan time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.timers = append(c.timers, manualTimer{at: c.now.Add(d), ch: ch})
	return ch
}

// fireNext moves the time to the earliest pending After and fires it;
// false when none is pending.
func (c *manualClock) fireNext() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return false
	}
	sort.Slice(c.timers, func(a, b int) bool { return c.timers[a].at.Before(c.timers[b].at) })
	next := c.timers[0]
	c.timers = c.timers[1:]
	if next.at.After(c.now) {
		c.now = next.at
	}
	next.ch <- c.now
	return true
}

// listTimes records, in the fake clock's time, when each ListServers starts.
type listTimes struct {
	base  http.RoundTripper
	clock *manualClock
	mu    sync.Mutex
	at    []time.Time
}

var listPathRE = regexp.MustCompile(`/servers$`)

func (l *listTimes) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && listPathRE.MatchString(r.URL.Path) {
		l.mu.Lock()
		l.at = append(l.at, l.clock.Now())
		l.mu.Unlock()
	}
	return l.base.RoundTrip(r)
}

// A delivery expected to take 5 minutes (learned from an earlier one):
// the zone is listed every 4 intervals early in the wait, every third of
// an interval from 30 s before the expected end, and the wait's duration
// is learned. Times are the fake clock's: no wall-clock threshold.
func TestPollerCadenceTightensNearTheExpectedEnd(t *testing.T) {
	const interval = 15 * time.Second
	const typical = 5 * time.Minute
	env := startSim(t, 1, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stuck := env.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStuck, State: "delivering", Tag: Tag(TagManagedBy, cluster)})
	srv, _, err := env.client.CreateServer(ctx, env.createReq("nc-cadence"))
	if err != nil {
		t.Fatal(err)
	}

	clock := &manualClock{now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	lists := &listTimes{base: http.DefaultTransport, clock: clock}
	cfg := testConfig(env.client.cfg.APIURL)
	cfg.PollInterval = interval
	c, err := New(cfg, WithClock(clock), WithTransport(lists))
	if err != nil {
		t.Fatal(err)
	}
	poller := c.NewPoller(Tag(TagManagedBy, cluster))
	defer poller.Close()
	key := expectKey{zone: zone, offer: srv.OfferName, kind: TransitionDelivery}
	poller.expect.observe(key, typical)

	since := clock.Now()
	done := make(chan error, 1)
	go func() {
		_, err := poller.WaitFor(ctx, zone, srv.ID, StatusIs(baremetal.ServerStatusReady),
			Expecting(TransitionDelivery, srv.OfferName, since))
		done <- err
	}()
	released := false
	clock.drive(t, done, func() {
		if !released && clock.Now().Sub(since) >= typical+30*time.Second {
			env.sim.RemoveFault(stuck) // delivered 30 s after the expected end
			released = true
		}
	})
	lists.mu.Lock()
	at := append([]time.Time(nil), lists.at...)
	lists.mu.Unlock()
	var offsets []time.Duration
	for _, a := range at {
		offsets = append(offsets, a.Sub(since))
	}
	t.Logf("lists at %v after the order", offsets)
	denseFrom := typical - 2*interval
	var sparse, dense int
	for k := 1; k < len(offsets); k++ {
		gap, prev := offsets[k]-offsets[k-1], offsets[k-1]
		switch {
		case offsets[k] <= denseFrom:
			sparse++
			if gap != 4*interval && offsets[k] != denseFrom {
				t.Errorf("list at %v, %v after the previous one: early in the wait lists are 4 intervals apart (or at the dense window's start %v)", offsets[k], gap, denseFrom)
			}
		case prev >= denseFrom && offsets[k] <= typical+30*time.Second:
			dense++
			if gap != interval/3 {
				t.Errorf("list at %v, %v after the previous one: near the expected end lists are %v apart", offsets[k], gap, interval/3)
			}
		}
	}
	if sparse < 4 || dense < 6 {
		t.Errorf("%d sparse and %d dense lists: the wait did not go through both cadences (lists at %v)", sparse, dense, offsets)
	}
	if n := len(poller.expect.samples[key]); n != 2 {
		t.Errorf("%d durations known after the wait, want 2 (it learned this one)", n)
	}

	// Done on the first list (a wait resumed after a restart): no lower
	// bound, nothing learned.
	go func() {
		_, err := poller.WaitFor(ctx, zone, srv.ID, StatusIs(baremetal.ServerStatusReady),
			Expecting(TransitionDelivery, srv.OfferName, clock.Now().Add(-time.Hour)))
		done <- err
	}()
	clock.drive(t, done, func() {})
	if n := len(poller.expect.samples[key]); n != 2 {
		t.Errorf("%d durations known after a wait done on its first list, want still 2", n)
	}
}

// drive fires the clock's timers until done delivers the wait's outcome,
// calling each before every step.
func (c *manualClock) drive(t *testing.T, done <-chan error, each func()) {
	t.Helper()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return
		default:
		}
		each()
		if !c.fireNext() {
			time.Sleep(time.Millisecond) // the poll loop is listing or not yet waiting
		}
	}
}
