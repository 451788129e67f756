package catalog

import (
	"time"
)

// MarkUnavailable hides the offering (zone, offer, billing) from InstanceTypes (Available=false) for a TTL
// chosen by reason: OutOfStockTTL for out_of_stock, QuotaTTL for quota and refused,
// InstallFailedTTL for install_failed (an unknown reason gets the out-of-stock TTL). Marking again extends, never shortens, the mark.
func (c *Catalog) MarkUnavailable(zone, offerName string, billing BillingPeriod, reason UnavailableReason) {
	if zone == "" || offerName == "" || !billing.Valid() {
		c.log.Info("ignoring unavailable mark with missing zone, offer or billing period",
			"zone", zone, "offer", offerName, "billingPeriod", billing)
		return
	}
	ttl := c.opts.OutOfStockTTL
	switch reason {
	case ReasonQuota, ReasonRefused:
		ttl = c.opts.QuotaTTL
	case ReasonInstallFailed:
		ttl = c.opts.InstallFailedTTL
	case ReasonOutOfStock:
	default:
		c.log.Info("unknown unavailable reason, using the out-of-stock TTL", "reason", reason)
	}
	now := c.clock.Now()
	until := now.Add(ttl)
	key := offerKey{zone: zone, name: offerName, billing: billing}

	c.mu.Lock()
	defer c.mu.Unlock()
	c.expireLocked(now)
	if old, ok := c.unavailable[key]; ok && old.until.After(until) {
		until = old.until
	}
	c.unavailable[key] = unavailableEntry{reason: reason, until: until}
	if c.nextExpiry.IsZero() || until.Before(c.nextExpiry) {
		c.nextExpiry = until
	}
	c.gen++
	c.metrics.marks.WithLabelValues(string(reason)).Inc()
	c.updateUnavailableGaugeLocked()
	c.log.Info("offering marked unavailable", "zone", zone, "offer", offerName, "billingPeriod", billing,
		"reason", reason, "until", until)
}

// Unavailable reports whether the offering is currently marked unavailable, and why.
func (c *Catalog) Unavailable(zone, offerName string, billing BillingPeriod) (UnavailableReason, bool) {
	now := c.clock.Now()
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.unavailable[offerKey{zone: zone, name: offerName, billing: billing}]
	if !ok || !now.Before(e.until) {
		return "", false
	}
	return e.reason, true
}

// expiryDueLocked is true when some mark has expired (needs at least the read lock).
func (c *Catalog) expiryDueLocked(now time.Time) bool {
	return !c.nextExpiry.IsZero() && !now.Before(c.nextExpiry)
}

// expireLocked drops expired marks (write lock held); expiring one changes the generation.
func (c *Catalog) expireLocked(now time.Time) {
	if !c.expiryDueLocked(now) {
		return
	}
	c.nextExpiry = time.Time{}
	expired := false
	for k, e := range c.unavailable {
		if !now.Before(e.until) {
			delete(c.unavailable, k)
			c.metrics.expiries.WithLabelValues(string(e.reason)).Inc()
			c.log.V(1).Info("unavailable mark expired", "zone", k.zone, "offer", k.name, "billingPeriod", k.billing)
			expired = true
			continue
		}
		if c.nextExpiry.IsZero() || e.until.Before(c.nextExpiry) {
			c.nextExpiry = e.until
		}
	}
	if expired {
		c.gen++
		c.updateUnavailableGaugeLocked()
	}
}

// unavailableReasons are every UnavailableReason: each has its series from the start.
var unavailableReasons = []UnavailableReason{ReasonOutOfStock, ReasonQuota, ReasonRefused, ReasonInstallFailed}

func (c *Catalog) updateUnavailableGaugeLocked() {
	counts := map[UnavailableReason]int{}
	for _, r := range unavailableReasons {
		counts[r] = 0
	}
	for _, e := range c.unavailable {
		counts[e.reason]++
	}
	for r, n := range counts {
		c.metrics.unavailable.WithLabelValues(string(r)).Set(float64(n))
	}
}
