package catalog

import (
	"context"
	"maps"
	"slices"
	"strings"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog/snapshot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
)

// InstanceTypes returns one instance type per offer name that has at least one offering in the filter's zones
// and billing periods, sorted by name. Offerings that cannot be ordered now (disabled, stock empty, marked
// unavailable, or in a zone whose data is still derived rather than real) are kept with Available=false so
// Karpenter knows the type exists.
//
// Results are cached per filter and rebuilt only when the offers, the unavailable marks, the measured
// capacities or the filter change. The returned instance types are shared between callers: do not modify them
// (Karpenter's overlays copy before changing).
func (c *Catalog) InstanceTypes(ctx context.Context, f Filter) ([]*cloudprovider.InstanceType, error) {
	n, err := f.normalize()
	if err != nil {
		return nil, err
	}
	now := c.clock.Now()
	c.mu.RLock()
	if !c.expiryDueLocked(now) {
		if e, ok := c.cache[n.key]; ok && e.gen == c.gen {
			its := slices.Clone(e.its)
			c.mu.RUnlock()
			return its, nil
		}
	}
	c.mu.RUnlock()

	c.mu.Lock()
	defer c.mu.Unlock()
	c.expireLocked(now)
	if e, ok := c.cache[n.key]; ok && e.gen == c.gen {
		return slices.Clone(e.its), nil
	}
	its := c.buildLocked(n)
	c.metrics.builds.Inc()
	if len(c.cache) >= maxCacheEntries {
		for k, e := range c.cache {
			if e.gen != c.gen {
				delete(c.cache, k)
			}
		}
		if len(c.cache) >= maxCacheEntries {
			clear(c.cache)
		}
	}
	c.cache[n.key] = &cacheEntry{gen: c.gen, its: its}
	return slices.Clone(its), nil
}

func (c *Catalog) buildLocked(n *normalized) []*cloudprovider.InstanceType {
	zones := n.zones
	if zones == nil {
		zones = slices.Sorted(maps.Keys(c.zones))
	}
	its := make([]*cloudprovider.InstanceType, 0, len(c.names))
	for _, name := range c.names {
		if it := c.instanceTypeLocked(n, zones, name); it != nil {
			its = append(its, it)
		}
	}
	return its
}

// offeringSet is an instance type's offerings and the zones, regions and
// billing periods they span, in the order first seen.
type offeringSet struct {
	offerings              cloudprovider.Offerings
	zones, regions, period []string
}

// instanceTypeLocked is offer name as an instance type under the filter n,
// or nil when it has no offering in zones or the filter's requirements
// exclude it.
func (c *Catalog) instanceTypeLocked(n *normalized, zones []string, name string) *cloudprovider.InstanceType {
	set := c.offeringsLocked(n, zones, name)
	if len(set.offerings) == 0 {
		return nil
	}
	sp := c.specs[name]
	m := sp.machine(n.localDisks)
	reqs := requirements(sp, m, set.zones, set.regions, set.period)
	if n.reqs != nil && reqs.Intersects(n.reqs) != nil {
		return nil
	}
	capacity := sp.capacity(n.maxPods, m, c.observedLocked(name, n.localDisks))
	return &cloudprovider.InstanceType{
		Name:         name,
		Requirements: reqs,
		Offerings:    set.offerings,
		Capacity:     capacity,
		Overhead:     overhead(capacity, n),
	}
}

// offeringsLocked lists offer name's offerings in zones for the filter's
// billing periods: one per zone and period the offer is sold in with a price.
func (c *Catalog) offeringsLocked(n *normalized, zones []string, name string) offeringSet {
	var set offeringSet
	for _, zone := range zones {
		zs := c.zones[zone]
		if zs == nil {
			continue
		}
		for _, billing := range n.billing {
			o := zs.offers[billing][name]
			if o == nil {
				continue
			}
			price, ok := hourlyPrice(o, billing, n.commitment)
			if !ok {
				continue
			}
			region := regionOf(zone)
			_, marked := c.unavailable[offerKey{zone: zone, name: name, billing: billing}]
			set.offerings = append(set.offerings, onDemandOffering(zone, region, billing, price, offerAvailable(o, zs.origin, marked)))
			set.zones = appendUnique(set.zones, zone)
			set.regions = appendUnique(set.regions, region)
			set.period = appendUnique(set.period, string(billing))
		}
	}
	return set
}

// onDemandOffering is an on-demand offering in zone paid by billing.
func onDemandOffering(zone, region string, billing BillingPeriod, price float64, available bool) *cloudprovider.Offering {
	return &cloudprovider.Offering{
		Requirements: scheduling.NewRequirements(
			scheduling.NewRequirement(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, zone),
			scheduling.NewRequirement(corev1.LabelTopologyRegion, corev1.NodeSelectorOpIn, region),
			scheduling.NewRequirement(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, karpv1.CapacityTypeOnDemand),
			scheduling.NewRequirement(LabelBillingPeriod, corev1.NodeSelectorOpIn, string(billing)),
			// Only reserved offerings (spares, package reservation) name a reservation.
			scheduling.NewRequirement(LabelReservationID, corev1.NodeSelectorOpDoesNotExist),
		),
		Price:     price,
		Available: available,
	}
}

// offerAvailable reports whether offer o of a zone whose data came from
// origin may be ordered: enabled, in stock, not set aside (marked). Derived
// offers have invented stock: visible for planning, never orderable until
// the API has answered for their zone.
func offerAvailable(o *baremetal.Offer, origin string, marked bool) bool {
	return o.Enable && o.Stock != baremetal.OfferStockEmpty && !marked && origin != snapshot.OriginDerived &&
		(origin == snapshot.OriginLive || !snapshot.IsDerived(o))
}

func requirements(sp *spec, m localdisks.Machine, zones, regions, periods []string) scheduling.Requirements {
	reqs := scheduling.NewRequirements(
		scheduling.NewRequirement(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, sp.name),
		scheduling.NewRequirement(corev1.LabelArchStable, corev1.NodeSelectorOpIn, sp.arch),
		scheduling.NewRequirement(corev1.LabelOSStable, corev1.NodeSelectorOpIn, string(corev1.Linux)),
		scheduling.NewRequirement(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, zones...),
		scheduling.NewRequirement(corev1.LabelTopologyRegion, corev1.NodeSelectorOpIn, regions...),
		scheduling.NewRequirement(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, karpv1.CapacityTypeOnDemand),
		scheduling.NewRequirement(corev1.LabelWindowsBuild, corev1.NodeSelectorOpDoesNotExist),
		scheduling.NewRequirement(LabelBillingPeriod, corev1.NodeSelectorOpIn, periods...),
		// Package reservation names the reservations of an instance type that has reserved offerings.
		scheduling.NewRequirement(LabelReservationID, corev1.NodeSelectorOpDoesNotExist),
	)
	// The Node carries one label per user volume too; names depend on the disks found, so they are not
	// predicted.
	disks := m.Layout.Labels(m.Data, false)
	for _, key := range Labels {
		if key == LabelBillingPeriod {
			continue
		}
		v, ok := sp.labels[key]
		if !ok {
			v, ok = disks[key]
		}
		if ok {
			reqs.Add(scheduling.NewRequirement(key, corev1.NodeSelectorOpIn, v))
		} else {
			reqs.Add(scheduling.NewRequirement(key, corev1.NodeSelectorOpDoesNotExist))
		}
	}
	return reqs
}

// hourlyPrice is what Karpenter compares. Hourly: the price per hour. Monthly: the price per month over
// HoursPerMonth plus the one-time fee spread over the commitment. ok is false when the offer has no price
// for that period.
func hourlyPrice(o *baremetal.Offer, billing BillingPeriod, commitmentMonths int) (float64, bool) {
	fee := 0.0
	if o.Fee != nil {
		fee = o.Fee.ToFloat()
	}
	switch billing {
	case BillingHourly:
		if o.PricePerHour == nil {
			return 0, false
		}
		return o.PricePerHour.ToFloat(), true
	case BillingMonthly:
		if o.PricePerMonth == nil {
			return 0, false
		}
		return (o.PricePerMonth.ToFloat() + fee/float64(commitmentMonths)) / HoursPerMonth, true
	}
	return 0, false
}

// regionOf turns fr-par-2 into fr-par.
func regionOf(zone string) string {
	if i := strings.LastIndexByte(zone, '-'); i > 0 {
		return zone[:i]
	}
	return zone
}

func appendUnique(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}
