// Package spend says what the cluster's Elastic Metal servers cost, per
// NodeClass, from each server's offer and billing period (its billing tags,
// package billing) priced by the catalogue:
//
//   - hourly spend (EUR per hour): an hourly server at its price per hour; a
//     monthly server at its monthly price over 730 hours (amortised);
//   - monthly commitment (EUR): every monthly server's monthly price (the
//     month in progress is owed whatever happens), plus the setup fee of
//     those ordered since the start of the current calendar month (UTC).
//
// Each amount is split by usage: "node" (a server backing a NodeClaim,
// installing or joined) or "spare" (a monthly server kept for reuse, paid and
// idle). Compute is the one computation: the gauges (Controller) and spend
// limits use it.
package spend

import (
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/billing"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// Usage of a server.
const (
	UsageNode  = "node"
	UsageSpare = "spare"
)

// UnknownNodeClass labels servers without a NodeClass tag.
const UnknownNodeClass = "unknown"

// Offers prices servers (*catalog.Catalog); what a server was bought as
// comes from its tags (billing.Of), the catalogue only for servers ordered
// before them.
type Offers = billing.Offers

// Cost is what one server costs.
type Cost struct {
	NodeClass string
	Billing   catalog.BillingPeriod
	Usage     string
	// Hourly is EUR per hour; Commitment EUR for the current month.
	Hourly     float64
	Commitment float64
	// Priced is false when the catalogue holds no offer with the server's
	// offer ID in its zone (an offer withdrawn since): its cost is unknown.
	Priced bool
}

// Of prices one server at now.
func Of(srv *baremetal.Server, offers Offers, now time.Time) Cost {
	tags := scaleway.ParseTags(srv.Tags)
	c := Cost{NodeClass: tags[scaleway.TagNodeClass], Usage: UsageNode}
	if c.NodeClass == "" {
		c.NodeClass = UnknownNodeClass
	}
	if install.Phase(tags[scaleway.TagPhase]) == install.PhaseSpare {
		c.Usage = UsageSpare
	}
	rec := billing.Of(offers, srv)
	if rec.Source == billing.SourceAssumed {
		// A server ordered before billing tags, in a zone the catalogue has
		// not refreshed yet: the spare policy counts it as monthly to be
		// safe, but a cost is no release, and the snapshot's offer IDs
		// price it better than nothing; nothing there: unknown.
		rec.Period = periodByOfferID(srv, offers)
	}
	c.Billing = rec.Period
	// The price is the catalogue's offer of that name and period, when it
	// is still the one the server was ordered with.
	o, ok := offers.Offer(string(srv.Zone), srv.OfferName, rec.Period)
	if !ok || o.ID != srv.OfferID {
		return c
	}
	c.price(o, rec, now)
	return c
}

// price fills c's prices from o, the offer the server was ordered with,
// billed as rec says. Without a price in the catalogue, c stays unpriced.
func (c *Cost) price(o *baremetal.Offer, rec billing.Record, now time.Time) {
	switch rec.Period {
	case catalog.BillingHourly:
		if o.PricePerHour != nil {
			c.Hourly, c.Priced = o.PricePerHour.ToFloat(), true
		}
	case catalog.BillingMonthly:
		if o.PricePerMonth != nil {
			month := o.PricePerMonth.ToFloat()
			c.Hourly, c.Commitment, c.Priced = month/catalog.HoursPerMonth, month, true
			// The setup fee is owed in the month of the order: the calendar
			// month (UTC) Scaleway bills by (billing.MonthStart).
			if o.Fee != nil && !rec.Since.IsZero() && !rec.Since.Before(billing.MonthStart(now)) {
				c.Commitment += o.Fee.ToFloat()
			}
		}
	}
}

// periodByOfferID is the billing period whose offer of srv's name has
// srv's offer ID, "" when none has.
func periodByOfferID(srv *baremetal.Server, offers Offers) catalog.BillingPeriod {
	for _, p := range catalog.BillingPeriods {
		if o, ok := offers.Offer(string(srv.Zone), srv.OfferName, p); ok && o.ID == srv.OfferID {
			return p
		}
	}
	return ""
}

// Key groups costs.
type Key struct {
	NodeClass string
	Billing   catalog.BillingPeriod
	Usage     string
}

// Amount sums the costs of a group.
type Amount struct {
	Servers    int
	Hourly     float64
	Commitment float64
	// Unpriced servers are counted in Servers but cost nothing here.
	Unpriced int
}

// Totals of a set of servers.
type Totals map[Key]Amount

// Compute sums the cost of every server that is not being deleted.
func Compute(servers []*baremetal.Server, offers Offers, now time.Time) Totals {
	out := Totals{}
	for _, s := range servers {
		if s.Status == baremetal.ServerStatusDeleting {
			continue
		}
		c := Of(s, offers, now)
		k := Key{NodeClass: c.NodeClass, Billing: c.Billing, Usage: c.Usage}
		a := out[k]
		a.Servers++
		a.Hourly += c.Hourly
		a.Commitment += c.Commitment
		if !c.Priced {
			a.Unpriced++
		}
		out[k] = a
	}
	return out
}

// NodeClass sums a NodeClass's amounts over billing periods and usages.
func (t Totals) NodeClass(name string) Amount {
	var sum Amount
	for k, a := range t {
		if k.NodeClass != name {
			continue
		}
		sum.Servers += a.Servers
		sum.Hourly += a.Hourly
		sum.Commitment += a.Commitment
		sum.Unpriced += a.Unpriced
	}
	return sum
}
