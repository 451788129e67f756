package scwsim

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog/snapshot"
)

// catalog.json holds offers, OS and options exactly as the real API answered
// them (see its "about" field and catalog_test.go).
//
//go:embed catalog.json
var catalogJSON []byte

type rawCatalog struct {
	RecordedZone  string                       `json:"recorded_zone"`
	OffersHourly  []map[string]json.RawMessage `json:"offers_hourly"`
	OffersMonthly []map[string]json.RawMessage `json:"offers_monthly"`
	// ZonesOffersHourly: the hourly offers other zones listed, by zone.
	ZonesOffersHourly map[string][]map[string]json.RawMessage `json:"zones_offers_hourly"`
	OS                []map[string]json.RawMessage            `json:"os"`
	Options           []map[string]json.RawMessage            `json:"options"`
}

var (
	catalogOnce sync.Once
	catalogData rawCatalog
	offerNames  map[string]bool
)

func loadCatalog() rawCatalog {
	catalogOnce.Do(func() {
		if err := json.Unmarshal(catalogJSON, &catalogData); err != nil {
			panic("scwsim: embedded catalog.json is corrupt: " + err.Error())
		}
		offerNames = map[string]bool{}
		all := append(append([]map[string]json.RawMessage(nil), catalogData.OffersHourly...), catalogData.OffersMonthly...)
		for _, list := range catalogData.ZonesOffersHourly {
			all = append(all, list...)
		}
		for _, o := range all {
			offerNames[rawString(o["name"])] = true
		}
	})
	return catalogData
}

func knownOfferName(name string) bool {
	loadCatalog()
	return offerNames[name]
}

func rawString(m json.RawMessage) string {
	var s string
	_ = json.Unmarshal(m, &s)
	return s
}

func mustRaw(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// offer is one offer of one zone.
type offer struct {
	ID            string
	Name          string
	Period        string // hourly or monthly
	Enabled       bool
	RecordedStock string
	QuotaName     string
	raw           map[string]json.RawMessage // as recorded, zone rewritten
	sdk           *baremetal.Offer           // shared by every Machine of this offer: read-only
	optionIDs     map[string]bool
	incompatOS    map[string]bool
}

// zoneCatalog is what one zone sells.
type zoneCatalog struct {
	zone       string
	offers     []*offer // hourly first, then monthly, in the recorded order
	offerByID  map[string]*offer
	os         []map[string]json.RawMessage
	osByID     map[string]map[string]json.RawMessage
	options    []map[string]json.RawMessage
	optionByID map[string]map[string]json.RawMessage
}

func formatUUID(b []byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// zoneCatalogs caches built catalogues: they are never modified.
var zoneCatalogs sync.Map // zone -> *zoneCatalog

func zoneCatalogFor(zone string) *zoneCatalog {
	if zc, ok := zoneCatalogs.Load(zone); ok {
		return zc.(*zoneCatalog)
	}
	zc, _ := zoneCatalogs.LoadOrStore(zone, newZoneCatalog(zone))
	return zc.(*zoneCatalog)
}

// zoneOffers picks what a zone sells. An offer has the same ID in every
// zone (recorded: the 27 offers fr-par-1 listed carry fr-par-2's IDs), but
// zones sell different offers:
//   - the recorded zone (fr-par-2) and zones with a recorded hourly listing
//     (fr-par-1) serve it verbatim; their monthly offers are the recorded
//     monthly offers that their hourly offers name as monthly_offer_id
//     (fr-par-1's monthly listing is not recorded: derived, same IDs);
//   - other zones (no recording) serve the recorded zone's offers of the
//     commercial ranges catalog/snapshot assumes for them (NOT real data, as
//     the snapshot's derived zones), or all of them for a zone it does not
//     know.
func zoneOffers(rc rawCatalog, zone string) (hourly, monthly []map[string]json.RawMessage) {
	if zone == rc.RecordedZone {
		return rc.OffersHourly, rc.OffersMonthly
	}
	keepHourly := func(o map[string]json.RawMessage) bool { return true }
	if list, ok := rc.ZonesOffersHourly[zone]; ok {
		hourly = list
	} else {
		if d, ok := snapshot.DefaultDerivations[scw.Zone(zone)]; ok {
			keepHourly = func(o map[string]json.RawMessage) bool {
				return slices.Contains(d.Ranges, rawString(o["commercial_range"]))
			}
		}
		for _, o := range rc.OffersHourly {
			if keepHourly(o) {
				hourly = append(hourly, o)
			}
		}
	}
	monthlyIDs := map[string]bool{}
	for _, o := range hourly {
		var id *string
		_ = json.Unmarshal(o["monthly_offer_id"], &id)
		if id != nil {
			monthlyIDs[*id] = true
		}
	}
	for _, o := range rc.OffersMonthly {
		if monthlyIDs[rawString(o["id"])] {
			monthly = append(monthly, o)
		}
	}
	return hourly, monthly
}

func newZoneCatalog(zone string) *zoneCatalog {
	rc := loadCatalog()
	zc := &zoneCatalog{zone: zone, offerByID: map[string]*offer{},
		osByID: map[string]map[string]json.RawMessage{}, optionByID: map[string]map[string]json.RawMessage{}}
	add := func(list []map[string]json.RawMessage) {
		for _, rec := range list {
			o := newOffer(rec, zone)
			zc.offers = append(zc.offers, o)
			zc.offerByID[o.ID] = o
		}
	}
	hourly, monthly := zoneOffers(rc, zone)
	add(hourly)
	add(monthly)
	for _, rec := range rc.OS {
		raw := make(map[string]json.RawMessage, len(rec))
		for k, v := range rec {
			raw[k] = v
		}
		raw["zone"] = mustRaw(zone)
		zc.os = append(zc.os, raw)
		zc.osByID[rawString(rec["id"])] = raw
	}
	for _, rec := range rc.Options {
		zc.options = append(zc.options, rec)
		zc.optionByID[rawString(rec["id"])] = rec
	}
	return zc
}

// newOffer is a recorded offer as zone shows it.
func newOffer(rec map[string]json.RawMessage, zone string) *offer {
	raw := make(map[string]json.RawMessage, len(rec)+1)
	for k, v := range rec {
		raw[k] = v
	}
	if _, ok := rec["zone"]; ok {
		raw["zone"] = mustRaw(zone)
	}
	o := &offer{ID: rawString(rec["id"]), Name: rawString(rec["name"]), Period: rawString(rec["subscription_period"]),
		RecordedStock: rawString(rec["stock"]), QuotaName: rawString(rec["quota_name"]), raw: raw,
		optionIDs: map[string]bool{}, incompatOS: map[string]bool{}}
	_ = json.Unmarshal(rec["enable"], &o.Enabled)
	var sdk baremetal.Offer
	if err := json.Unmarshal(mustRaw(raw), &sdk); err != nil {
		panic("scwsim: catalog offer " + o.Name + " does not decode as baremetal.Offer: " + err.Error())
	}
	o.sdk = &sdk
	o.sdk.Zone = scw.Zone(zone) // monthly recordings carry no zone
	for _, opt := range sdk.Options {
		o.optionIDs[opt.ID] = true
	}
	for _, id := range sdk.IncompatibleOsIDs {
		o.incompatOS[id] = true
	}
	return o
}

// anyZoneOffer finds an offer by ID whatever zone sells it: GET of an offer
// by its (zone-independent) ID answers in every zone, as recorded (the same
// ID read in fr-par-1 and fr-par-2). Caller holds no lock: catalogues are
// immutable.
func (s *Sim) anyZoneOffer(zone, id string) *offer {
	if o := s.zones[zone].offerByID[id]; o != nil {
		return o
	}
	rc := loadCatalog()
	for _, z := range append([]string{rc.RecordedZone}, slices.Sorted(maps.Keys(rc.ZonesOffersHourly))...) {
		if o := zoneCatalogFor(z).offerByID[id]; o != nil {
			return newOffer(o.raw, zone)
		}
	}
	return nil
}

// offerJSON renders an offer with its live stock field.
func (o *offer) json(stock string) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(o.raw))
	for k, v := range o.raw {
		out[k] = v
	}
	out["stock"] = mustRaw(stock)
	return out
}
