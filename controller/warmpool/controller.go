package warmpool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/awslabs/operatorpkg/reconciler"
	"github.com/awslabs/operatorpkg/singleton"
	"github.com/go-logr/logr"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"k8s.io/utils/clock"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/clocks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/ordertags"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spendlimit"
)

// Condition reasons of WarmPoolReady.
const (
	ReasonFull            = "Full"
	ReasonFilling         = "Filling"
	ReasonInvalidEntry    = "InvalidEntry"
	ReasonOrdersBlocked   = "OrdersBlocked"
	ReasonOfferingUnavail = "OfferingUnavailable"
)

// InFlight is how long a slot ordered here counts as there while listings
// do not show its server yet (Scaleway's listings lag orders).
const InFlight = 10 * time.Minute

// Breaker is the install-failure breaker (*breaker.Store).
type Breaker interface {
	Admit(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass, claim string) error
}

// Controller is a singleton that sizes every NodeClass's pool each Interval.
type Controller struct {
	Kube    client.Client
	API     *scaleway.Client
	Catalog *catalog.Catalog
	// Servers lists every server of the cluster ((*inventory.Inventory).Servers);
	// Saw records a zone an order went to ((*inventory.Inventory).Saw).
	Servers func(ctx context.Context) ([]*baremetal.Server, error)
	Saw     func(zone string)
	Spares  *spare.Keeper
	// Breaker and Limits gate orders as they gate Create's (nil: none).
	Breaker     Breaker
	Limits      *spendlimit.Limiter
	DefaultZone string
	Recorder    events.Recorder
	Metrics     *Metrics
	Interval    time.Duration
	Clock       clock.Clock
	Log         logr.Logger

	mu      sync.Mutex
	ordered map[string]slotOrder // slot tag -> its order here
	process string               // names this process in the slot records (processID)
}

// slotOrder is a slot ordered here: when, and the server the order gave.
type slotOrder struct {
	at time.Time
	id string
}

// Reconcile sizes every pool once.
func (c *Controller) Reconcile(ctx context.Context) (reconciler.Result, error) {
	ncs := &v1alpha1.ScalewayElasticMetalNodeClassList{}
	if err := c.Kube.List(ctx, ncs); err != nil {
		return reconciler.Result{}, err
	}
	interval := c.Interval
	if interval == 0 {
		interval = time.Minute
	}
	pools, listed, err := c.listPools(ctx, ncs.Items)
	if err != nil {
		return reconciler.Result{}, err // never size on a partial view
	}
	c.Metrics.reset()
	var errs []error
	for i := range ncs.Items {
		errs = append(errs, c.reconcileNodeClass(ctx, &ncs.Items[i], pools, listed)...)
	}
	return reconciler.Result{RequeueAfter: interval}, errors.Join(errs...)
}

// listPools lists the servers (only when some NodeClass has or had a pool)
// and returns the pool servers by NodeClass and the set of listed IDs.
func (c *Controller) listPools(ctx context.Context, ncs []v1alpha1.ScalewayElasticMetalNodeClass) (pools map[string][]*baremetal.Server, listed map[string]bool, err error) {
	pools = map[string][]*baremetal.Server{}
	pooled := false
	for i := range ncs {
		pooled = pooled || len(ncs[i].Spec.WarmPool) > 0
	}
	var srvs []*baremetal.Server
	if pooled || c.Metrics.hadPools() {
		if srvs, err = c.Servers(ctx); err != nil {
			return nil, nil, err
		}
	}
	listed = map[string]bool{}
	for _, s := range srvs {
		listed[s.ID] = true
		if InPool(s) {
			nc, _ := scaleway.TagValue(s.Tags, scaleway.TagNodeClass)
			pools[nc] = append(pools[nc], s)
		}
	}
	return pools, listed, nil
}

// reconcileNodeClass sizes one NodeClass's pool, or clears what a pool
// switched off left (its condition, its slot records).
func (c *Controller) reconcileNodeClass(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass, pools map[string][]*baremetal.Server, listed map[string]bool) []error {
	if nc.Unreadable() != nil {
		// Its pool may have lost values: neither order nor release for
		// it until it is fixed (the NodeClass status controller reports it).
		return nil
	}
	if len(nc.Spec.WarmPool) == 0 && len(pools[nc.Name]) == 0 {
		var errs []error
		if nc.StatusConditions().Get(v1alpha1.ConditionTypeWarmPoolReady) != nil {
			errs = append(errs, c.setCondition(ctx, nc, nil))
		}
		// A pool switched off keeps no slot records past their window.
		return append(errs, c.forget(ctx, nc, nil))
	}
	if err := c.reconcile(ctx, nc, pools[nc.Name], listed); err != nil {
		return []error{fmt.Errorf("warm pool of nodeclass %s: %w", nc.Name, err)}
	}
	return nil
}

type condition struct {
	ok              bool
	reason, message string
}

func (c *Controller) reconcile(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass, pool []*baremetal.Server, listed map[string]bool) error {
	want, problems := Entries(nc, c.DefaultZone, c.Catalog)
	billing := func(s *baremetal.Server) catalog.BillingPeriod { return spare.Billing(c.Catalog, s) }
	listedSlots := slotTags(pool)
	inFlight := c.inFlight(pool, listed)
	// Slots another process (the leader before a leader change) recorded
	// and the listing does not show yet count as ordered too.
	for tag := range c.othersInFlight(nc, listedSlots) {
		inFlight[tag] = true
	}
	plan := Decide(want, pool, billing, inFlight, nc.Name)
	var errs []error
	if err := c.forget(ctx, nc, listedSlots); err != nil {
		errs = append(errs, err)
	}
	for _, s := range plan.Release {
		if _, err := c.Spares.EndSpare(ctx, s.Zone, s.ID, false); err != nil {
			errs = append(errs, err)
			continue
		}
		c.publish(released(nc, s, billing(s)))
	}
	for _, s := range plan.Demote {
		if err := c.demote(ctx, s); err != nil {
			errs = append(errs, err)
			continue
		}
		c.publish(demoted(nc, s))
	}
	cond := condition{ok: true, reason: ReasonFull, message: "every warm-pool server is delivered"}
	if len(plan.Order) > 0 {
		cond = c.order(ctx, nc, plan.Order)
	} else if n := delivering(plan.Keep); n > 0 {
		cond = condition{reason: ReasonFilling, message: fmt.Sprintf("%d warm-pool server(s) being delivered", n)}
	}
	if len(problems) > 0 {
		cond = condition{reason: ReasonInvalidEntry, message: strings.Join(problems, "; ")}
	}
	c.Metrics.observe(nc.Name, want, plan.Keep, c.Catalog, c.clock().Now())
	errs = append(errs, c.setCondition(ctx, nc, &cond))
	return errors.Join(errs...)
}

// order places the missing slots' orders through Create's gates; the
// condition says why the pool is not full.
func (c *Controller) order(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass, slots []Slot) condition {
	if blocked := c.orderGate(ctx, nc); blocked != nil {
		return *blocked
	}
	var limits *spendlimit.Session
	if c.Limits != nil {
		var err error
		if limits, err = c.Limits.Begin(ctx, nc); err != nil {
			return c.blocked(nc, err)
		}
		defer limits.End()
	}
	cond := condition{reason: ReasonFilling, message: fmt.Sprintf("ordering %d warm-pool server(s)", len(slots))}
	for _, slot := range slots {
		offer, why := c.slotOffer(nc, slot.Key, limits)
		if offer == nil {
			if why != nil {
				cond = *why
			}
			continue
		}
		failed, stop, err := c.placeSlot(ctx, nc, slot, offer, limits)
		if err != nil {
			return c.blocked(nc, err) // nothing was sent
		}
		if failed != nil {
			cond = *failed
		}
		if stop {
			break // a lost answer, 5xx, 429: the next pass, not the next slot
		}
	}
	return cond
}

// orderGate is the condition that stops every warm-pool order of nc now, or
// nil: the NodeClass not Ready, its install-failure breaker open, or the
// breaker refusing.
func (c *Controller) orderGate(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass) *condition {
	if !nc.StatusConditions().Root().IsTrue() {
		return &condition{reason: ReasonOrdersBlocked, message: "no order while the nodeclass is not Ready"}
	}
	if st := nc.Status.Installs; st != nil && st.Opened > 0 {
		// A pool server proves no install: it waits until the probe of a
		// NodeClaim closes the breaker.
		cond := c.blocked(nc, fmt.Errorf("nodeclass %s: the install-failure breaker is open; no warm-pool order until an install joins", nc.Name))
		return &cond
	}
	if c.Breaker != nil {
		if err := c.Breaker.Admit(ctx, nc, "warm-pool"); err != nil {
			cond := c.blocked(nc, err)
			return &cond
		}
	}
	return nil
}

// slotOffer is the offer to order for key k, or nil when none may be
// ordered now, with the condition that says why (nil: the catalogue no
// longer sells it, which Entries reports).
func (c *Controller) slotOffer(nc *v1alpha1.ScalewayElasticMetalNodeClass, k Key, limits *spendlimit.Session) (*baremetal.Offer, *condition) {
	offer, ok := c.Catalog.Offer(k.Zone, k.Offer, k.Billing)
	if !ok {
		return nil, nil // Entries checked it; the catalogue changed since
	}
	if reason, unavailable := c.Catalog.Unavailable(k.Zone, k.Offer, k.Billing); unavailable {
		return nil, &condition{reason: ReasonOfferingUnavail, message: fmt.Sprintf("%s is set aside (%s); ordering again when it expires", k, reason)}
	}
	if err := limits.Check(k.Zone, offer); err != nil {
		c.publish(spendLimitReached(nc, k, err))
		return nil, &condition{reason: ReasonOrdersBlocked, message: err.Error()}
	}
	return offer, nil
}

// placeSlot records the slot, then orders its server. err says nothing was
// sent (the slot could not be recorded); failed is the condition of an order
// that failed, and stop says the other slots wait for the next pass.
func (c *Controller) placeSlot(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass, slot Slot, offer *baremetal.Offer, limits *spendlimit.Session) (failed *condition, stop bool, err error) {
	k := slot.Key
	tag := SlotTag(nc.Name, k, slot.Index)
	if err := c.recordSlot(ctx, nc, slot); err != nil {
		return nil, false, err
	}
	srv, ordered, err := c.API.CreateServer(ctx, scaleway.CreateServerRequest{
		Zone:           scw.Zone(k.Zone),
		OfferID:        offer.ID,
		Name:           fmt.Sprintf("%s-warm-%s-%d", nc.Name, strings.ToLower(k.Offer), slot.Index),
		Description:    fmt.Sprintf("Karpenter warm-pool server of cluster %s (nodeclass %s)", c.Spares.Owner.Name, nc.Name),
		Tags:           ordertags.For(c.Spares.Owner, nc, install.PhaseSpare, c.clock().Now(), k.Billing, scaleway.Tag(scaleway.TagWarmPool, "true"), tag),
		IdempotencyTag: tag,
		Match:          ordertags.Match(c.Spares.Owner),
	})
	if err != nil {
		// If it may have been taken, it counts against the spend limits
		// until it shows or its settle window ends.
		limits.InFlight(tag, k.Zone, offer)
		cond := c.orderFailed(nc, k, err)
		reason, unavailable := c.Catalog.Unavailable(k.Zone, k.Offer, k.Billing)
		return &cond, !unavailable || reason == catalog.ReasonRefused, nil
	}
	c.remember(tag, srv.ID)
	if c.Saw != nil {
		c.Saw(k.Zone)
	}
	if ordered {
		limits.Ordered(srv, k.Zone, offer)
		c.Metrics.ordered(nc.Name, k)
		c.publish(slotOrdered(nc, k, srv.ID))
	}
	return nil, false, nil
}

func (c *Controller) orderFailed(nc *v1alpha1.ScalewayElasticMetalNodeClass, k Key, err error) condition {
	switch {
	case scaleway.IsOutOfStock(err):
		c.Catalog.MarkUnavailable(k.Zone, k.Offer, k.Billing, catalog.ReasonOutOfStock)
	case scaleway.IsQuotaExceeded(err):
		c.Catalog.MarkUnavailable(k.Zone, k.Offer, k.Billing, catalog.ReasonQuota)
	case scaleway.IsOrderRefused(err):
		c.Catalog.MarkUnavailable(k.Zone, k.Offer, k.Billing, catalog.ReasonRefused)
	}
	c.Log.Info("warm-pool order failed", "nodeclass", nc.Name, "offering", k.String(), "error", err.Error())
	c.publish(orderFailed(nc, k, err))
	return condition{reason: ReasonOfferingUnavail, message: orderFailedMessage(k, err)}
}

func (c *Controller) blocked(nc *v1alpha1.ScalewayElasticMetalNodeClass, err error) condition {
	c.publish(ordersBlocked(nc, err))
	return condition{reason: ReasonOrdersBlocked, message: err.Error()}
}

// demote takes a monthly server out of the pool: an ordinary spare from now on.
func (c *Controller) demote(ctx context.Context, s *baremetal.Server) error {
	_, err := c.API.EditTags(ctx, s.Zone, s.ID, func(tags []string) ([]string, bool) {
		tags, a := scaleway.RemoveTagIn(tags, scaleway.TagWarmPool)
		tags, b := scaleway.RemoveTagIn(tags, scaleway.TagWarmPoolSlot)
		return tags, a || b
	})
	if scaleway.IsNotFound(err) {
		return nil
	}
	return err
}

func (c *Controller) setCondition(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass, cond *condition) error {
	stored := nc.DeepCopy()
	conds := nc.StatusConditions()
	switch {
	case cond == nil:
		_ = conds.Clear(v1alpha1.ConditionTypeWarmPoolReady)
	case cond.ok:
		conds.SetTrueWithReason(v1alpha1.ConditionTypeWarmPoolReady, cond.reason, cond.message)
	default:
		conds.SetFalse(v1alpha1.ConditionTypeWarmPoolReady, cond.reason, cond.message)
	}
	if equalConditions(stored, nc) {
		return nil
	}
	// The optimistic lock: the status controller patches the same list.
	return client.IgnoreNotFound(c.Kube.Status().Patch(ctx, nc, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})))
}

func equalConditions(a, b *v1alpha1.ScalewayElasticMetalNodeClass) bool {
	ca, cb := a.StatusConditions().Get(v1alpha1.ConditionTypeWarmPoolReady), b.StatusConditions().Get(v1alpha1.ConditionTypeWarmPoolReady)
	if ca == nil || cb == nil {
		return ca == nil && cb == nil
	}
	return ca.Status == cb.Status && ca.Reason == cb.Reason && ca.Message == cb.Message
}

// inFlight are the slots ordered here that the listing does not show yet:
// neither the slot tag in the pool nor the server the order gave among all
// the cluster's servers (listed taken, it left the pool before this pass
// saw it there: its slot is free again).
func (c *Controller) inFlight(pool []*baremetal.Server, listedIDs map[string]bool) map[string]bool {
	listed := slotTags(pool)
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]bool{}
	now := c.clock().Now()
	for tag, o := range c.ordered {
		if listed[tag] || listedIDs[o.id] || now.Sub(o.at) > InFlight {
			delete(c.ordered, tag)
			continue
		}
		out[tag] = true
	}
	return out
}

// slotTags are the slot tags of the listed pool servers.
func slotTags(pool []*baremetal.Server) map[string]bool {
	listed := map[string]bool{}
	for _, s := range pool {
		if v, ok := scaleway.TagValue(s.Tags, scaleway.TagWarmPoolSlot); ok {
			listed[scaleway.Tag(scaleway.TagWarmPoolSlot, v)] = true
		}
	}
	return listed
}

func (c *Controller) remember(tag, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ordered == nil {
		c.ordered = map[string]slotOrder{}
	}
	c.ordered[tag] = slotOrder{at: c.clock().Now(), id: id}
}

func delivering(keep map[Key][]*baremetal.Server) int {
	n := 0
	for _, list := range keep {
		for _, s := range list {
			if s.Status != baremetal.ServerStatusReady {
				n++
			}
		}
	}
	return n
}

// publish records ev (events.go) on the controller's recorder, if any.
func (c *Controller) publish(ev events.Event) {
	if c.Recorder != nil {
		c.Recorder.Publish(ev)
	}
}

func (c *Controller) clock() clock.Clock { return clocks.Or(c.Clock) }

// Register adds the singleton to the manager.
func (c *Controller) Register(_ context.Context, m manager.Manager) error {
	return controllerruntime.NewControllerManagedBy(m).
		Named("scaleway-em.warmpool").
		WatchesRawSource(singleton.Source()).
		Complete(singleton.AsReconciler(c))
}
