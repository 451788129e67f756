// Package spendlimit enforces a NodeClass's spend limits (spec.limits) on
// new orders: an order that would take the NodeClass's hourly spend or its
// monthly commitment over its limit is not placed.
//
// Current spend is package spend's computation over a fresh listing of the
// cluster's servers, plus the orders placed here that the listing does not
// show yet (Scaleway's listings lag orders), so that two Creates in a row
// cannot both fit under the same headroom. An order whose answer was lost
// (in flight: the API may have taken it) counts as well, until a listing
// shows a server with its idempotency tag or the API client stops treating
// it as in flight (its settle window ends): the next order cannot pass the
// limit on the strength of a lost answer. A NodeClass's checks and orders
// are serialised; NodeClasses without limits cost nothing (no listing, no
// lock).
//
// What a process remembers dies with it: after a leader change (or a
// restart) the orders the previous process placed that the listing does
// not show yet are known only from the records it left in the API server
// before sending them (Limiter.Records), and count from those.
package spendlimit

import (
	"context"
	"fmt"
	"sync"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"k8s.io/utils/clock"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/billing"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/clocks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spend"
)

// DefaultPending is how long an order counts on top of the listing when
// the listing does not show it.
const DefaultPending = 10 * time.Minute

// Limits of the NodeClass resource.
const (
	LimitHourly     = "hourly_spend"
	LimitCommitment = "monthly_commitment"
)

// Limiter checks orders against NodeClass limits.
type Limiter struct {
	// Servers lists every server of the cluster ((*inventory.Inventory).Servers).
	Servers func(ctx context.Context) ([]*baremetal.Server, error)
	Offers  spend.Offers
	Clock   clock.Clock
	// Pending (default DefaultPending) bounds how long an order not yet listed counts.
	Pending time.Duration
	// OrderInFlight says whether the API client still treats the order of
	// an idempotency tag as in flight ((*scaleway.Client).OrderInFlight):
	// until its settle window ends no other order goes for that tag, and
	// after it the tag may order again (that order then counts instead).
	// An order whose answer was lost counts while it is in flight and not
	// listed; nil: while not listed, for Pending at most.
	OrderInFlight func(tag string) bool
	// Records are sources of the orders another controller process (the
	// leader before a leader change, this controller before a restart)
	// recorded in the API server before sending them, that may have been
	// taken: each counts while no listed server carries its tag. The
	// sources leave out this process's own records (its memory counts
	// those) and records older than the order settle window.
	Records []func(ctx context.Context, nodeClass string) ([]Record, error)
	Metrics *Metrics

	mu       sync.Mutex
	locks    map[string]*sync.Mutex
	pending  map[string]pendingOrder // by server ID
	inFlight map[string]pendingOrder // by idempotency tag
}

// Record is an order another process recorded before sending it: its
// idempotency tag (the NodeClaim's or the warm-pool slot's) and the
// offering it was for.
type Record struct {
	Tag, Zone, Offer string
	Billing          catalog.BillingPeriod
}

type pendingOrder struct {
	nodeClass string
	server    *baremetal.Server
	at        time.Time
}

// ExceededError is an order refused by a limit.
type ExceededError struct {
	NodeClass string
	Limit     string
	// Max is the limit; Current what is spent or committed; Order what the order adds (EUR/h or EUR).
	Max, Current, Order float64
}

func (e *ExceededError) Error() string {
	unit := "EUR/h"
	if e.Limit == LimitCommitment {
		unit = "EUR"
	}
	return fmt.Sprintf("nodeclass %s: the order would take its %s to %.4f %s, over its limit of %.4f %s (now %.4f %s)",
		e.NodeClass, e.Limit, e.Current+e.Order, unit, e.Max, unit, e.Current, unit)
}

// Session is one Create's view of a NodeClass's spend, holding the
// NodeClass's lock until End.
type Session struct {
	l                        *Limiter
	nc                       string
	hourly                   float64
	committed                float64
	maxHourly, maxCommitment float64
	hasHourly, hasCommitment bool
	unlock                   func()
}

// Begin opens a session for nc; nil (and no lock) when nc has no limits.
// A listing failure is an error: a limit is not enforced on a guess.
func (l *Limiter) Begin(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass) (*Session, error) {
	lim := nc.Spec.Limits
	if lim == nil {
		return nil, nil
	}
	s := &Session{l: l, nc: nc.Name}
	s.maxHourly, s.hasHourly = v1alpha1.EUR(lim.HourlySpend)
	s.maxCommitment, s.hasCommitment = v1alpha1.EUR(lim.MonthlyCommitment)
	if !s.hasHourly && !s.hasCommitment {
		return nil, nil
	}
	s.unlock = l.lock(nc.Name)
	all, err := l.Servers(ctx)
	if err != nil {
		s.unlock()
		return nil, fmt.Errorf("listing servers for nodeclass %s's spend limits: %w", nc.Name, err)
	}
	now := l.clock().Now()
	listed, tags := listedIDsAndTags(all)
	servers := append([]*baremetal.Server(nil), all...)
	servers = append(servers, l.unlisted(nc.Name, now, listed, tags)...)
	recorded, err := l.recorded(ctx, nc.Name, tags)
	if err != nil {
		s.unlock()
		return nil, err
	}
	servers = append(servers, recorded...)
	a := spend.Compute(servers, l.Offers, now).NodeClass(nc.Name)
	s.hourly, s.committed = a.Hourly, a.Commitment
	return s, nil
}

// listedIDsAndTags is the set of server IDs of a listing and the set of every
// tag on them.
func listedIDsAndTags(all []*baremetal.Server) (listed, tags map[string]bool) {
	listed = make(map[string]bool, len(all))
	tags = map[string]bool{}
	for _, srv := range all {
		listed[srv.ID] = true
		for _, t := range srv.Tags {
			tags[t] = true
		}
	}
	return listed, tags
}

// unlisted is what nodeClass ordered that the listing does not show yet:
// servers ordered (by ID) and orders whose answer was lost (by tag). Entries
// the listing now shows, or that have settled, are forgotten on the way.
func (l *Limiter) unlisted(nodeClass string, now time.Time, listed, tags map[string]bool) []*baremetal.Server {
	var out []*baremetal.Server
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, p := range l.pending {
		switch {
		case listed[id] || now.Sub(p.at) > l.pendingFor():
			delete(l.pending, id)
		case p.nodeClass == nodeClass:
			out = append(out, p.server)
		}
	}
	for tag, p := range l.inFlight {
		switch {
		case tags[tag] || l.inFlightSettled(tag, p, now):
			delete(l.inFlight, tag)
		case p.nodeClass == nodeClass:
			out = append(out, p.server)
		}
	}
	return out
}

// inFlightSettled reports whether a lost-answer order no longer counts: when
// the client tracks its orders (OrderInFlight), once the client stops
// looking for it; otherwise after pendingFor.
func (l *Limiter) inFlightSettled(tag string, p pendingOrder, now time.Time) bool {
	if l.OrderInFlight != nil {
		return !l.OrderInFlight(tag)
	}
	return now.Sub(p.at) > l.pendingFor()
}

// Check refuses (an *ExceededError) an order of offer in zone that would
// cross a limit.
func (s *Session) Check(zone string, offer *baremetal.Offer) error {
	if s == nil {
		return nil
	}
	c := spend.Of(s.l.hypothetical(s.nc, zone, offer), s.l.Offers, s.l.clock().Now())
	if s.hasHourly && s.hourly+c.Hourly > s.maxHourly+1e-9 {
		s.l.Metrics.refusal(s.nc, LimitHourly)
		return &ExceededError{NodeClass: s.nc, Limit: LimitHourly, Max: s.maxHourly, Current: s.hourly, Order: c.Hourly}
	}
	if s.hasCommitment && s.committed+c.Commitment > s.maxCommitment+1e-9 {
		s.l.Metrics.refusal(s.nc, LimitCommitment)
		return &ExceededError{NodeClass: s.nc, Limit: LimitCommitment, Max: s.maxCommitment, Current: s.committed, Order: c.Commitment}
	}
	return nil
}

// Ordered counts an order placed in this session until listings show it.
// An order of the same idempotency tag counted as in flight is now this one.
func (s *Session) Ordered(srv *baremetal.Server, zone string, offer *baremetal.Offer) {
	if s == nil || srv == nil {
		return
	}
	now := s.l.clock().Now()
	h := s.l.hypothetical(s.nc, zone, offer)
	h.ID = srv.ID
	c := spend.Of(h, s.l.Offers, now)
	s.hourly += c.Hourly
	s.committed += c.Commitment
	s.l.mu.Lock()
	if s.l.pending == nil {
		s.l.pending = map[string]pendingOrder{}
	}
	s.l.pending[srv.ID] = pendingOrder{nodeClass: s.nc, server: h, at: now}
	for _, t := range srv.Tags {
		delete(s.l.inFlight, t)
	}
	s.l.mu.Unlock()
}

// InFlight counts an order of offer in zone whose answer was lost (the API
// may have taken it; tag is its idempotency tag) until a listing shows a
// server carrying tag or OrderInFlight says it is no longer in flight.
// Calls for a tag already counted change nothing.
func (s *Session) InFlight(tag, zone string, offer *baremetal.Offer) {
	if s == nil || tag == "" || s.l.OrderInFlight != nil && !s.l.OrderInFlight(tag) {
		return // not an order that may have been taken: it costs nothing
	}
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if _, ok := s.l.inFlight[tag]; ok {
		return
	}
	now := s.l.clock().Now()
	h := s.l.hypothetical(s.nc, zone, offer)
	c := spend.Of(h, s.l.Offers, now)
	s.hourly += c.Hourly
	s.committed += c.Commitment
	if s.l.inFlight == nil {
		s.l.inFlight = map[string]pendingOrder{}
	}
	s.l.inFlight[tag] = pendingOrder{nodeClass: s.nc, server: h, at: now}
}

// recorded are the orders other processes recorded for nodeClass that no
// listed server carries the tag of (listedTags), priced as if ordered now.
// A record whose offering the catalogue does not know cannot be priced:
// the check fails rather than leave it out.
func (l *Limiter) recorded(ctx context.Context, nodeClass string, listedTags map[string]bool) ([]*baremetal.Server, error) {
	var out []*baremetal.Server
	for _, src := range l.Records {
		recs, err := src(ctx, nodeClass)
		if err != nil {
			return nil, fmt.Errorf("reading the recorded orders of nodeclass %s for its spend limits: %w", nodeClass, err)
		}
		for _, r := range recs {
			if listedTags[r.Tag] {
				continue // listed: counted with the listing
			}
			offer, ok := l.Offers.Offer(r.Zone, r.Offer, r.Billing)
			if !ok {
				return nil, fmt.Errorf("nodeclass %s: an order another controller process recorded (%s, %s %s in %s) cannot be priced: the catalogue has no such offer", nodeClass, r.Tag, r.Offer, r.Billing, r.Zone)
			}
			out = append(out, l.hypothetical(nodeClass, r.Zone, offer))
		}
	}
	return out, nil
}

// End releases the NodeClass's lock.
func (s *Session) End() {
	if s != nil && s.unlock != nil {
		s.unlock()
	}
}

// hypothetical is a server of offer ordered now for nodeClass, priced by
// the same computation as the listed ones.
func (l *Limiter) hypothetical(nodeClass, zone string, offer *baremetal.Offer) *baremetal.Server {
	now := l.clock().Now()
	tags := []string{scaleway.Tag(scaleway.TagNodeClass, nodeClass)}
	// Bought as the offer's period, as the order's tags will say
	// (ordertags.For): the catalogue's offers carry it.
	if p := catalog.BillingPeriod(offer.SubscriptionPeriod); p.Valid() {
		tags = append(tags, billing.Tags(p, now)...)
	}
	return &baremetal.Server{
		Zone: scw.Zone(zone), OfferID: offer.ID, OfferName: offer.Name, CreatedAt: &now,
		Status: baremetal.ServerStatusDelivering,
		Tags:   tags,
	}
}

func (l *Limiter) lock(nodeClass string) func() {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*sync.Mutex{}
	}
	m := l.locks[nodeClass]
	if m == nil {
		m = &sync.Mutex{}
		l.locks[nodeClass] = m
	}
	l.mu.Unlock()
	m.Lock()
	return m.Unlock
}

func (l *Limiter) clock() clock.Clock { return clocks.Or(l.Clock) }

func (l *Limiter) pendingFor() time.Duration {
	if l.Pending > 0 {
		return l.Pending
	}
	return DefaultPending
}
