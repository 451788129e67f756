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
	type key struct {
		zone   scw.Zone
		period baremetal.OfferSubscriptionPeriod
	}
	pages := map[key]map[int][]*baremetal.Offer{}
	unknown := map[key]map[int][]*baremetal.Offer{} // unknown_subscription_period listings, as hourly
	for i, ex := range rec.Exchanges {
		if ex.Method != "GET" || ex.Status != 200 {
			continue
		}
		u, err := url.Parse(ex.Path)
		if err != nil {
			return nil, fmt.Errorf("recordings: exchange %d: field path: %w", i, err)
		}
		m := offersPath.FindStringSubmatch(u.Path)
		if m == nil {
			continue
		}
		period := baremetal.OfferSubscriptionPeriod(u.Query().Get("subscription_period"))
		into := pages
		switch period {
		case baremetal.OfferSubscriptionPeriodHourly, baremetal.OfferSubscriptionPeriodMonthly:
		case baremetal.OfferSubscriptionPeriodUnknownSubscriptionPeriod, "":
			period, into = baremetal.OfferSubscriptionPeriodHourly, unknown
		default:
			continue
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
		k := key{scw.Zone(m[1]), period}
		if into[k] == nil {
			into[k] = map[int][]*baremetal.Offer{}
		}
		into[k][page] = resp.Offers
	}
	for k, byPage := range unknown {
		if _, ok := pages[k]; !ok {
			pages[k] = byPage
		}
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
		var all []*baremetal.Offer
		for p := 1; p <= len(byPage); p++ {
			offers, ok := byPage[p]
			if !ok {
				return nil, fmt.Errorf("recordings: zone %s %s: page %d missing", k.zone, k.period, p)
			}
			all = append(all, offers...)
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
	if err := s.Complete(derivedFrom); err != nil {
		return nil, err
	}
	return s, nil
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
