package cloudprovider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/ordertags"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/reservation"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/warmpool"
)

// The parts the orderer calls are small interfaces, one per part, so that
// a unit test drives each path and each error class with fakes, without a
// simulated world. The CloudProvider hands it its real parts.

// offerBook finds the catalogue's offers and sets aside those that cannot
// be ordered now (*catalog.Catalog).
type offerBook interface {
	Offer(zone, offerName string, billing catalog.BillingPeriod) (*baremetal.Offer, bool)
	MarkUnavailable(zone, offerName string, billing catalog.BillingPeriod, reason catalog.UnavailableReason)
}

// spareTaker hands a kept server to a NodeClaim (*spare.Keeper). A nil
// server with a nil error means no spare was there to take.
type spareTaker interface {
	Take(ctx context.Context, zone scw.Zone, offerName string, billing catalog.BillingPeriod, nc *v1alpha1.ScalewayElasticMetalNodeClass, claim, nodePool string) (*baremetal.Server, error)
	TakeReserved(ctx context.Context, zone scw.Zone, offerName string, billing catalog.BillingPeriod, nc *v1alpha1.ScalewayElasticMetalNodeClass, claim, nodePool, reservation string) (*baremetal.Server, error)
}

// reservationBook is told when a reserved offering had no spare left
// (*reservation.Cache).
type reservationBook interface {
	Exhausted(nodeClass, zone, offer string, billing catalog.BillingPeriod)
}

// serverOrderer places an order (*scaleway.Client).
type serverOrderer interface {
	CreateServer(ctx context.Context, req scaleway.CreateServerRequest) (*baremetal.Server, bool, error)
}

// spendSession holds a NodeClass's spend limits while one Create orders
// (*spendlimit.Session).
type spendSession interface {
	Check(zone string, offer *baremetal.Offer) error
	Ordered(srv *baremetal.Server, zone string, offer *baremetal.Offer)
	InFlight(tag, zone string, offer *baremetal.Offer)
}

// noSpendLimit is the spendSession of a NodeClass without limits.
type noSpendLimit struct{}

func (noSpendLimit) Check(string, *baremetal.Offer) error                { return nil }
func (noSpendLimit) Ordered(*baremetal.Server, string, *baremetal.Offer) {}
func (noSpendLimit) InFlight(string, string, *baremetal.Offer)           {}

// orderer gives one NodeClaim a server during one Create. Three paths lead
// there: a spare of a reserved offering (reserved, never an order), a spare
// of an ordinary offering (spare), a new order (newServer).
type orderer struct {
	offers       offerBook
	spares       spareTaker
	reservations reservationBook
	servers      serverOrderer
	limits       spendSession
	recorder     events.Recorder
	log          logr.Logger
	// owner says whose servers the orders are (their identity tags).
	owner *identity.Owner
	// setAside keeps an offering away from the NodeClass for a while after
	// it would have crossed a spend limit (spendMarks.mark).
	setAside func(nc *v1alpha1.ScalewayElasticMetalNodeClass, zone, offer string, billing catalog.BillingPeriod, now time.Time)
	// record writes on the NodeClaim, before the order is sent, what it
	// is for (CloudProvider.recordOffering); nil writes nothing.
	record                   func(ctx context.Context, claim *karpv1.NodeClaim, zone, offer string, billing catalog.BillingPeriod) error
	now                      func() time.Time
	clusterName, defaultZone string

	claim *karpv1.NodeClaim
	nc    *v1alpha1.ScalewayElasticMetalNodeClass
}

// pick is one candidate offering as the paths see it: the catalogue's
// offer in one zone, bought as billing.
type pick struct {
	offering *cloudprovider.Offering
	offer    *baremetal.Offer
	zone     string
	billing  catalog.BillingPeriod
}

// step is what a path made of one offering: the claim's server, an error
// that ends the Create, or (next) a reason to try the next offering.
type step struct {
	srv  *baremetal.Server
	err  error
	next bool
}

func done(srv *baremetal.Server) step { return step{srv: srv} }
func fail(err error) step             { return step{err: err} }
func passOver(why error) step         { return step{err: why, next: true} }

// orderer is the orderer of one Create for claim of NodeClass nc; limits
// stay off until the caller opens a spend session.
func (c *CloudProvider) orderer(claim *karpv1.NodeClaim, nc *v1alpha1.ScalewayElasticMetalNodeClass) *orderer {
	return &orderer{
		offers: c.Catalog, spares: c.Spares, reservations: c.Reservations, servers: c.API, limits: noSpendLimit{},
		recorder: c.Recorder, log: c.log, owner: c.Inventory.Owner, setAside: c.spend.mark, record: c.recordOffering, now: time.Now,
		clusterName: c.opts.ClusterName, defaultZone: c.opts.DefaultZone,
		claim: claim, nc: nc,
	}
}

// run tries the candidates in order (cheapest first) while they turn out
// exhausted, out of stock, over quota or over a spend limit; nothing left
// is an InsufficientCapacityError carrying the last reason.
func (o *orderer) run(ctx context.Context, candidates []candidate) (*baremetal.Server, error) {
	var lastErr error
	for _, cand := range candidates {
		zone, billing := offeringZone(cand.offering), offeringBilling(cand.offering)
		offer, ok := o.offers.Offer(zone, cand.it.Name, billing)
		if !ok {
			continue
		}
		st := o.try(ctx, pick{offering: cand.offering, offer: offer, zone: zone, billing: billing})
		if !st.next {
			return st.srv, st.err
		}
		lastErr = st.err
	}
	if lastErr == nil {
		lastErr = errors.New("no offering of the catalogue matches")
	}
	return nil, cloudprovider.NewInsufficientCapacityError(fmt.Errorf("every compatible offering is out of stock, over quota or over a spend limit: %w", lastErr))
}

// try takes one offering down its path: a reserved offering is only ever a
// spare; an ordinary one is a spare when one is kept, else a new order.
func (o *orderer) try(ctx context.Context, p pick) step {
	if p.offering.CapacityType() == karpv1.CapacityTypeReserved {
		return o.reserved(ctx, p)
	}
	if st, ok := o.spare(ctx, p); ok {
		return st
	}
	return o.newServer(ctx, p)
}

// reserved takes a spare of a reserved offering for the claim. None left
// (taken meanwhile, released) marks the reservation exhausted until the
// next listing, so that Karpenter's next choice is another offering.
func (o *orderer) reserved(ctx context.Context, p pick) step {
	id := p.offering.ReservationID()
	srv, err := o.spares.TakeReserved(ctx, scw.Zone(p.zone), p.offer.Name, p.billing, o.nc, o.claim.Name, o.nodePool(), id)
	if err != nil {
		return fail(err)
	}
	if srv != nil {
		o.publish(reservedSpareTaken(o.claim, srv, p.zone, id))
		return done(srv)
	}
	o.reservations.Exhausted(o.nc.Name, p.zone, p.offer.Name, p.billing)
	o.log.Info("reservation exhausted, trying the next offering", "reservation", id, "nodeclaim", o.claim.Name)
	return passOver(reservation.ErrExhausted(id))
}

// spare takes a kept server of the offering for the claim; ok is false
// when none was taken and nothing failed, and the offering is then ordered.
// Monthly servers are kept as spares; hourly ones only in a warm pool, so
// no listing is made for an hourly offering outside one.
func (o *orderer) spare(ctx context.Context, p pick) (st step, ok bool) {
	if p.billing != catalog.BillingMonthly && !warmpool.Wants(o.nc, o.defaultZone, p.zone, p.offer.Name, p.billing) {
		return step{}, false
	}
	srv, err := o.spares.Take(ctx, scw.Zone(p.zone), p.offer.Name, p.billing, o.nc, o.claim.Name, o.nodePool())
	if err != nil {
		return fail(err), true
	}
	if srv == nil {
		return step{}, false
	}
	o.publish(spareTaken(o.claim, p, srv))
	return done(srv), true
}

// newServer orders the offering for the claim within the spend limits.
func (o *orderer) newServer(ctx context.Context, p pick) step {
	if err := o.limits.Check(p.zone, p.offer); err != nil {
		// Another offering may fit under the limit; this one is set
		// aside briefly so that Karpenter's next choice is another.
		o.setAside(o.nc, p.zone, p.offer.Name, p.billing, o.now())
		o.publish(spendLimitReached(o.claim, p, err))
		return passOver(err)
	}
	if o.record != nil {
		if err := o.record(ctx, o.claim, p.zone, p.offer.Name, p.billing); err != nil {
			return fail(err) // nothing was sent
		}
	}
	srv, _, err := o.servers.CreateServer(ctx, scaleway.CreateServerRequest{
		Zone:           scw.Zone(p.zone),
		OfferID:        p.offer.ID,
		Name:           o.claim.Name,
		Description:    fmt.Sprintf("Karpenter node of cluster %s (nodepool %s)", o.clusterName, o.nodePool()),
		Tags:           o.serverTags(p.billing),
		IdempotencyTag: o.claimTag(),
		Match:          ordertags.Match(o.owner),
	})
	if err != nil {
		return o.orderFailed(p, err)
	}
	o.limits.Ordered(srv, p.zone, p.offer)
	o.publish(ordered(o.claim, p, srv))
	return done(srv)
}

// orderFailed decides what a failed order means. Out of stock and over
// quota set the offering aside and try the next one; a refusal sets it
// aside and ends the Create, so that Karpenter picks again; anything else
// (an API fault, an answer lost) ends the Create without trying another
// offering while the order may have been taken.
func (o *orderer) orderFailed(p pick, err error) step {
	switch {
	case scaleway.IsOutOfStock(err):
		o.offers.MarkUnavailable(p.zone, p.offer.Name, p.billing, catalog.ReasonOutOfStock)
	case scaleway.IsQuotaExceeded(err):
		o.offers.MarkUnavailable(p.zone, p.offer.Name, p.billing, catalog.ReasonQuota)
	case scaleway.IsOrderRefused(err):
		o.offers.MarkUnavailable(p.zone, p.offer.Name, p.billing, catalog.ReasonRefused)
		o.publish(orderRefused(o.claim, p, err))
		return fail(cloudprovider.NewInsufficientCapacityError(fmt.Errorf("ordering %s in %s was refused: %w", p.offer.Name, p.zone, err)))
	default:
		// An order whose answer was lost (ErrOrderInFlight on the next
		// tries) counts against the spend limits until it shows or its
		// settle window ends; Karpenter retries Create.
		o.limits.InFlight(o.claimTag(), p.zone, p.offer)
		if errors.Is(err, scaleway.ErrOrderInFlight) || scaleway.IsAmbiguous(err) {
			o.publish(orderMayBeTaken(o.claim, p))
		}
		return fail(fmt.Errorf("ordering %s in %s: %w", p.offer.Name, p.zone, err))
	}
	o.log.Info("offering unavailable, trying the next one", "offer", p.offer.Name, "zone", p.zone, "billing", p.billing, "error", err.Error())
	o.publish(offeringUnavailable(o.claim, p, err))
	return passOver(err)
}

// serverTags are an order's tags (package ordertags), bought as billing.
func (o *orderer) serverTags(billing catalog.BillingPeriod) []string {
	return ordertags.For(o.owner, o.nc, install.PhaseOrdered, o.now(), billing,
		scaleway.Tag(scaleway.TagNodePool, o.nodePool()),
		o.claimTag())
}

// claimTag is the claim's tag, also every order's idempotency tag: a
// retried order finds the server an earlier one of the claim created.
func (o *orderer) claimTag() string { return scaleway.Tag(scaleway.TagNodeClaim, o.claim.Name) }

func (o *orderer) nodePool() string { return o.claim.Labels[karpv1.NodePoolLabelKey] }

// publish records ev (events.go) on the orderer's recorder, if any.
func (o *orderer) publish(ev events.Event) { publish(o.recorder, ev) }
