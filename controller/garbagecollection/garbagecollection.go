// Package garbagecollection ends what this cluster pays for but no NodeClaim
// uses: orders whose NodeClaim is gone (a crash between ordering and
// recording, a NodeClaim deleted while its order was in flight), duplicates,
// servers with no NodeClaim tag, and spares whose paid time runs out. Every
// zone the cluster has servers in is swept (package inventory), and every
// server goes through the one spare policy (package spare): a monthly server
// is kept as a spare while it is paid for, the others are released. Karpenter
// core's own garbage collection covers the opposite case (NodeClaims whose
// server is gone).
package garbagecollection

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/awslabs/operatorpkg/reconciler"
	"github.com/awslabs/operatorpkg/singleton"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/clocks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/inventory"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/warmpool"
)

// Reasons a server is collected (the metric's label).
const (
	ReasonNoNodeClaim   = "no_nodeclaim"
	ReasonDuplicate     = "duplicate"
	ReasonUntagged      = "no_nodeclaim_tag"
	ReasonSpareExpired  = "spare_expired"
	ReasonSpareOrphaned = "spare_without_nodeclass"
)

// Controller is a singleton that sweeps every Interval.
type Controller struct {
	Kube client.Client
	// Reader reads NodeClaims uncached (the manager's APIReader); nil
	// means Kube. A cached list may lack a NodeClaim created moments ago
	// that already took a server.
	Reader client.Reader
	// Servers lists every server of the cluster in every zone it has
	// servers in (inventory.List). A zone that cannot be listed is left
	// out and its servers alone; the other zones are swept.
	Servers func(ctx context.Context) (inventory.Listing, error)
	// Spares ends a server's use under the spare policy.
	Spares *spare.Keeper
	// GracePeriod protects a server ordered moments ago whose NodeClaim the
	// cache has not shown yet, or whose NodeClaim is being created.
	GracePeriod time.Duration
	Interval    time.Duration
	Clock       clock.Clock
	Log         logr.Logger
	Collected   *prometheus.CounterVec
	// Unlisted, when set, counts the sweeps that could not list a zone.
	Unlisted *prometheus.CounterVec
	// KeptOnDeletion, when set, says whether a NodeClass that is gone was
	// deleted with sparesOnDeletion: Keep (removal.Records.Kept): a spare of
	// it that the finalizer's listing missed is handed over as that policy
	// says, never released. Unset or no record: released.
	KeptOnDeletion func(ctx context.Context, nodeClass string) (bool, error)
	// RescueKeys, when set, is removed from IAM when no server of the
	// cluster is in a phase that logs into rescue (*rescuekey.Store); the
	// first sweep runs at start, so a key a crashed controller left
	// registered goes as soon as no install needs it.
	RescueKeys RescueKeys
}

// RescueKeys removes the rescue SSH key from IAM when unused.
type RescueKeys interface {
	UnregisterUnused(ctx context.Context, inUse func(context.Context) (bool, error)) (bool, error)
}

// NewCollectedCounter is karpenter_scaleway_em_leaked_servers_collected_total.
func NewCollectedCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "karpenter_scaleway_em_leaked_servers_collected_total",
		Help: "Servers released by the provider's garbage collection, by reason.",
	}, []string{"reason"})
	// At zero from the start, so that increase() sees the first release.
	for _, r := range []string{ReasonNoNodeClaim, ReasonDuplicate, ReasonUntagged, ReasonSpareExpired, ReasonSpareOrphaned} {
		c.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}

// NewUnlistedCounter is karpenter_scaleway_em_garbagecollection_unlisted_zones_total.
func NewUnlistedCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "karpenter_scaleway_em_garbagecollection_unlisted_zones_total",
		Help: "Garbage collection sweeps that could not list a zone's servers (that zone's servers were left alone), by zone.",
	}, []string{"zone"})
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}

// Reconcile sweeps once. The servers are listed first and the NodeClaims
// afterwards, read from the API server rather than the cache: a NodeClaim
// takes a server (a spare, or its own order) only once it exists, so any
// claim a server of the listing is tagged for is in the NodeClaim list that
// follows. The other order let a claim created between the two listings,
// that took a spare meanwhile, look gone.
func (c *Controller) Reconcile(ctx context.Context) (reconciler.Result, error) {
	listing, err := c.Servers(ctx)
	if err != nil {
		return reconciler.Result{}, err
	}
	if len(listing.Zones) > 0 && len(listing.Failed) == len(listing.Zones) {
		return reconciler.Result{}, fmt.Errorf("no zone could be listed: %v", listing.Failed)
	}
	// A zone that cannot be listed does not stop the others: each decision
	// below is about one listed server, except those that need every zone
	// (the rescue key, a duplicate whose kept server may be unseen), which
	// wait for a complete listing. The sweep goes on at its interval
	// rather than an error's growing backoff, so spares elsewhere expire on
	// time during one zone's outage.
	c.skipUnlisted(listing)
	srvs := listing.Servers
	byName, err := c.claimsByName(ctx)
	if err != nil {
		return reconciler.Result{}, err
	}
	var errs []error
	if c.RescueKeys != nil && listing.Complete() {
		if err := c.unregisterRescueKey(ctx, srvs); err != nil {
			errs = append(errs, err)
		}
	}
	for _, v := range c.collectable(ctx, srvs, byName, listing.Complete()) {
		if err := c.end(ctx, v); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, c.settleRescuePending(ctx, srvs)...)
	if len(errs) > 0 {
		return reconciler.Result{}, fmt.Errorf("garbage collection: %v", errs)
	}
	return reconciler.Result{RequeueAfter: c.interval()}, nil
}

// interval is the time between two sweeps: Interval, two minutes when unset.
func (c *Controller) interval() time.Duration {
	if c.Interval == 0 {
		return 2 * time.Minute
	}
	return c.Interval
}

// skipUnlisted logs and counts the zones the listing could not read: their
// servers are left alone this sweep.
func (c *Controller) skipUnlisted(listing inventory.Listing) {
	for _, z := range listing.Zones {
		if err := listing.Failed[z]; err != nil {
			c.Log.Error(err, "garbage collection skips a zone it cannot list: its servers are left alone until it answers", "zone", z)
			if c.Unlisted != nil {
				c.Unlisted.WithLabelValues(z).Inc()
			}
		}
	}
}

// claimsByName lists the NodeClaims, by name.
func (c *Controller) claimsByName(ctx context.Context) (map[string]*karpv1.NodeClaim, error) {
	claims := &karpv1.NodeClaimList{}
	if err := c.reader().List(ctx, claims); err != nil {
		return nil, err
	}
	byName := map[string]*karpv1.NodeClaim{}
	for i := range claims.Items {
		byName[claims.Items[i].Name] = &claims.Items[i]
	}
	return byName, nil
}

// end hands over or releases one victim, and says what became of it.
// Released only while tagged as listed (a spare a NodeClaim took since the
// listing is that NodeClaim's now), and only if the reason still holds on a
// fresh read (stillCollectable).
func (c *Controller) end(ctx context.Context, v victim) error {
	if v.handOver {
		outcome, err := c.Spares.EndSpare(ctx, v.srv.Zone, v.srv.ID, true)
		if err == nil && outcome == spare.HandedOver {
			c.Log.Info("handed over a spare its deleted nodeclass kept (sparesOnDeletion: Keep) that the nodeclass's finalizer missed",
				"server", v.srv.ID, "zone", string(v.srv.Zone), "offer", v.srv.OfferName, "detail", v.detail)
		}
		return err
	}
	listedFor := scaleway.ParseTags(v.srv.Tags)[scaleway.TagNodeClaim]
	outcome, d, err := c.Spares.ReleaseIf(ctx, v.srv.Zone, v.srv.ID, listedFor, v.nc, c.stillCollectable(v))
	if err != nil {
		return err
	}
	switch outcome {
	case spare.Released:
		c.Log.Info("released leaked server", "server", v.srv.ID, "zone", string(v.srv.Zone), "name", v.srv.Name, "offer", v.srv.OfferName, "reason", v.reason, "detail", v.detail, "policy", d.Reason)
		if c.Collected != nil {
			c.Collected.WithLabelValues(v.reason).Inc()
		}
	case spare.Kept:
		c.Log.Info("kept a server no nodeclaim uses as a spare", "server", v.srv.ID, "zone", string(v.srv.Zone), "offer", v.srv.OfferName, "reason", v.reason, "detail", v.detail, "policy", d.Reason)
	case spare.Declined:
		c.Log.Info("left a server alone: it changed hands since the listing", "server", v.srv.ID, "zone", string(v.srv.Zone), "reason", v.reason, "detail", v.detail)
	}
	return nil
}

// settleRescuePending settles the spares kept while their node may still
// run (a NodeClaim deleted while its server booted Talos): rebooted into
// rescue and their stale Node deleted once they can be, before anything
// takes them.
func (c *Controller) settleRescuePending(ctx context.Context, srvs []*baremetal.Server) []error {
	var errs []error
	for _, s := range srvs {
		if s.Status != baremetal.ServerStatusDeleting && install.PhaseOf(s) == install.PhaseSpare && spare.RescuePending(s) {
			if err := c.Spares.Settle(ctx, s.Zone, s.ID); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// reader reads NodeClaims: Reader, else Kube.
func (c *Controller) reader() client.Reader {
	if c.Reader != nil {
		return c.Reader
	}
	return c.Kube
}

// ownedSince is when s last changed hands, or later: every write of the
// NodeClaim tag (an order, a take, a keep as a spare) also writes the
// phase-since tag, and later phases only move it forward. A spare is weeks
// old when a NodeClaim takes it: the grace counts from the take, not from
// the server's creation.
func ownedSince(s *baremetal.Server) time.Time {
	t := created(s)
	if p := install.PhaseSince(s); p.After(t) {
		t = p
	}
	return t
}

// stillCollectable checks v's reason again on the server as read right
// before the release: it has not changed hands nor moved on since the
// listing (ownedSince), its grace is over, and the NodeClaim it is tagged
// for is still absent from the API server. A NodeClaim that took the
// server since the listing therefore keeps it, even when the listing was
// stale.
func (c *Controller) stillCollectable(v victim) func(context.Context, *baremetal.Server) (bool, error) {
	return func(ctx context.Context, fresh *baremetal.Server) (bool, error) {
		if install.PhaseOf(v.srv) == install.PhaseSpare {
			// A spare's fate is its own paid time (Decide reads the fresh
			// server); Release's tag check already refused a taken spare.
			return install.PhaseOf(fresh) == install.PhaseSpare, nil
		}
		since := ownedSince(fresh)
		if !since.Equal(ownedSince(v.srv)) || c.Clock.Now().Sub(since) < c.GracePeriod {
			return false, nil
		}
		if v.reason != ReasonNoNodeClaim {
			return true, nil
		}
		name := scaleway.ParseTags(fresh.Tags)[scaleway.TagNodeClaim]
		err := c.reader().Get(ctx, types.NamespacedName{Name: name}, &karpv1.NodeClaim{})
		switch {
		case err == nil:
			return false, nil
		case client.IgnoreNotFound(err) == nil:
			return true, nil
		default:
			return false, err
		}
	}
}

// unregisterRescueKey removes the rescue key from IAM unless a server of
// this sweep's listing is in a phase that logs into rescue (the holds of
// installs, rebuilt from their tags after a restart) or this process holds it.
func (c *Controller) unregisterRescueKey(ctx context.Context, srvs []*baremetal.Server) error {
	removed, err := c.RescueKeys.UnregisterUnused(ctx, func(context.Context) (bool, error) {
		for _, s := range srvs {
			if s.Status != baremetal.ServerStatusDeleting && install.PhaseOf(s).NeedsRescue() {
				return true, nil
			}
		}
		return false, nil
	})
	if removed {
		c.Log.Info("removed the rescue SSH key from IAM: no install logs into rescue")
	}
	return err
}

type victim struct {
	srv    *baremetal.Server
	nc     *v1alpha1.ScalewayElasticMetalNodeClass // its NodeClass; nil when gone
	reason string
	detail string
	// handOver: a monthly spare of a NodeClass deleted with
	// sparesOnDeletion: Keep, handed over rather than released.
	handOver bool
}

// collectable picks the victims among srvs. With complete false (a zone
// could not be listed), duplicates are ended only when the server the
// NodeClaim uses is among srvs: otherwise the one to keep may be unseen.
func (c *Controller) collectable(ctx context.Context, srvs []*baremetal.Server, claims map[string]*karpv1.NodeClaim, complete bool) []victim {
	now := c.Clock.Now()
	var out []victim
	keptOnDeletion := map[string]bool{} // by deleted NodeClass: its removal record, read once
	// Duplicates: several live servers for one NodeClaim; keep the one the
	// NodeClaim points at (or the oldest), end the others.
	perClaim := map[string][]*baremetal.Server{}
	for _, s := range srvs {
		if s.Status == baremetal.ServerStatusDeleting {
			continue
		}
		tags := scaleway.ParseTags(s.Tags)
		spareNow := install.Phase(tags[scaleway.TagPhase]) == install.PhaseSpare
		// A spare waits for no NodeClaim: its grace counts from its
		// creation as before. Any other server is protected for the grace
		// after it last changed hands (an order, or a take of a spare).
		since := ownedSince(s)
		if spareNow {
			since = created(s)
		}
		if now.Sub(since) < c.GracePeriod {
			continue
		}
		nc, known := c.nodeClass(ctx, tags[scaleway.TagNodeClass])
		if !known {
			continue // cannot tell which policy applies now; next sweep
		}
		if spareNow {
			if v, ok := c.spareVictim(ctx, s, nc, tags[scaleway.TagNodeClass], now, keptOnDeletion); ok {
				out = append(out, v)
			}
			continue
		}
		name := tags[scaleway.TagNodeClaim]
		if name == "" {
			out = append(out, victim{s, nc, ReasonUntagged, "managed by this cluster but tagged for no nodeclaim", false})
			continue
		}
		if _, ok := claims[name]; !ok {
			out = append(out, victim{s, nc, ReasonNoNodeClaim, "nodeclaim " + name + " does not exist", false})
			continue
		}
		perClaim[name] = append(perClaim[name], s)
	}
	return append(out, c.duplicates(ctx, perClaim, claims, complete)...)
}

// spareVictim decides about a spare past its grace, of the NodeClass
// ncName (nc, nil when deleted): a spare whose NodeClass is gone is
// orphaned, one the warm pool wants is the pool's, and any other ends with
// its paid period.
func (c *Controller) spareVictim(ctx context.Context, s *baremetal.Server, nc *v1alpha1.ScalewayElasticMetalNodeClass,
	ncName string, now time.Time, keptOnDeletion map[string]bool,
) (victim, bool) {
	switch {
	case nc == nil:
		return c.orphanedSpare(ctx, s, ncName, keptOnDeletion)
	case warmpool.InPool(s) && warmpool.Wants(nc, "", string(s.Zone), s.OfferName, spare.Billing(c.Spares.Offers, s)):
		// The pool sizes its own (an hourly pool server is idle by design).
		return victim{}, false
	case !spare.Decide(c.Spares.Offers, s, nc, now).Keep:
		return victim{s, nc, ReasonSpareExpired, "its paid period ends", false}, true
	}
	return victim{}, false
}

// orphanedSpare is the victim for a spare whose NodeClass ncName is gone:
// handed over when that NodeClass kept its spares on deletion, else
// released. keptOnDeletion caches the removal records of this sweep.
func (c *Controller) orphanedSpare(ctx context.Context, s *baremetal.Server, ncName string, keptOnDeletion map[string]bool) (victim, bool) {
	v := victim{s, nil, ReasonSpareOrphaned, "its nodeclass " + ncName + " is gone", false}
	// As the finalizer does: only a monthly spare is handed over (an hourly
	// one would bill its new owner for nothing), so only a monthly one needs
	// the record, read once a sweep per NodeClass.
	if c.KeptOnDeletion == nil || !spare.Monthly(c.Spares.Offers, s) {
		return v, true
	}
	kept, read := keptOnDeletion[ncName]
	if !read {
		var err error
		if kept, err = c.KeptOnDeletion(ctx, ncName); err != nil {
			c.Log.Error(err, "cannot tell whether a spare's deleted nodeclass kept its spares: left alone until the next sweep", "server", s.ID, "nodeclass", ncName)
			return victim{}, false
		}
		keptOnDeletion[ncName] = kept
	}
	v.handOver = kept
	return v, true
}

// duplicates ends all but one of the servers tagged for the same NodeClaim.
func (c *Controller) duplicates(ctx context.Context, perClaim map[string][]*baremetal.Server, claims map[string]*karpv1.NodeClaim, complete bool) []victim {
	var out []victim
	for name, list := range perClaim {
		if len(list) < 2 {
			continue
		}
		keep := keptDuplicate(list, claims[name].Status.ProviderID, complete)
		if keep == nil {
			continue
		}
		for _, s := range list {
			if s != keep {
				nc, _ := c.nodeClass(ctx, scaleway.ParseTags(s.Tags)[scaleway.TagNodeClass])
				out = append(out, victim{s, nc, ReasonDuplicate, fmt.Sprintf("nodeclaim %s uses server %s", name, keep.ID), false})
			}
		}
	}
	return out
}

// keptDuplicate picks which of a NodeClaim's servers stays: the one its
// provider ID names, else the oldest. With an incomplete listing the one
// the provider ID names may be unseen, so none is picked (nil).
func keptDuplicate(list []*baremetal.Server, providerID string, complete bool) *baremetal.Server {
	sort.Slice(list, func(i, j int) bool { return created(list[i]).Before(created(list[j])) })
	var keep *baremetal.Server
	for _, s := range list {
		if providerID != "" && providerID == scaleway.ProviderID(s.Zone, s.ID) {
			keep = s
		}
	}
	if keep == nil && complete {
		keep = list[0]
	}
	return keep
}

// nodeClass reads a server's NodeClass; known is false when it cannot be read.
func (c *Controller) nodeClass(ctx context.Context, name string) (nc *v1alpha1.ScalewayElasticMetalNodeClass, known bool) {
	if name == "" {
		return nil, true
	}
	nc = &v1alpha1.ScalewayElasticMetalNodeClass{}
	if err := c.Kube.Get(ctx, types.NamespacedName{Name: name}, nc); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, true
		}
		return nil, false
	}
	return nc, true
}

func created(s *baremetal.Server) time.Time {
	if s.CreatedAt == nil {
		return time.Time{}
	}
	return *s.CreatedAt
}

// Register adds the singleton to the manager.
func (c *Controller) Register(_ context.Context, m manager.Manager) error {
	c.Clock = clocks.Or(c.Clock)
	return controllerruntime.NewControllerManagedBy(m).
		Named("scaleway-em.garbagecollection").
		WatchesRawSource(singleton.Source()).
		Complete(singleton.AsReconciler(c))
}
