// Package billing is what a server was bought as, and when what it paid for
// ends.
//
// What a server was bought as (hourly or monthly, and when its paid period
// started) is written on it as tags when it is ordered (scaleway.TagBilling,
// scaleway.TagPaidSince; ordertags.For) and read from there. The catalogue
// is no record of it: at start it is the embedded snapshot (some zones
// derived, not real) until the first refresh, a refresh replaces a zone
// whole, and an offer Scaleway stops selling disappears from it. Asking the
// catalogue would turn a paid monthly server into an "hourly" one, which the
// spare policy deletes, throwing the paid month away.
//
// A server ordered before the tags existed has none: Derive reads its offer
// ID against the catalogue, and only a zone the catalogue has refreshed
// answers with certainty; any doubt counts as monthly, the safe side
// (keeping an hourly server a little longer costs hours, releasing a
// monthly one throws its month away). Backfill writes the answer on the
// server once it is certain, so it is derived once.
//
// When a monthly server's paid period ends is the calendar month (UTC):
// Scaleway invoices Elastic Metal at the end of each calendar month for what
// was allocated during it (monthly servers: the month's price, the first
// month pro rata from the order), and its billing reference period is the
// calendar month in UTC. So a monthly subscription renews at 00:00 UTC on
// the first of each month, whenever it was ordered: PaidUntil. Sources:
// Scaleway's Elastic Metal FAQ ("How am I billed for Elastic Metal
// servers?": a monthly invoice at the end of each month, the monthly price
// for monthly billing), its billing FAQ (Elastic Metal billing starts when
// the server is created and stops when it is deleted; "our reference billing
// period is the definition of a calendar month in the Coordinated Universal
// Time (UTC) timezone"). The spend gauges use the same months (MonthStart).
package billing

import (
	"strconv"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// RenewalMargin: a monthly server no NodeClaim uses is released this long
// before its subscription renews, so that no sweep interval, slow API call
// or clock skew costs another month.
const RenewalMargin = time.Hour

// MonthStart is the start of the calendar month (UTC) that t is in.
func MonthStart(t time.Time) time.Time {
	u := t.UTC()
	return time.Date(u.Year(), u.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// MonthEnd is the end of the calendar month (UTC) that t is in: the first
// instant of the next one.
func MonthEnd(t time.Time) time.Time {
	u := t.UTC()
	return time.Date(u.Year(), u.Month()+1, 1, 0, 0, 0, 0, time.UTC)
}

// PaidUntil is when the paid period of a monthly server, as of now, ends:
// the next renewal, at the end of the calendar month (UTC) now is in. A
// server already past a renewal has paid its new month.
func PaidUntil(now time.Time) time.Time { return MonthEnd(now) }

// Source says where a Record comes from.
type Source string

const (
	// SourceTag: the server's own tags, written at order (or by Backfill).
	SourceTag Source = "tag"
	// SourceCatalogue: a server without tags whose offer ID is one a
	// refreshed catalogue lists for its zone.
	SourceCatalogue Source = "catalogue"
	// SourceAssumed: a server without tags the catalogue cannot tell
	// (not refreshed yet, or the offer is no longer sold): monthly.
	SourceAssumed Source = "assumed"
)

// Record is what a server was bought as.
type Record struct {
	Period catalog.BillingPeriod
	// Since is when its paid period started: the order (the server's
	// creation for one ordered before the tags existed). Zero when unknown.
	Since  time.Time
	Source Source
}

// Monthly reports whether the server was bought with a monthly subscription.
func (r Record) Monthly() bool { return r.Period == catalog.BillingMonthly }

// Tags are an order's billing tags: bought as period, paid from since.
func Tags(period catalog.BillingPeriod, since time.Time) []string {
	return []string{
		scaleway.Tag(scaleway.TagBilling, string(period)),
		scaleway.Tag(scaleway.TagPaidSince, strconv.FormatInt(since.Unix(), 10)),
	}
}

// SetIn writes r into tags (a tag edit).
func SetIn(tags []string, r Record) []string {
	tags, _ = scaleway.SetTagIn(tags, scaleway.TagBilling, string(r.Period))
	if !r.Since.IsZero() {
		tags, _ = scaleway.SetTagIn(tags, scaleway.TagPaidSince, strconv.FormatInt(r.Since.Unix(), 10))
	}
	return tags
}

// Tagged reads srv's record from its tags; ok is false when it has none (a
// server ordered before they existed) or an unreadable one.
func Tagged(srv *baremetal.Server) (Record, bool) {
	v, ok := scaleway.TagValue(srv.Tags, scaleway.TagBilling)
	if !ok || !catalog.BillingPeriod(v).Valid() {
		return Record{}, false
	}
	r := Record{Period: catalog.BillingPeriod(v), Source: SourceTag}
	if s, ok := scaleway.TagValue(srv.Tags, scaleway.TagPaidSince); ok {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			r.Since = time.Unix(n, 0).UTC()
		}
	}
	if r.Since.IsZero() && srv.CreatedAt != nil {
		r.Since = srv.CreatedAt.UTC()
	}
	return r, true
}

// Offers is what a derivation needs of the catalogue (*catalog.Catalog).
type Offers interface {
	Offer(zone, offerName string, billing catalog.BillingPeriod) (*baremetal.Offer, bool)
	// Refreshed reports whether the zone's offers come from a listing of
	// this process, not from the snapshot it started with.
	Refreshed(zone string) bool
}

// Of is what srv was bought as: its tags, else (a server ordered before
// they existed) Derive's answer.
func Of(offers Offers, srv *baremetal.Server) Record {
	if r, ok := Tagged(srv); ok {
		return r
	}
	r, _ := Derive(offers, srv)
	return r
}

// Derive guesses what srv, which has no billing tags, was bought as. Only a
// zone the catalogue has refreshed answers: the offer ID is its monthly or
// its hourly offer's of that name (SourceCatalogue). Anything else counts as
// monthly (SourceAssumed). settled says the answer will not get better: the
// zone is refreshed (an offer ID it does not list is one Scaleway no longer
// sells, and stays unknown), so Backfill may write it on the server.
func Derive(offers Offers, srv *baremetal.Server) (r Record, settled bool) {
	r = Record{Period: catalog.BillingMonthly, Source: SourceAssumed}
	if srv.CreatedAt != nil {
		r.Since = srv.CreatedAt.UTC()
	}
	zone := string(srv.Zone)
	if offers == nil || !offers.Refreshed(zone) {
		return r, false
	}
	for _, p := range []catalog.BillingPeriod{catalog.BillingMonthly, catalog.BillingHourly} {
		if o, ok := offers.Offer(zone, srv.OfferName, p); ok && o.ID == srv.OfferID && srv.OfferID != "" {
			r.Period, r.Source = p, SourceCatalogue
			return r, true
		}
	}
	return r, true
}
