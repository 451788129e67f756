// Package spare is the one policy for servers whose use ends (a NodeClaim
// deleted, an install that failed for good, a server the garbage collector
// finds without a NodeClaim): an hourly server is released; a server ordered
// with a monthly subscription is paid for the month whether it runs or not,
// so it is kept as a spare instead, rebooted into rescue (the old node is
// gone) and untagged from its NodeClaim, until keeping it would cost a new
// month; the next NodeClaim of the same NodeClass, offer and zone takes it
// instead of ordering (package reservation offers spares to Karpenter as
// reserved capacity). Every decision reads the server's current state
// first: a broken server is never kept.
package spare

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/billing"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/clocks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// RenewalMargin: a spare is released this long before its subscription
// renews (billing.RenewalMargin), so that no sweep interval or slow API call
// costs another month.
const RenewalMargin = billing.RenewalMargin

// Offers is what the policy needs of the catalogue (*catalog.Catalog): the
// offers of a server ordered before billing tags existed (billing.Derive).
type Offers = billing.Offers

// Monthly reports whether srv was bought with a monthly subscription, as
// its billing tags say (billing.Of; never today's catalogue, which may not
// list its offer any more).
func Monthly(offers Offers, srv *baremetal.Server) bool {
	return billing.Of(offers, srv).Monthly()
}

// Billing is how srv is paid for, as its billing tags say (billing.Of).
func Billing(offers Offers, srv *baremetal.Server) catalog.BillingPeriod {
	return billing.Of(offers, srv).Period
}

// MinimumLifetime is the NodeClass's billing.minimumLifetime; set is false
// when it is unset (the paid calendar month only).
func MinimumLifetime(nc *v1alpha1.ScalewayElasticMetalNodeClass) (lifetime time.Duration, set bool) {
	if nc != nil && nc.Spec.Billing.MinimumLifetime != nil {
		return nc.Spec.Billing.MinimumLifetime.Duration, true
	}
	return 0, false
}

// KeepUntil is until when keeping a monthly server bought as rec costs
// nothing more, less RenewalMargin: the end of the calendar month (UTC) now
// is in (billing.PaidUntil: Scaleway renews monthly subscriptions on the
// first of each month, the first month pro rata), or, when the NodeClass's
// minimumLifetime counted from the order ends later, the end of the month
// that lifetime ends in (that month is paid for once it starts). Zero when
// it must go now (a minimumLifetime of 0 disables spares).
func KeepUntil(rec billing.Record, nc *v1alpha1.ScalewayElasticMetalNodeClass, now time.Time) time.Time {
	lifetime, set := MinimumLifetime(nc)
	if set && lifetime <= 0 {
		return time.Time{}
	}
	end := billing.PaidUntil(now)
	if set && !rec.Since.IsZero() {
		// The instant before the lifetime's end is still inside the month
		// it ends in: a lifetime ending at midnight on the first needs no
		// more month.
		if min := rec.Since.Add(lifetime); min.After(end) {
			end = billing.MonthEnd(min.Add(-time.Nanosecond))
		}
	}
	return end.Add(-RenewalMargin)
}

// Decision says whether a server no NodeClaim uses any more is kept.
type Decision struct {
	Keep   bool
	Until  time.Time
	Reason string
}

// Decide applies the policy to srv as it is now (read it fresh). nc is the
// NodeClass that built it (nil when it is gone: no policy, release).
func Decide(offers Offers, srv *baremetal.Server, nc *v1alpha1.ScalewayElasticMetalNodeClass, now time.Time) Decision {
	rec := billing.Of(offers, srv)
	switch {
	case !rec.Monthly():
		return Decision{Reason: "billed by the hour"}
	case srv.Status == baremetal.ServerStatusError:
		return Decision{Reason: "the server is in error"}
	case srv.Status == baremetal.ServerStatusOutOfStock:
		return Decision{Reason: "the order was never delivered (out of stock)"}
	case nc == nil:
		return Decision{Reason: "its NodeClass is gone"}
	}
	until := KeepUntil(rec, nc, now)
	if !now.Before(until) {
		return Decision{Reason: "its paid period ends"}
	}
	return Decision{Keep: true, Until: until, Reason: fmt.Sprintf("monthly server paid until %s", until.Add(RenewalMargin).UTC().Format(time.RFC3339))}
}

// API is what the Keeper needs of the Scaleway API (*scaleway.Client).
type API interface {
	rescue.Rebooter
	GetServer(ctx context.Context, zone scw.Zone, id string) (*baremetal.Server, error)
	// FreshServer is the read a decision to write is based on: by ID, never
	// a listing's state, and not below this process's own writes.
	FreshServer(ctx context.Context, zone scw.Zone, id string) (*baremetal.Server, error)
	DeleteServer(ctx context.Context, zone scw.Zone, id string) (*baremetal.Server, error)
	ListServers(ctx context.Context, zone scw.Zone, tags []string) ([]*baremetal.Server, error)
	EditTags(ctx context.Context, zone scw.Zone, id string, edit func([]string) ([]string, bool)) (*baremetal.Server, error)
}

// Outcome of Keeper.Release.
type Outcome string

const (
	Released   Outcome = "released"    // deleted (or being deleted)
	Kept       Outcome = "kept"        // a spare
	Gone       Outcome = "gone"        // no such server
	NotOwned   Outcome = "not_owned"   // the server is not (any more) the owner's: left alone
	HandedOver Outcome = "handed_over" // no longer the cluster's (EndSpare)
	Declined   Outcome = "declined"    // the caller's condition failed on the fresh read (ReleaseIf): left alone
)

// Keeper acts on the policy.
type Keeper struct {
	API    API
	Offers Offers
	Rescue *rescue.Dialer
	// Owner says which servers are this cluster's (name and identity).
	Owner *identity.Owner
	Clock clock.Clock
	Log   logr.Logger
	// Changed, when set, hears of every spare of zone this Keeper took,
	// kept or released (the reserved offerings' cache drops its counts).
	Changed func(zone scw.Zone)
	// Nodes, when set, is read and written directly (uncached) to delete
	// the Node a kept spare left behind before it can be taken (Settle).
	Nodes client.Client

	// mu serialises takes and keeps in this process: two NodeClaims never
	// take one spare, and a spare is never taken while being kept.
	mu sync.Mutex

	// work is the background work on spares (pre-imaging, Busy): a take,
	// a release or an end stops it and waits for it before acting.
	workMu sync.Mutex
	work   map[string]*busy
}

type busy struct {
	stop context.CancelFunc
	done chan struct{}
}

// Busy records background work on spare id (the pre-imager's) until end is
// called; stop must make that work return soon. Take, Release and EndSpare
// call stop and wait for end before they touch the spare, so the work
// never writes to a server that is no longer a spare. ok is false when
// other work on id is under way.
func (k *Keeper) Busy(id string, stop context.CancelFunc) (end func(), ok bool) {
	k.workMu.Lock()
	defer k.workMu.Unlock()
	if _, taken := k.work[id]; taken {
		return nil, false
	}
	if k.work == nil {
		k.work = map[string]*busy{}
	}
	b := &busy{stop: stop, done: make(chan struct{})}
	k.work[id] = b
	return func() {
		k.workMu.Lock()
		delete(k.work, id)
		k.workMu.Unlock()
		close(b.done)
	}, true
}

// hold stops the background work on id, if any, waits for its end, and
// keeps new work off id (Busy refuses it) until the returned func is
// called: a pre-imaging that began between the stop and the take's tag
// write would otherwise read the server as a spare still and image a
// server that is no longer one.
func (k *Keeper) hold(id string) (unhold func()) {
	for {
		k.workMu.Lock()
		b := k.work[id]
		if b == nil {
			if k.work == nil {
				k.work = map[string]*busy{}
			}
			mine := &busy{stop: func() {}, done: make(chan struct{})}
			k.work[id] = mine
			k.workMu.Unlock()
			return func() {
				k.workMu.Lock()
				delete(k.work, id)
				k.workMu.Unlock()
				close(mine.done)
			}
		}
		k.workMu.Unlock()
		b.stop()
		<-b.done
	}
}

// Takeable reports whether spare srv can be given to a NodeClaim: not
// being deleted, broken, an order never delivered, quarantined (its last
// install failed because of the server: TagQuarantine), possibly still
// running the node it ran (TagRescuePending), nor holding that node's
// disks unerased (install.TagErasePending). The reserved offerings count
// the same servers.
func Takeable(srv *baremetal.Server) bool {
	return !unusable(srv) && !RescuePending(srv) && !ErasePending(srv)
}

// unusable: quarantined, or in a state no step of this controller moves it
// out of (being deleted, broken, never delivered, locked).
func unusable(srv *baremetal.Server) bool {
	if _, q := Quarantined(srv); q {
		return true
	}
	switch srv.Status {
	case baremetal.ServerStatusDeleting, baremetal.ServerStatusError, baremetal.ServerStatusOutOfStock, baremetal.ServerStatusLocked:
		return true
	}
	return false
}

// Release ends owner's use of server zone/id: it reads the server, leaves it
// alone unless it is this cluster's and tagged for NodeClaim owner (owner ""
// is the garbage collector's for a server tagged for no NodeClaim: one a
// NodeClaim took since the collector listed it is not its to end), then
// keeps it as a spare or deletes it.
func (k *Keeper) Release(ctx context.Context, zone scw.Zone, id, owner string, nc *v1alpha1.ScalewayElasticMetalNodeClass) (Outcome, Decision, error) {
	return k.ReleaseIf(ctx, zone, id, owner, nc, nil)
}

// ReleaseIf is Release with the caller's own reason checked again on the
// server as read right before acting (still; nil means none), under the
// lock this process's takes hold. The garbage collector decides from a
// listing that may be minutes old: a NodeClaim may have taken the server
// since, and only the fresh read can say so. still returning false leaves
// the server alone: Declined.
func (k *Keeper) ReleaseIf(ctx context.Context, zone scw.Zone, id, owner string, nc *v1alpha1.ScalewayElasticMetalNodeClass,
	still func(ctx context.Context, fresh *baremetal.Server) (bool, error)) (Outcome, Decision, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	defer k.hold(id)()
	srv, outcome, d, err := k.freshOwned(ctx, zone, id, owner)
	if srv == nil || err != nil {
		return outcome, d, err
	}
	if still != nil {
		ok, err := still(ctx, srv)
		if err != nil {
			return "", Decision{}, err
		}
		if !ok {
			return Declined, Decision{}, nil
		}
	}
	d = Decide(k.Offers, srv, nc, k.clock().Now())
	if d.Keep {
		return k.keepOwned(ctx, srv, owner, d)
	}
	return k.deleteOwned(ctx, srv, owner, d)
}

// freshOwned reads the server by ID and returns it when it is this
// process's and still owner's; otherwise srv is nil and the outcome says why
// (gone, not owned, already being deleted) or err is set.
func (k *Keeper) freshOwned(ctx context.Context, zone scw.Zone, id, owner string) (srv *baremetal.Server, outcome Outcome, d Decision, err error) {
	srv, err = k.API.FreshServer(ctx, zone, id)
	if scaleway.IsNotFound(err) {
		return nil, Gone, Decision{}, nil
	}
	if err != nil {
		return nil, "", Decision{}, err
	}
	srv, mine, err := k.Owner.Check(ctx, srv)
	if err != nil {
		return nil, "", Decision{}, err
	}
	if !mine || scaleway.ParseTags(srv.Tags)[scaleway.TagNodeClaim] != owner {
		return nil, NotOwned, Decision{}, nil
	}
	if srv.Status == baremetal.ServerStatusDeleting {
		return nil, Released, Decision{Reason: "already being deleted"}, nil
	}
	return srv, "", Decision{}, nil
}

// keepOwned carries out a keep decision: a server already a spare is left as
// it is, any other is tagged a spare (keep).
func (k *Keeper) keepOwned(ctx context.Context, srv *baremetal.Server, owner string, d Decision) (Outcome, Decision, error) {
	if install.PhaseOf(srv) == install.PhaseSpare {
		return Kept, d, nil
	}
	if err := k.keep(ctx, srv, owner); err != nil {
		return "", d, err
	}
	k.changed(srv.Zone)
	return Kept, d, nil
}

// deleteOwned carries out a release decision: the server is deleted (a
// server already gone counts as that).
func (k *Keeper) deleteOwned(ctx context.Context, srv *baremetal.Server, owner string, d Decision) (Outcome, Decision, error) {
	if _, err := k.API.DeleteServer(ctx, srv.Zone, srv.ID); err != nil {
		if scaleway.IsNotFound(err) {
			return Gone, d, nil
		}
		return "", d, fmt.Errorf("releasing server %s: %w", srv.ID, err)
	}
	if install.PhaseOf(srv) == install.PhaseSpare {
		k.changed(srv.Zone)
	}
	// owner is the server's NodeClaim tag: freshOwned checked it.
	k.Log.Info("released server", "server", srv.ID, "zone", string(srv.Zone), "offer", srv.OfferName, "nodeclaim", owner, "why", d.Reason)
	return Released, d, nil
}

// keep tags srv as a spare (no NodeClaim, phase spare) and reboots it into
// rescue, so the node it ran stops and cannot come back.
func (k *Keeper) keep(ctx context.Context, srv *baremetal.Server, owner string) error {
	now := k.clock().Now()
	lost := false
	kept, err := k.API.EditTags(ctx, srv.Zone, srv.ID, func(tags []string) ([]string, bool) {
		if owner != "" && !scaleway.HasTags(tags, scaleway.Tag(scaleway.TagNodeClaim, owner)) {
			lost = true // taken meanwhile by another writer
			return tags, false
		}
		tags, _ = scaleway.RemoveTagIn(tags, scaleway.TagNodeClaim)
		tags, _ = scaleway.RemoveTagIn(tags, scaleway.TagNodePool)
		// The disk ran a node (its state, its config): it is no image to
		// reuse, and the keyless reboot below replaces the rescue boot.
		for _, key := range install.InstallTags {
			tags, _ = scaleway.RemoveTagIn(tags, key)
		}
		tags, _ = scaleway.RemoveTagIn(tags, scaleway.TagReservation)
		// Not takeable until the node it may run is stopped for sure
		// (settle); a server still being delivered has run nothing.
		if !undelivered(srv) {
			tags, _ = scaleway.SetTagIn(tags, TagRescuePending, rescueDue)
			// Its disks hold that node's config and kubelet key until
			// the pre-imager erases them in rescue.
			tags, _ = scaleway.SetTagIn(tags, install.TagErasePending, eraseDue)
			tags, _ = scaleway.RemoveTagIn(tags, install.TagErased)
		}
		return install.SetPhaseIn(tags, install.PhaseSpare, now), true
	})
	if err != nil {
		return fmt.Errorf("keeping server %s as a spare: %w", srv.ID, err)
	}
	if lost {
		return fmt.Errorf("server %s is no longer tagged for nodeclaim %s", srv.ID, owner)
	}
	k.Log.Info("kept monthly server as a spare; it is taken once it is back in rescue", "server", srv.ID, "zone", string(srv.Zone), "offer", srv.OfferName)
	// The reboot now if the server can take it; otherwise (a reboot into
	// Talos under way, an API error) the garbage collector's sweeps retry
	// through Settle, and the tag keeps the spare from being taken.
	if !RescuePending(kept) {
		return nil
	}
	return k.settle(ctx, kept)
}

// EndSpare ends spare zone/id for good, when its NodeClass is deleted:
// released, or with handOver, handed over (the cluster's tags removed,
// tagged TagHandedOverBy, never touched again). A server that is no longer
// a spare of this cluster (taken meanwhile) is left alone: NotOwned.
func (k *Keeper) EndSpare(ctx context.Context, zone scw.Zone, id string, handOver bool) (Outcome, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	defer k.hold(id)()
	srv, err := k.API.FreshServer(ctx, zone, id)
	if scaleway.IsNotFound(err) {
		return Gone, nil
	}
	if err != nil {
		return "", err
	}
	srv, mine, err := k.Owner.Check(ctx, srv)
	if err != nil {
		return "", err
	}
	if !mine || install.PhaseOf(srv) != install.PhaseSpare {
		return NotOwned, nil
	}
	if srv.Status == baremetal.ServerStatusDeleting {
		return Released, nil
	}
	if !handOver {
		return k.releaseEnded(ctx, srv)
	}
	return k.handOver(ctx, srv)
}

// releaseEnded deletes a spare whose NodeClass is deleted.
func (k *Keeper) releaseEnded(ctx context.Context, srv *baremetal.Server) (Outcome, error) {
	if _, err := k.API.DeleteServer(ctx, srv.Zone, srv.ID); err != nil && !scaleway.IsNotFound(err) {
		return "", fmt.Errorf("releasing spare %s: %w", srv.ID, err)
	}
	k.changed(srv.Zone)
	k.Log.Info("released spare server: its nodeclass is deleted", "server", srv.ID, "zone", string(srv.Zone), "offer", srv.OfferName)
	return Released, nil
}

// handOver removes the cluster's tags from a spare whose NodeClass is
// deleted and tags it TagHandedOverBy, unless it was taken meanwhile
// (NotOwned).
func (k *Keeper) handOver(ctx context.Context, srv *baremetal.Server) (Outcome, error) {
	lost := false
	_, err := k.API.EditTags(ctx, srv.Zone, srv.ID, func(tags []string) ([]string, bool) {
		if install.PhaseOf(&baremetal.Server{Tags: tags}) != install.PhaseSpare {
			lost = true // taken meanwhile
			return tags, false
		}
		for _, key := range append([]string{scaleway.TagManagedBy, scaleway.TagClusterID, scaleway.TagNodeClaim, scaleway.TagNodePool,
			scaleway.TagPhase, install.TagPhaseSince, scaleway.TagWarmPool, scaleway.TagWarmPoolSlot, TagRescuePending}, install.InstallTags...) {
			tags, _ = scaleway.RemoveTagIn(tags, key)
		}
		tags, _ = scaleway.SetTagIn(tags, scaleway.TagHandedOverBy, k.Owner.Name)
		return tags, true
	})
	if err != nil {
		return "", fmt.Errorf("handing over spare %s: %w", srv.ID, err)
	}
	if lost {
		return NotOwned, nil
	}
	k.changed(srv.Zone)
	k.Log.Info("handed over spare server: its nodeclass is deleted (sparesOnDeletion: Keep); this controller no longer manages it",
		"server", srv.ID, "zone", string(srv.Zone), "offer", srv.OfferName, "tag", scaleway.Tag(scaleway.TagHandedOverBy, k.Owner.Name))
	return HandedOver, nil
}

// eraseDue is TagErasePending's value until the erase is verified.
const eraseDue = "due"

// ErasePending reports whether spare srv ran a node whose disks are not
// erased yet (install.TagErasePending): it is not taken nor offered.
func ErasePending(srv *baremetal.Server) bool { return install.ErasePending(srv) }

// PreImaged reports whether spare srv holds image sha256 (the pre-imager
// wrote it, verified, and no node ran since) and waits in the keyed rescue
// boot that wrote it, its host key pinned: an install taking it logs in
// without a reboot and skips the image write.
func PreImaged(srv *baremetal.Server, sha256 string) bool {
	pin, _ := scaleway.TagValue(srv.Tags, install.TagRescueHostKey)
	return install.Imaged(srv, sha256) && install.InKeyedRescue(srv) && pin != ""
}

// nodeTags are the install tags about one node, dropped even when a
// pre-imaged spare keeps its image, disk and rescue tags; a taken spare also
// leaves the warm pool.
var nodeTags = []string{install.TagConfigDelivery, install.TagTalosPeer, scaleway.TagWarmPool, scaleway.TagWarmPoolSlot}

// Take gives NodeClaim claim (of nodePool) a spare of offerName in zone,
// paid by billing, that NodeClass nc built, if there is one: it is tagged
// for the claim, leaves the warm pool if it was in it, and starts its
// install over (phase ordered). A spare pre-imaged with nc's current image
// (PreImaged) is preferred and keeps its image, disk, rescue-boot and
// host-key tags: the install logs into its rescue without a reboot, skips
// the image and writes the config only. Any other spare's disk is written
// again.
func (k *Keeper) Take(ctx context.Context, zone scw.Zone, offerName string, billing catalog.BillingPeriod, nc *v1alpha1.ScalewayElasticMetalNodeClass, claim, nodePool string) (*baremetal.Server, error) {
	return k.take(ctx, zone, offerName, billing, nc, claim, nodePool, "")
}

// TakeReserved is Take for a NodeClaim of Karpenter's reserved capacity,
// also tagged with the reservation it came from (scaleway.TagReservation),
// so its node stays labelled reserved.
func (k *Keeper) TakeReserved(ctx context.Context, zone scw.Zone, offerName string, billing catalog.BillingPeriod, nc *v1alpha1.ScalewayElasticMetalNodeClass, claim, nodePool, reservation string) (*baremetal.Server, error) {
	return k.take(ctx, zone, offerName, billing, nc, claim, nodePool, reservation)
}

func (k *Keeper) take(ctx context.Context, zone scw.Zone, offerName string, billing catalog.BillingPeriod, nc *v1alpha1.ScalewayElasticMetalNodeClass, claim, nodePool, reservation string) (*baremetal.Server, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	spares, err := k.listSpares(ctx, zone, nc.Name)
	if err != nil {
		return nil, fmt.Errorf("looking for spare servers: %w", err)
	}
	want := takeRequest{image: statusImage(nc), claim: claim, nodePool: nodePool, reservation: reservation, now: k.clock().Now()}
	// Pre-imaged first: reuse costs a config write and one reboot.
	slices.SortStableFunc(spares, func(a, b *baremetal.Server) int {
		return cmp.Compare(b2i(PreImaged(b, want.image)), b2i(PreImaged(a, want.image)))
	})
	for _, s := range spares {
		// Billing: an hourly warm-pool server is not a monthly claim's (nor the reverse).
		if s.OfferName != offerName || Billing(k.Offers, s) != billing || unusable(s) {
			// Rescue- or erase-pending in the listing is not enough to skip it:
			// listings lag behind writes, and skipping a spare whose reboot or
			// erase is done orders a new server while it sits ready. The read
			// by ID below decides.
			continue
		}
		updated, preImaged, err := k.takeOne(ctx, s, want)
		if err != nil {
			return nil, err
		}
		if updated != nil {
			k.changed(zone)
			k.Log.Info("took a spare server", "server", s.ID, "zone", string(zone), "offer", offerName, "nodeclaim", claim, "preImaged", preImaged, "reservation", reservation)
			return updated, nil
		}
	}
	return nil, nil
}

// listSpares lists this owner's spare servers of a NodeClass in a zone.
func (k *Keeper) listSpares(ctx context.Context, zone scw.Zone, nodeClass string) ([]*baremetal.Server, error) {
	spares, err := k.API.ListServers(ctx, zone, []string{
		scaleway.Tag(scaleway.TagManagedBy, k.Owner.Name), scaleway.Tag(scaleway.TagPhase, string(install.PhaseSpare)),
		scaleway.Tag(scaleway.TagNodeClass, nodeClass),
	})
	if err != nil {
		return nil, err
	}
	return k.Owner.Mine(ctx, zone, spares, false)
}

// statusImage is the NodeClass's current image digest, or "" before one is known.
func statusImage(nc *v1alpha1.ScalewayElasticMetalNodeClass) string {
	if nc.Status.Image == nil {
		return ""
	}
	return nc.Status.Image.RawSHA256
}

// takeRequest is what a take writes onto the spare it takes.
type takeRequest struct {
	image                        string
	claim, nodePool, reservation string
	now                          time.Time
}

// takeOne takes one listed spare if it is still one: it returns the updated
// server, or nil when the server turned out gone or no longer takeable (the
// caller tries the next one).
func (k *Keeper) takeOne(ctx context.Context, s *baremetal.Server, want takeRequest) (updated *baremetal.Server, preImaged bool, err error) {
	unhold := k.hold(s.ID) // a pre-imaging under way ends before the take, and none starts until it is written
	defer unhold()
	// The listing's status may be minutes old: a server deleted, broken
	// or locked since shows there as a ready spare. The read by ID is
	// the one the tag edit below starts from (no second read).
	fresh, err := k.API.FreshServer(ctx, s.Zone, s.ID)
	if scaleway.IsNotFound(err) || (err == nil && !Takeable(fresh)) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading spare server %s: %w", s.ID, err)
	}
	taken := false
	// The listing only says where to look: it may show the server as it
	// was before another process (the leader this one replaced) took it.
	// EditTags starts from a read by ID (FreshServer), and the edit
	// below refuses a server that read says is no longer a spare.
	updated, err = k.API.EditTags(ctx, s.Zone, s.ID, func(tags []string) ([]string, bool) {
		out, pre, ok := takenTags(tags, fresh, want)
		if !ok {
			return tags, false
		}
		taken, preImaged = true, pre
		return out, true
	})
	if scaleway.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("taking spare server %s: %w", s.ID, err)
	}
	if !taken {
		return nil, false, nil
	}
	return updated, preImaged, nil
}

// takenTags is the tag edit of a take: from a spare's current tags (and the
// boot state of the read by ID), the tags of a server ordered for the claim.
// ok is false when the tags say the server is no longer a takeable spare.
func takenTags(tags []string, fresh *baremetal.Server, want takeRequest) (out []string, preImaged, ok bool) {
	if install.PhaseOf(&baremetal.Server{Tags: tags}) != install.PhaseSpare {
		return tags, false, false // released or taken meanwhile
	}
	if _, q := Quarantined(&baremetal.Server{Tags: tags}); q {
		return tags, false, false // quarantined since the listing (which may lag)
	}
	if ErasePending(&baremetal.Server{Tags: tags}) {
		return tags, false, false // kept again since the listing: not erased yet
	}
	// The boot state is the read by ID's; the tags are fresh.
	preImaged = PreImaged(&baremetal.Server{Tags: tags, Status: fresh.Status, BootType: fresh.BootType}, want.image)
	tags, _ = scaleway.SetTagIn(tags, scaleway.TagNodeClaim, want.claim)
	tags, _ = scaleway.SetTagIn(tags, scaleway.TagNodePool, want.nodePool)
	if want.reservation != "" {
		tags, _ = scaleway.SetTagIn(tags, scaleway.TagReservation, want.reservation)
	} else {
		tags, _ = scaleway.RemoveTagIn(tags, scaleway.TagReservation)
	}
	drop := append([]string{scaleway.TagWarmPool, scaleway.TagWarmPoolSlot}, install.InstallTags...)
	if preImaged {
		drop = nodeTags
	}
	for _, key := range drop {
		tags, _ = scaleway.RemoveTagIn(tags, key)
	}
	return install.SetPhaseIn(tags, install.PhaseOrdered, want.now), preImaged, true
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (k *Keeper) changed(zone scw.Zone) {
	if k.Changed != nil {
		k.Changed(zone)
	}
}

func (k *Keeper) clock() clock.Clock { return clocks.Or(k.Clock) }
