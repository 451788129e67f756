package scaleway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

// Poller serves the state of in-flight servers from one paginated
// ListServers per zone and interval, shared by every waiter of that zone,
// instead of one GetServer per server: API calls stay constant as the number
// of servers being built grows.
//
// Only servers carrying all of the Poller's selector tags (the cluster's
// managed-by tag) are in the list. A server missing from a list costs one
// GetServer, to tell a server that is gone (IsNotFound) from one the list
// has not caught up with; a server without the selector tags therefore
// degrades to one GetServer per interval, which is correct but not batched.
//
// Servers returned are shared between callers: treat them as read-only.
type Poller struct {
	c        *Client
	selector []string
	interval time.Duration

	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	zones map[scw.Zone]*zonePoller
	loops sync.WaitGroup

	expect expectations
}

// NewPoller returns a Poller over servers carrying all of selector (e.g.
// Tag(TagManagedBy, clusterName)). It polls every Config.PollInterval while
// anyone waits, and not at all when nobody does. Close stops it.
func (c *Client) NewPoller(selector ...string) *Poller {
	ctx, cancel := context.WithCancel(context.Background())
	return &Poller{
		c:        c,
		selector: append([]string(nil), selector...),
		interval: c.cfg.PollInterval,
		ctx:      ctx,
		cancel:   cancel,
		zones:    map[scw.Zone]*zonePoller{},
	}
}

// Close stops polling and waits for the zone loops to exit; pending waits
// return an error.
func (p *Poller) Close() {
	p.cancel()
	p.loops.Wait()
}

// snapshot is the outcome of one list round.
type snapshot struct {
	gen     uint64
	started time.Time // when the list request was issued
	servers map[string]*baremetal.Server
	err     error
}

type zonePoller struct {
	p    *Poller
	zone scw.Zone

	mu      sync.Mutex
	snap    *snapshot
	updated chan struct{} // closed and replaced on every new snapshot
	demand  int           // callers waiting for a snapshot
	running bool
	// dues: when the transitions that waiters expect should end (Expecting);
	// a waiter without one is served every interval.
	dues    map[uint64]due
	waiters uint64
	// wantAfter: a caller needs a list started at or after this instant,
	// sooner than the interval would give it. A list already in flight that
	// started late enough satisfies it.
	wantAfter time.Time
	wake      chan struct{}
	lastList  time.Time // start of the latest list
}

func (p *Poller) zonePoller(zone scw.Zone) *zonePoller {
	p.mu.Lock()
	defer p.mu.Unlock()
	z := p.zones[zone]
	if z == nil {
		z = &zonePoller{p: p, zone: zone, updated: make(chan struct{}), wake: make(chan struct{}, 1)}
		p.zones[zone] = z
	}
	return z
}

// acquire registers a waiter and starts the zone's loop if needed.
// wantAfter, when not zero, asks for a list started at or after it now;
// d, when its time is not zero, is when the waiter expects its transition
// to end. It returns the waiter's token for release.
func (z *zonePoller) acquire(wantAfter time.Time, d due) uint64 {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.demand++
	z.waiters++
	token := z.waiters
	if !d.at.IsZero() {
		if z.dues == nil {
			z.dues = map[uint64]due{}
		}
		z.dues[token] = d
	}
	z.p.c.metrics.waiters.WithLabelValues(string(z.zone)).Set(float64(z.demand))
	urgent := !wantAfter.IsZero() && wantAfter.After(z.lastList)
	if urgent && wantAfter.After(z.wantAfter) {
		z.wantAfter = wantAfter
	}
	if !z.running {
		z.running = true
		z.p.loops.Add(1)
		go z.loop()
	} else {
		// Urgent, or a waiter whose cadence may be denser than the
		// sleeping loop's: it recomputes its next list.
		select {
		case z.wake <- struct{}{}:
		default:
		}
	}
	return token
}

func (z *zonePoller) release(token uint64) {
	z.mu.Lock()
	z.demand--
	delete(z.dues, token)
	z.p.c.metrics.waiters.WithLabelValues(string(z.zone)).Set(float64(z.demand))
	z.mu.Unlock()
}

// nextList is when the next list should start: the earliest any waiter
// wants one, an interval after the last for a waiter without an
// expectation, on its due (Cadence, or CadencePrior for a prior). Caller holds mu.
func (z *zonePoller) nextList() time.Time {
	var next time.Time
	if z.demand > len(z.dues) {
		next = z.lastList.Add(z.p.interval)
	}
	for _, d := range z.dues {
		if n := d.next(z.lastList, z.p.interval); next.IsZero() || n.Before(next) {
			next = n
		}
	}
	return next
}

func (z *zonePoller) current() (*snapshot, <-chan struct{}) {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.snap, z.updated
}

// loop lists the zone at most once per interval while anyone waits. A Get
// whose freshness bound no started list meets triggers a list right away;
// concurrent such Gets share it.
func (z *zonePoller) loop() {
	defer z.p.loops.Done()
	clock := z.p.c.clock
	for {
		wait, stop := z.nextWait()
		if stop {
			return
		}
		if wait > 0 {
			select {
			case <-clock.After(wait):
			case <-z.wake:
			case <-z.p.ctx.Done():
			}
			continue // re-check demand and urgency
		}
		z.list()
	}
}

// nextWait says how long to wait before the next list, and whether to stop:
// no one waits any more, or the poller is closed.
func (z *zonePoller) nextWait() (time.Duration, bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.demand == 0 || z.p.ctx.Err() != nil {
		z.running = false
		return 0, true
	}
	if urgent := z.wantAfter.After(z.lastList); !urgent && !z.lastList.IsZero() {
		return z.nextList().Sub(z.p.c.clock.Now()), false
	}
	return 0, false
}

// list lists the zone once and publishes the result as the next snapshot,
// waking every waiter.
func (z *zonePoller) list() {
	z.mu.Lock()
	started := z.p.c.clock.Now()
	z.lastList = started
	z.mu.Unlock()

	servers, err := z.p.c.listServers(z.p.ctx, OpPollServers, z.zone, z.p.selector)
	z.p.c.metrics.lists.WithLabelValues(string(z.zone)).Inc()
	snap := &snapshot{started: started, err: err, servers: make(map[string]*baremetal.Server, len(servers))}
	for _, s := range servers {
		snap.servers[s.ID] = s
	}
	z.mu.Lock()
	if z.snap != nil {
		snap.gen = z.snap.gen + 1
	} else {
		snap.gen = 1
	}
	z.snap = snap
	close(z.updated)
	z.updated = make(chan struct{})
	z.mu.Unlock()
	if err != nil {
		z.p.c.log.Info("batched server poll failed", "zone", string(z.zone), "error", z.p.c.redact(err.Error()))
	}
}

// Get returns the server as seen by a list started no longer than maxAge
// ago (0: a list started now or later), triggering a list if the latest is
// older. A server missing from the list is read with one GetServer.
func (p *Poller) Get(ctx context.Context, zone scw.Zone, id string, maxAge time.Duration) (*baremetal.Server, error) {
	zone = p.c.zone(zone)
	z := p.zonePoller(zone)
	notBefore := p.c.clock.Now().Add(-maxAge)
	if snap, _ := z.current(); snap != nil && !snap.started.Before(notBefore) {
		return p.lookup(ctx, zone, snap, id)
	}
	token := z.acquire(notBefore, due{})
	defer z.release(token)
	for {
		snap, updated := z.current()
		if snap != nil && !snap.started.Before(notBefore) {
			return p.lookup(ctx, zone, snap, id)
		}
		select {
		case <-updated:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-p.ctx.Done():
			return nil, errors.New("scaleway poller closed")
		}
	}
}

func (p *Poller) lookup(ctx context.Context, zone scw.Zone, snap *snapshot, id string) (*baremetal.Server, error) {
	if snap.err != nil {
		return nil, snap.err
	}
	if s, ok := snap.servers[id]; ok {
		return s, nil
	}
	// Not in the list: gone, or created after the list was taken.
	return p.c.GetServer(ctx, zone, id)
}

// WaitFor blocks until done(server) reports true, evaluating it on every
// list of the zone taken after WaitFor was called (so a state from before an
// action the caller just took is never mistaken for its result). It returns
// the server and done's error if done fails, an IsNotFound error if the
// server disappears, and a non-retryable list error (e.g. permission) at
// once. Retryable list failures (each list already retried within its
// call) are waited out, but maxPollFailures of them in a row end the wait
// with the last one: an API that keeps failing is reported, not
// mistaken for a server that never gets there. The caller's ctx bounds the
// wait.
//
// With Expecting, the lists follow the transition's expected end (Cadence)
// and the wait's duration is learned for the next ones.
func (p *Poller) WaitFor(ctx context.Context, zone scw.Zone, id string, done func(*baremetal.Server) (bool, error), opts ...WaitOption) (*baremetal.Server, error) {
	zone = p.c.zone(zone)
	if id == "" {
		return nil, errors.New("scaleway WaitFor: server id is required")
	}
	var spec waitSpec
	for _, o := range opts {
		o(&spec)
	}
	z := p.zonePoller(zone)
	w := &wait{p: p, zone: zone, id: id, done: done, spec: spec, since: p.c.clock.Now()}
	token := z.acquire(time.Time{}, w.expectedDue())
	defer z.release(token)
	for {
		snap, updated := z.current()
		if w.fresh(snap) {
			if srv, end, err := w.look(ctx, snap); end {
				return srv, err
			}
		}
		if srv, end, err := w.sleep(ctx, updated); end {
			return srv, err
		}
	}
}

// wait is one WaitFor call: what it waits for and what the lists it looked
// at so far showed.
type wait struct {
	p     *Poller
	zone  scw.Zone
	id    string
	done  func(*baremetal.Server) (bool, error)
	spec  waitSpec
	since time.Time // when WaitFor was called: older lists say nothing

	seen    uint64 // generation of the last list looked at
	last    *baremetal.Server
	notDone time.Time // start of the latest list that showed it not done yet
	failed  int       // list failures in a row
}

// expectedDue is when the expected transition should end (the zero due
// without Expecting); it completes the spec's key and start.
func (w *wait) expectedDue() due {
	var d due
	if w.spec.key.kind == "" {
		return d
	}
	w.spec.key.zone = w.zone
	if w.spec.since.IsZero() {
		w.spec.since = w.since
	}
	return w.p.expect.due(w.spec.key, w.spec.since)
}

// fresh reports whether snap is a list not looked at yet and taken after
// WaitFor was called.
func (w *wait) fresh(snap *snapshot) bool {
	return snap != nil && snap.gen != w.seen && !snap.started.Before(w.since)
}

// look evaluates one fresh list; end says the wait is over, with the server
// and error WaitFor returns.
func (w *wait) look(ctx context.Context, snap *snapshot) (*baremetal.Server, bool, error) {
	w.seen = snap.gen
	srv, err := w.p.lookup(ctx, w.zone, snap, w.id)
	switch {
	case err == nil:
		return w.judge(srv, snap.started)
	case IsNotFound(err) || !IsRetryable(err) && ctx.Err() == nil:
		return w.last, true, err
	case ctx.Err() == nil:
		if w.failed++; w.failed >= maxPollFailures {
			return w.last, true, fmt.Errorf("waiting for server %s in %s: %d consecutive polls failed: %w", w.id, w.zone, w.failed, err)
		}
	}
	return nil, false, nil
}

// judge asks done about the server as a list started at started showed it.
func (w *wait) judge(srv *baremetal.Server, started time.Time) (*baremetal.Server, bool, error) {
	w.failed = 0
	w.last = srv
	ok, err := w.done(srv)
	if err != nil {
		return srv, true, err
	}
	if !ok {
		w.notDone = started
		return nil, false, nil
	}
	if w.spec.key.kind != "" && !w.notDone.IsZero() {
		// It ended after the last list that showed it not done: the lower
		// bound, so the dense polling of the next waits starts early rather
		// than late. Done on the first list (a restart): nothing learned.
		w.p.expect.observe(w.spec.key, w.notDone.Sub(w.spec.since))
	}
	return srv, true, nil
}

// sleep waits for the next list; end says the caller's context or the
// poller ended first, with what WaitFor returns then.
func (w *wait) sleep(ctx context.Context, updated <-chan struct{}) (*baremetal.Server, bool, error) {
	select {
	case <-updated:
		return nil, false, nil
	case <-ctx.Done():
		if w.last != nil {
			return w.last, true, fmt.Errorf("waiting for server %s in %s (last status %s): %w", w.id, w.zone, w.last.Status, ctx.Err())
		}
		return nil, true, fmt.Errorf("waiting for server %s in %s: %w", w.id, w.zone, ctx.Err())
	case <-w.p.ctx.Done():
		return w.last, true, errors.New("scaleway poller closed")
	}
}

// StatusIs is a WaitFor predicate: done when the server reaches one of
// statuses; an error when it reaches "error" or "out_of_stock" instead
// (unless listed), since those never resolve by waiting.
func StatusIs(statuses ...baremetal.ServerStatus) func(*baremetal.Server) (bool, error) {
	return func(s *baremetal.Server) (bool, error) {
		for _, want := range statuses {
			if s.Status == want {
				return true, nil
			}
		}
		switch s.Status {
		case baremetal.ServerStatusError, baremetal.ServerStatusOutOfStock:
			return false, &ServerStateError{ID: s.ID, Zone: s.Zone, Status: s.Status}
		}
		return false, nil
	}
}

// maxPollFailures is how many list rounds in a row may fail (each after its
// own retries) before WaitFor reports the API as failing: with the default
// interval and attempts, about a minute and a half of a failing API.
const maxPollFailures = 5

// ServerStateError says a server reached a terminal bad state while waited on.
type ServerStateError struct {
	ID     string
	Zone   scw.Zone
	Status baremetal.ServerStatus
}

func (e *ServerStateError) Error() string {
	return fmt.Sprintf("server %s in %s is in status %s", e.ID, e.Zone, e.Status)
}
