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

// Cadence for learned expectations; CadencePrior for a prior is never
// sparser than the plain interval.
func TestCadence(t *testing.T) {
	const i = 15 * time.Second
	due := time.Date(2026, 1, 1, 12, 5, 0, 0, time.UTC)
	for _, c := range []struct {
		name    string
		cadence func(last, due time.Time, interval time.Duration) time.Time
		last    time.Time
		want    time.Time
	}{
		{"early: sparse", Cadence, due.Add(-5 * time.Minute), due.Add(-4 * time.Minute)},
		{"sparse stops where the dense window starts", Cadence, due.Add(-40 * time.Second), due.Add(-30 * time.Second)},
		{"dense before the expected end", Cadence, due.Add(-30 * time.Second), due.Add(-25 * time.Second)},
		{"dense a little after it", Cadence, due.Add(50 * time.Second), due.Add(55 * time.Second)},
		{"plain once well past it", Cadence, due.Add(60 * time.Second), due.Add(75 * time.Second)},
		{"prior, early: the plain interval, not 4", CadencePrior, due.Add(-5 * time.Minute), due.Add(-5*time.Minute + i)},
		{"prior, dense before the expected end", CadencePrior, due.Add(-30 * time.Second), due.Add(-25 * time.Second)},
		{"prior, plain once well past it", CadencePrior, due.Add(60 * time.Second), due.Add(75 * time.Second)},
	} {
		if got := c.cadence(c.last, due, i); !got.Equal(c.want) {
			t.Errorf("%s: next list at due%+v after one at due%+v, want due%+v", c.name, got.Sub(due), c.last.Sub(due), c.want.Sub(due))
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

// deliveryWait orders a server held in delivering, waits for its delivery
// (Expecting) on a fake clock with a 15 s poll interval and delivers it
// deliveredAfter the order; learned, when not zero, is a duration the
// poller saw before. It returns when each list started, after the order.
func deliveryWait(t *testing.T, learned, deliveredAfter time.Duration) (offsets []time.Duration, p *Poller, key expectKey, c *manualClock, srv *baremetal.Server) {
	t.Helper()
	env := startSim(t, 1, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	stuck := env.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStuck, State: "delivering", Tag: Tag(TagManagedBy, cluster)})
	srv, _, err := env.client.CreateServer(ctx, env.createReq("nc-cadence"))
	if err != nil {
		t.Fatal(err)
	}
	clock := &manualClock{now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	lists := &listTimes{base: http.DefaultTransport, clock: clock}
	cfg := testConfig(env.client.cfg.APIURL)
	cfg.PollInterval = cadenceInterval
	client, err := New(cfg, WithClock(clock), WithTransport(lists))
	if err != nil {
		t.Fatal(err)
	}
	poller := client.NewPoller(Tag(TagManagedBy, cluster))
	t.Cleanup(poller.Close)
	key = expectKey{zone: zone, offer: srv.OfferName, kind: TransitionDelivery}
	if learned > 0 {
		poller.expect.observe(key, learned)
	}
	since := clock.Now()
	done := make(chan error, 1)
	go func() {
		_, err := poller.WaitFor(ctx, zone, srv.ID, StatusIs(baremetal.ServerStatusReady),
			Expecting(TransitionDelivery, srv.OfferName, since))
		done <- err
	}()
	released := false
	clock.drive(t, done, func() {
		if !released && clock.Now().Sub(since) >= deliveredAfter {
			env.sim.RemoveFault(stuck)
			released = true
		}
	})
	lists.mu.Lock()
	defer lists.mu.Unlock()
	for _, a := range lists.at {
		offsets = append(offsets, a.Sub(since))
	}
	t.Logf("lists at %v after the order", offsets)
	return offsets, poller, key, clock, srv
}

const cadenceInterval = 15 * time.Second

// countGaps checks the gaps between lists: wantEarly apart up to denseFrom
// (or ending on it), a third of the interval from denseFrom to end; it
// returns how many of each it saw.
func countGaps(t *testing.T, offsets []time.Duration, wantEarly, denseFrom, end time.Duration) (early, dense int) {
	t.Helper()
	for k := 1; k < len(offsets); k++ {
		gap, prev := offsets[k]-offsets[k-1], offsets[k-1]
		switch {
		case offsets[k] <= denseFrom:
			early++
			if gap != wantEarly && offsets[k] != denseFrom {
				t.Errorf("list at %v, %v after the previous one: early in the wait lists are %v apart (or at the dense window's start %v)", offsets[k], gap, wantEarly, denseFrom)
			}
		case prev >= denseFrom && offsets[k] <= end:
			dense++
			if gap != cadenceInterval/3 {
				t.Errorf("list at %v, %v after the previous one: near the expected end lists are %v apart", offsets[k], gap, cadenceInterval/3)
			}
		}
	}
	return early, dense
}

// A delivery expected to take 5 minutes (learned from an earlier one):
// the zone is listed every 4 intervals early in the wait, every third of
// an interval from 30 s before the expected end, and the wait's duration
// is learned. Times are the fake clock's: no wall-clock threshold.
func TestPollerCadenceTightensNearTheExpectedEnd(t *testing.T) {
	const typical = 5 * time.Minute
	offsets, poller, key, clock, srv := deliveryWait(t, typical, typical+30*time.Second)
	sparse, dense := countGaps(t, offsets, 4*cadenceInterval, typical-2*cadenceInterval, typical+30*time.Second)
	if sparse < 4 || dense < 6 {
		t.Errorf("%d sparse and %d dense lists: the wait did not go through both cadences (lists at %v)", sparse, dense, offsets)
	}
	if n := len(poller.expect.samples[key]); n != 2 {
		t.Errorf("%d durations known after the wait, want 2 (it learned this one)", n)
	}

	// Done on the first list (a wait resumed after a restart): no lower
	// bound, nothing learned.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
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

// Before any delivery was seen to end (the first nodes after a start) the
// prior stands in: lists every interval early (never sparser than without
// an expectation) and every third of an interval around the prior's end;
// the delivery is learned for the next waits.
func TestPollerFollowsThePriorBeforeAnyWaitEnded(t *testing.T) {
	prior := priors[TransitionDelivery]
	offsets, poller, key, _, _ := deliveryWait(t, 0, prior+10*time.Second)
	early, dense := countGaps(t, offsets, cadenceInterval, prior-2*cadenceInterval, prior+10*time.Second)
	if early < 10 || dense < 6 {
		t.Errorf("%d early and %d dense lists: the wait did not go through both cadences (lists at %v)", early, dense, offsets)
	}
	if poller.expect.due(key, time.Time{}).prior {
		t.Error("after the wait the delivery is not learned: the next waits would still follow the prior")
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
