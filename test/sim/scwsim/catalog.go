package scwsim

import (
	"crypto/sha1"
	_ "embed"
	"encoding/json"
	"fmt"
	"sync"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
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
	OS            []map[string]json.RawMessage `json:"os"`
	Options       []map[string]json.RawMessage `json:"options"`
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
		for _, o := range append(append([]map[string]json.RawMessage(nil), catalogData.OffersHourly...), catalogData.OffersMonthly...) {
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
	raw           map[string]json.RawMessage // as recorded, ids and zone rewritten
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

// zoneOfferID keeps the recorded IDs in the recorded zone and derives stable,
// distinct IDs elsewhere, so a client that mixes zones up gets a not_found.
func zoneOfferID(recordedZone, zone, id string) string {
	if zone == recordedZone || id == "" {
		return id
	}
	h := sha1.Sum([]byte(zone + "/" + id))
	h[6] = (h[6] & 0x0f) | 0x50 // version 5
	h[8] = (h[8] & 0x3f) | 0x80 // RFC 4122 variant
	return formatUUID(h[:16])
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

func newZoneCatalog(zone string) *zoneCatalog {
	rc := loadCatalog()
	zc := &zoneCatalog{zone: zone, offerByID: map[string]*offer{},
		osByID: map[string]map[string]json.RawMessage{}, optionByID: map[string]map[string]json.RawMessage{}}
	add := func(list []map[string]json.RawMessage) {
		for _, rec := range list {
			raw := make(map[string]json.RawMessage, len(rec)+1)
			for k, v := range rec {
				raw[k] = v
			}
			id := zoneOfferID(rc.RecordedZone, zone, rawString(rec["id"]))
			raw["id"] = mustRaw(id)
			var monthly *string
			_ = json.Unmarshal(rec["monthly_offer_id"], &monthly)
			if monthly != nil {
				m := zoneOfferID(rc.RecordedZone, zone, *monthly)
				raw["monthly_offer_id"] = mustRaw(m)
			}
			if _, ok := rec["zone"]; ok {
				raw["zone"] = mustRaw(zone)
			}
			o := &offer{ID: id, Name: rawString(rec["name"]), Period: rawString(rec["subscription_period"]),
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
			zc.offers = append(zc.offers, o)
			zc.offerByID[id] = o
		}
	}
	add(rc.OffersHourly)
	add(rc.OffersMonthly)
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

// offerJSON renders an offer with its live stock field.
func (o *offer) json(stock string) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(o.raw))
	for k, v := range o.raw {
		out[k] = v
	}
	out["stock"] = mustRaw(stock)
	return out
}
