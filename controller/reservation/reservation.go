// Package reservation offers spare servers to Karpenter as reserved
// capacity. A spare (package spare) is an idle server already paid for; each
// group of spares of one NodeClass, offer, zone and billing period becomes a
// reserved offering (capacity type "reserved") on that offer's instance type,
// with the group's size as its reservation capacity and, for monthly spares,
// a near-zero price (see Price), so that Karpenter's scheduler and
// consolidation prefer it to ordering.
//
// The counts come from a cache: one ListServers per zone and NodeClass per
// TTL, dropped when this process takes, keeps or releases a spare (and
// listed again every ErrorTTL for a while, until listings show the change), so that
// GetInstanceTypes (called for every NodePool on every scheduling pass) does
// not call Scaleway each time. A listing that fails gives no reserved
// offerings at all: Karpenter must never believe in capacity that may not
// be there.
package reservation

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/clocks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
)

// Label is the reservation-ID label (Karpenter's ReservationIDLabel).
const Label = catalog.LabelReservationID

// PriceDivisor: a reserved offering of monthly spares costs its on-demand
// offering's price divided by this. The server is paid for its month
// whatever runs on it, so to Karpenter it is (almost) free; dividing rather
// than zeroing keeps the order between offers, so consolidation still
// prefers the smaller spare. The same choice as karpenter-provider-aws for
// capacity reservations.
const PriceDivisor = 10_000_000.0

// Price of a reserved offering whose on-demand offering costs onDemand.
// Hourly spares (warm-pool servers) keep their full price: taking one costs
// a new hourly server (the pool orders its replacement) and the node bills
// by the hour while it runs, so consolidation must not see it as free
// (it would move nodes onto the pool and drain it). Karpenter's scheduler
// uses any compatible reserved offering before on-demand ones whatever its
// price, so the pool still serves scale-up first.
func Price(onDemand float64, billing catalog.BillingPeriod) float64 {
	if billing == catalog.BillingHourly {
		return onDemand
	}
	return onDemand / PriceDivisor
}

// Defaults of the cache.
const (
	DefaultTTL = time.Minute
	// DefaultErrorTTL: a failed listing is tried again this soon (no
	// reserved offerings meanwhile).
	DefaultErrorTTL = 10 * time.Second
	// DefaultSettle: for this long after this process changed a zone's
	// spares (Invalidate), a listing is kept only ErrorTTL. Scaleway's
	// listings lag behind writes, so the first listing after a spare was
	// kept, erased or taken may not show it yet; kept a whole TTL, that
	// stale count would hide a new spare from Karpenter for a minute.
	DefaultSettle = time.Minute
)

// Group is one reserved offering: spares of a NodeClass with one offer, zone
// and billing period.
type Group struct {
	NodeClass string
	Zone      string
	Offer     string
	Billing   catalog.BillingPeriod
	Count     int
}

// ID is the group's reservation ID.
func (g Group) ID() string { return ID(g.NodeClass, g.Zone, g.Offer, g.Billing) }

// ID names the reservation of NodeClass nodeClass's spares of offer in zone
// paid by billing: NodePools of one NodeClass share it, so Karpenter's
// scheduler counts each spare once. A label value holds 63 characters at
// most: longer names are hashed.
func ID(nodeClass, zone, offer string, billing catalog.BillingPeriod) string {
	id := strings.ToLower(strings.Join([]string{nodeClass, zone, offer, string(billing)}, "."))
	if len(validation.IsValidLabelValue(id)) == 0 {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "r-" + hex.EncodeToString(sum[:16])
}

// Lister lists a zone's servers by tags (*scaleway.Client).
type Lister interface {
	ListServers(ctx context.Context, zone scw.Zone, tags []string) ([]*baremetal.Server, error)
}

// Owner keeps the servers that are this cluster's (*identity.Owner).
type Owner interface {
	Mine(ctx context.Context, zone scw.Zone, srvs []*baremetal.Server, complete bool) ([]*baremetal.Server, error)
}

// Cache holds the spare counts per NodeClass and zone.
type Cache struct {
	API    Lister
	Owner  Owner
	Offers spare.Offers
	// ManagedBy is the cluster's name (the managed-by tag's value).
	ManagedBy string
	Clock     clock.Clock
	// TTL, ErrorTTL and Settle: 0 means DefaultTTL, DefaultErrorTTL and
	// DefaultSettle.
	TTL      time.Duration
	ErrorTTL time.Duration
	Settle   time.Duration
	Log      logr.Logger

	mu      sync.Mutex
	entries map[key]*entry
}

type key struct{ nodeClass, zone string }

type entry struct {
	fetch   sync.Mutex // one listing at a time per key
	expires time.Time
	groups  []Group // nil with err
	err     error
	gen     uint64    // bumped by Invalidate: a listing begun before is not kept
	changed time.Time // the last Invalidate
}

// Groups are NodeClass nodeClass's reserved offerings in zones, from the
// cache or a fresh listing. A zone whose listing fails has none.
func (c *Cache) Groups(ctx context.Context, nodeClass string, zones []string) []Group {
	var out []Group
	for _, zone := range zones {
		out = append(out, c.zoneGroups(ctx, nodeClass, zone)...)
	}
	return out
}

func (c *Cache) zoneGroups(ctx context.Context, nodeClass, zone string) []Group {
	e := c.entry(key{nodeClass, zone})
	e.fetch.Lock()
	defer e.fetch.Unlock()
	now := c.clock().Now()
	c.mu.Lock()
	if now.Before(e.expires) {
		groups := slices.Clone(e.groups)
		c.mu.Unlock()
		return groups
	}
	gen := e.gen
	c.mu.Unlock()

	groups, err := c.list(ctx, nodeClass, zone)
	c.mu.Lock()
	defer c.mu.Unlock()
	e.groups, e.err = groups, err
	e.expires = c.expiry(e, gen, now, err)
	if err != nil {
		c.Log.Error(err, "listing spare servers for reserved offerings; none offered until it succeeds", "nodeclass", nodeClass, "zone", zone)
		return nil
	}
	c.Log.V(1).Info("listed the spares offered as reserved capacity", "nodeclass", nodeClass, "zone", zone, "spares", total(groups), "offerings", len(groups))
	return slices.Clone(groups)
}

// expiry is when a listing begun at now, while e's generation was gen,
// stops being used. Caller holds mu.
func (c *Cache) expiry(e *entry, gen uint64, now time.Time, err error) time.Time {
	switch {
	case e.gen != gen:
		return time.Time{} // invalidated meanwhile: used once, listed again next time
	case err != nil, now.Sub(e.changed) < cmp.Or(c.Settle, DefaultSettle):
		return now.Add(cmp.Or(c.ErrorTTL, DefaultErrorTTL))
	default:
		return now.Add(cmp.Or(c.TTL, DefaultTTL))
	}
}

// total is the number of spares groups count.
func total(groups []Group) int {
	n := 0
	for _, g := range groups {
		n += g.Count
	}
	return n
}

// list counts the NodeClass's spares in zone that can be taken.
func (c *Cache) list(ctx context.Context, nodeClass, zone string) ([]Group, error) {
	srvs, err := c.API.ListServers(ctx, scw.Zone(zone), []string{
		scaleway.Tag(scaleway.TagManagedBy, c.ManagedBy), scaleway.Tag(scaleway.TagPhase, string(install.PhaseSpare)),
		scaleway.Tag(scaleway.TagNodeClass, nodeClass),
	})
	if err == nil {
		srvs, err = c.Owner.Mine(ctx, scw.Zone(zone), srvs, false)
	}
	if err != nil {
		return nil, err
	}
	counts := map[Group]int{}
	for _, s := range srvs {
		if !spare.Takeable(s) || install.PhaseOf(s) != install.PhaseSpare || s.OfferName == "" {
			continue
		}
		counts[Group{NodeClass: nodeClass, Zone: zone, Offer: s.OfferName, Billing: spare.Billing(c.Offers, s)}]++
	}
	groups := make([]Group, 0, len(counts))
	for g, n := range counts {
		g.Count = n
		groups = append(groups, g)
	}
	slices.SortFunc(groups, func(a, b Group) int { return strings.Compare(a.ID(), b.ID()) })
	return groups, nil
}

// Exhausted records that a group had no spare left when one was to be taken
// (taken meanwhile, or released): it is offered as unavailable until the
// next listing, so that Karpenter falls back to ordering.
func (c *Cache) Exhausted(nodeClass, zone, offer string, billing catalog.BillingPeriod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key{nodeClass, zone}]
	if e == nil {
		return
	}
	for i := range e.groups {
		if g := &e.groups[i]; g.Offer == offer && g.Billing == billing {
			g.Count = 0
		}
	}
}

// Invalidate drops every count of zone: this process took, kept or
// released a spare there (spare.Keeper's Changed hook).
func (c *Cache) Invalidate(zone scw.Zone) {
	now := c.clock().Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.entries {
		if k.zone == string(zone) {
			e.expires = time.Time{}
			e.gen++
			e.changed = now
		}
	}
}

func (c *Cache) entry(k key) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[key]*entry{}
	}
	e := c.entries[k]
	if e == nil {
		e = &entry{}
		c.entries[k] = e
	}
	return e
}

func (c *Cache) clock() clock.Clock { return clocks.Or(c.Clock) }

// Offerings adds groups to its as reserved offerings, on the instance type
// of their offer, priced from the on-demand offering of their zone and
// billing period; a group without such an offering in its (the NodeClass or
// NodePool does not allow that zone or period) is not offered. its is not
// modified (the catalogue's instance types are shared): an instance type
// that gets reserved offerings is a copy.
func Offerings(its []*cloudprovider.InstanceType, groups []Group) []*cloudprovider.InstanceType {
	if len(groups) == 0 {
		return its
	}
	out := slices.Clone(its)
	for i, it := range out {
		var added cloudprovider.Offerings
		var ids []string
		for _, g := range groups {
			if g.Offer != it.Name {
				continue
			}
			od := onDemand(it.Offerings, g.Zone, g.Billing)
			if od == nil {
				continue
			}
			added = append(added, &cloudprovider.Offering{
				Requirements: replaced(od.Requirements,
					scheduling.NewRequirement(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, karpv1.CapacityTypeReserved),
					scheduling.NewRequirement(Label, corev1.NodeSelectorOpIn, g.ID())),
				Price:               Price(od.Price, g.Billing),
				Available:           g.Count > 0,
				ReservationCapacity: g.Count,
			})
			ids = append(ids, g.ID())
		}
		if len(added) == 0 {
			continue
		}
		out[i] = &cloudprovider.InstanceType{
			Name: it.Name,
			Requirements: replaced(it.Requirements,
				scheduling.NewRequirement(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, karpv1.CapacityTypeOnDemand, karpv1.CapacityTypeReserved),
				scheduling.NewRequirement(Label, corev1.NodeSelectorOpIn, ids...)),
			Offerings:        append(slices.Clone(it.Offerings), added...),
			Capacity:         it.Capacity,
			DynamicResources: it.DynamicResources,
			Overhead:         it.Overhead,
		}
	}
	return out
}

// replaced is a copy of reqs with the keys of with replaced (Requirements.Add
// would intersect them).
func replaced(reqs scheduling.Requirements, with ...*scheduling.Requirement) scheduling.Requirements {
	out := make(scheduling.Requirements, len(reqs)+len(with))
	for k, r := range reqs {
		out[k] = r
	}
	for _, r := range with {
		out[r.Key] = r
	}
	return out
}

func onDemand(ofs cloudprovider.Offerings, zone string, billing catalog.BillingPeriod) *cloudprovider.Offering {
	for _, of := range ofs {
		if of.CapacityType() == karpv1.CapacityTypeOnDemand && of.Zone() == zone &&
			of.Requirements.Get(catalog.LabelBillingPeriod).Has(string(billing)) {
			return of
		}
	}
	return nil
}

// Labels are the capacity-type (and reservation) labels of a node on srv:
// reserved with its reservation ID when it was taken from a reservation
// (scaleway.TagReservation, set by spare.Keeper.TakeReserved), else
// on-demand: Get and List label it as Create did.
func Labels(srv *baremetal.Server) map[string]string {
	if id := scaleway.ParseTags(srv.Tags)[scaleway.TagReservation]; id != "" {
		return map[string]string{karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeReserved, Label: id}
	}
	return map[string]string{karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeOnDemand}
}

// ErrExhausted says a reservation had no spare left.
func ErrExhausted(id string) error {
	return fmt.Errorf("reservation %s has no spare server left", id)
}
