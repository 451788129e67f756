package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

// Generator names the command that writes the snapshot, recorded in the metadata.
const Generator = "catalog/cmd/gen-snapshot"

const derivedNote = "Zones with origin \"derived\" (and monthly offers with monthly_origin \"derived\") are NOT real Scaleway " +
	"data: they copy the real offers of another zone (names, IDs, hardware, prices; offer IDs are the same in every zone) with " +
	"invented stock, and carry the tag " + DerivedTag + ", so the provider can plan before its first live refresh but never " +
	"orders them. Live refresh replaces them. Regenerate against the real API: go run ./catalog/cmd/gen-snapshot -live"

// Recordings is the shape of test/fixtures/scaleway/baremetal-api-recordings.json.
type Recordings struct {
	About     string     `json:"about"`
	Exchanges []Exchange `json:"exchanges"`
}

// Exchange is one recorded HTTP request and its response.
type Exchange struct {
	RecordedIn string          `json:"recorded_in"`
	Method     string          `json:"method"`
	Path       string          `json:"path"`
	Status     int             `json:"status"`
	Response   json.RawMessage `json:"response"`
}

var offersPath = regexp.MustCompile(`^/baremetal/v1/zones/([a-z]{2}-[a-z]{3}-[0-9])/offers$`)

// FromRecordings builds a snapshot from the recorded ListOffers responses (status 200, every recorded page
// merged). subscription_period hourly and monthly are taken as such; unknown_subscription_period, which the API
// answers with the hourly offers, stands in for a zone's hourly listing when none was recorded. A recorded zone
// without a monthly listing gets DeriveMonthly's; zones without any recording are derived from derivedFrom.
func FromRecordings(b []byte, derivedFrom scw.Zone) (*Snapshot, error) {
	var rec Recordings
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("decoding recordings: %w", err)
	}
	pages, err := recordedPages(rec.Exchanges)
	if err != nil {
		return nil, err
	}
	if len(pages) == 0 {
		return nil, errors.New("recordings: no ListOffers response with subscription_period hourly or monthly")
	}
	s := &Snapshot{
		Metadata: Metadata{
			Generator: Generator,
			Source:    "recordings: " + rec.About,
			Note:      derivedNote,
			Zones:     map[string]ZoneSource{},
		},
		Zones: map[string]ZoneOffers{},
	}
	for k, byPage := range pages {
		all, err := concatPages(k, byPage)
		if err != nil {
			return nil, err
		}
		zo := s.Zones[string(k.zone)]
		if k.period == baremetal.OfferSubscriptionPeriodHourly {
			zo.Hourly = Normalize(k.zone, k.period, all)
		} else {
			zo.Monthly = Normalize(k.zone, k.period, all)
		}
		s.Zones[string(k.zone)] = zo
		s.Metadata.Zones[string(k.zone)] = ZoneSource{Origin: OriginRecorded}
	}
	deriveMissingMonthly(s)
	if err := s.Complete(derivedFrom); err != nil {
		return nil, err
	}
	return s, nil
}

// pageKey names one recorded listing: a zone's offers for one period.
type pageKey struct {
	zone   scw.Zone
	period baremetal.OfferSubscriptionPeriod
}

// recordedPages collects the recorded ListOffers pages by listing and page
// number. Listings without a known period count as hourly, for the zones
// and periods no hourly listing was recorded for.
func recordedPages(exchanges []Exchange) (map[pageKey]map[int][]*baremetal.Offer, error) {
	pages := map[pageKey]map[int][]*baremetal.Offer{}
	unknown := map[pageKey]map[int][]*baremetal.Offer{} // unknown_subscription_period listings, as hourly
	for i, ex := range exchanges {
		l, err := listingOf(i, ex)
		if err != nil {
			return nil, err
		}
		if l == nil {
			continue
		}
		into := pages
		if l.unknownPeriod {
			into = unknown
		}
		if into[l.key] == nil {
			into[l.key] = map[int][]*baremetal.Offer{}
		}
		into[l.key][l.page] = l.offers
	}
	for k, byPage := range unknown {
		if _, ok := pages[k]; !ok {
			pages[k] = byPage
		}
	}
	return pages, nil
}

// listing is one recorded page of ListOffers.
type listing struct {
	key           pageKey
	page          int
	offers        []*baremetal.Offer
	unknownPeriod bool // recorded without a known period: taken as hourly
}

// listingOf reads exchange i as a page of ListOffers; nil when it is not
// one (another call, a failed one, a period other than hourly or monthly).
func listingOf(i int, ex Exchange) (*listing, error) {
	if ex.Method != "GET" || ex.Status != 200 {
		return nil, nil
	}
	u, err := url.Parse(ex.Path)
	if err != nil {
		return nil, fmt.Errorf("recordings: exchange %d: field path: %w", i, err)
	}
	m := offersPath.FindStringSubmatch(u.Path)
	if m == nil {
		return nil, nil
	}
	period, unknown, ok := recordedPeriod(u.Query().Get("subscription_period"))
	if !ok {
		return nil, nil
	}
	page := 1
	if p := u.Query().Get("page"); p != "" {
		if page, err = strconv.Atoi(p); err != nil || page < 1 {
			return nil, fmt.Errorf("recordings: exchange %d: field path: bad page %q", i, p)
		}
	}
	var resp baremetal.ListOffersResponse
	if err := json.Unmarshal(ex.Response, &resp); err != nil {
		return nil, fmt.Errorf("recordings: exchange %d: field response: %w", i, err)
	}
	return &listing{key: pageKey{scw.Zone(m[1]), period}, page: page, offers: resp.Offers, unknownPeriod: unknown}, nil
}

// recordedPeriod reads a listing's subscription_period: hourly or monthly
// as is, unknown or none as hourly (unknown true); ok is false for any
// other.
func recordedPeriod(q string) (period baremetal.OfferSubscriptionPeriod, unknown, ok bool) {
	switch p := baremetal.OfferSubscriptionPeriod(q); p {
	case baremetal.OfferSubscriptionPeriodHourly, baremetal.OfferSubscriptionPeriodMonthly:
		return p, false, true
	case baremetal.OfferSubscriptionPeriodUnknownSubscriptionPeriod, "":
		return baremetal.OfferSubscriptionPeriodHourly, true, true
	}
	return "", false, false
}

// concatPages joins a listing's pages in order; a gap is an error.
func concatPages(k pageKey, byPage map[int][]*baremetal.Offer) ([]*baremetal.Offer, error) {
	var all []*baremetal.Offer
	for p := 1; p <= len(byPage); p++ {
		offers, ok := byPage[p]
		if !ok {
			return nil, fmt.Errorf("recordings: zone %s %s: page %d missing", k.zone, k.period, p)
		}
		all = append(all, offers...)
	}
	return all, nil
}

// deriveMissingMonthly gives each zone recorded with hourly offers only
// monthly offers derived from the other zones' (in zone order, so a zone
// derived earlier counts for the later ones), and says so in its metadata.
func deriveMissingMonthly(s *Snapshot) {
	for _, zone := range slices.Sorted(maps.Keys(s.Zones)) {
		zo := s.Zones[zone]
		if len(zo.Monthly) > 0 || len(zo.Hourly) == 0 {
			continue
		}
		var monthly []*baremetal.Offer
		for _, other := range slices.Sorted(maps.Keys(s.Zones)) {
			monthly = append(monthly, s.Zones[other].Monthly...)
		}
		zo.Monthly = DeriveMonthly(scw.Zone(zone), zo.Hourly, monthly)
		s.Zones[zone] = zo
		src := s.Metadata.Zones[zone]
		src.MonthlyOrigin = OriginDerived
		src.Rule = "monthly offers NOT REAL DATA: the recorded monthly offers (of another zone) that the zone's hourly offers " +
			"name as monthly_offer_id (offer IDs are the same in every zone), with the stock of the zone's hourly offer"
		s.Metadata.Zones[zone] = src
	}
}

// OfferLister is the one SDK call the generator and the catalogue use; *baremetal.API implements it.
type OfferLister interface {
	ListOffers(req *baremetal.ListOffersRequest, opts ...scw.RequestOption) (*baremetal.ListOffersResponse, error)
}

// List fetches every page of one zone's offers for one subscription period.
func List(ctx context.Context, api OfferLister, zone scw.Zone, period baremetal.OfferSubscriptionPeriod) ([]*baremetal.Offer, error) {
	resp, err := api.ListOffers(&baremetal.ListOffersRequest{Zone: zone, SubscriptionPeriod: period},
		scw.WithContext(ctx), scw.WithAllPages())
	if err != nil {
		return nil, fmt.Errorf("listing %s offers in %s: %w", period, zone, err)
	}
	return Normalize(zone, period, resp.Offers), nil
}

// FromAPI builds a snapshot from the live API for zones. A zone the API refuses is derived from derivedFrom
// (and said so in the metadata) when derive is true, and is an error otherwise.
func FromAPI(ctx context.Context, api OfferLister, zones []scw.Zone, derivedFrom scw.Zone, derive bool, now time.Time) (*Snapshot, error) {
	s := &Snapshot{
		Metadata: Metadata{
			Generator:   Generator,
			Source:      "api: ListOffers (hourly and monthly, all pages)",
			GeneratedAt: now.UTC().Format(time.RFC3339),
			Note:        derivedNote,
			Zones:       map[string]ZoneSource{},
		},
		Zones: map[string]ZoneOffers{},
	}
	var errs []error
	for _, z := range zones {
		hourly, err := List(ctx, api, z, baremetal.OfferSubscriptionPeriodHourly)
		if err == nil {
			var monthly []*baremetal.Offer
			if monthly, err = List(ctx, api, z, baremetal.OfferSubscriptionPeriodMonthly); err == nil {
				s.Zones[string(z)] = ZoneOffers{Hourly: hourly, Monthly: monthly}
				s.Metadata.Zones[string(z)] = ZoneSource{Origin: OriginLive}
				continue
			}
		}
		if !derive {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := s.Complete(derivedFrom); err != nil {
		return nil, err
	}
	return s, nil
}
