// Package snapshot holds the Elastic Metal offer catalogue compiled into the
// provider (offers.json), so it can plan before its first catalogue refresh;
// README.md says how it is made and kept current.
package snapshot

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

// File is the embedded snapshot name; `go generate ./catalog/...` rewrites it.
const File = "offers.json"

//go:embed offers.json
var embedded []byte

// Zones are the Elastic Metal zones the snapshot covers, in a fixed order.
var Zones = []scw.Zone{
	scw.ZoneFrPar1, scw.ZoneFrPar2, scw.ZoneNlAms1, scw.ZoneNlAms2, scw.ZonePlWaw2, scw.ZonePlWaw3,
}

// Origins of a zone's data.
const (
	OriginRecorded = "recorded" // real ListOffers responses from the recordings file
	OriginLive     = "live"     // real ListOffers responses fetched by the generator
	OriginDerived  = "derived"  // synthesised from another zone's real offers: plausible, not real
)

// DerivedTag is added to every derived offer's tags so code holding only an offer can tell it is not real.
const DerivedTag = "karpenter-scaleway-em:derived"

// Snapshot is the offer catalogue of every zone, hourly and monthly.
type Snapshot struct {
	Metadata Metadata              `json:"metadata"`
	Zones    map[string]ZoneOffers `json:"zones"`
}

// Metadata says where each zone's data came from.
type Metadata struct {
	Generator   string                `json:"generator"`
	Source      string                `json:"source"`
	GeneratedAt string                `json:"generated_at,omitempty"`
	Note        string                `json:"note"`
	Zones       map[string]ZoneSource `json:"zones"`
}

// ZoneSource is the provenance of one zone.
type ZoneSource struct {
	Origin string `json:"origin"`
	// MonthlyOrigin, when set, is the origin of the monthly offers, which differs from Origin (a zone whose
	// hourly listing is recorded but whose monthly listing is not).
	MonthlyOrigin string `json:"monthly_origin,omitempty"`
	DerivedFrom   string `json:"derived_from,omitempty"`
	Rule          string `json:"rule,omitempty"`
}

// ZoneOffers holds one zone's offers per subscription period, sorted by name.
type ZoneOffers struct {
	Hourly  []*baremetal.Offer `json:"hourly"`
	Monthly []*baremetal.Offer `json:"monthly"`
}

// Embedded returns the snapshot compiled into the binary. Each call decodes a fresh copy, so callers may keep
// and modify it.
func Embedded() (*Snapshot, error) {
	return Decode(embedded)
}

// EmbeddedBytes returns the raw embedded file (tests compare it with a fresh generation).
func EmbeddedBytes() []byte { return bytes.Clone(embedded) }

// Decode parses and checks a snapshot.
func Decode(b []byte) (*Snapshot, error) {
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("decoding offer snapshot: %w", err)
	}
	if len(s.Zones) == 0 {
		return nil, fmt.Errorf("offer snapshot: field zones: empty")
	}
	for zone, zo := range s.Zones {
		if _, err := scw.ParseZone(zone); err != nil {
			return nil, fmt.Errorf("offer snapshot: field zones: key %q: %w", zone, err)
		}
		for _, o := range append(slices.Clone(zo.Hourly), zo.Monthly...) {
			if o == nil || o.Name == "" || o.ID == "" {
				return nil, fmt.Errorf("offer snapshot: zone %s: offer without name or id", zone)
			}
		}
	}
	return &s, nil
}

// Encode writes the snapshot deterministically: zones in sorted order, offers sorted by name, one offer per
// line so a refresh shows as a readable diff.
func (s *Snapshot) Encode() ([]byte, error) {
	var buf bytes.Buffer
	meta, err := marshal(s.Metadata, " ")
	if err != nil {
		return nil, err
	}
	buf.WriteString("{\n \"metadata\": ")
	buf.Write(meta)
	buf.WriteString(",\n \"zones\": {")
	zones := slices.Sorted(maps.Keys(s.Zones))
	for i, zone := range zones {
		zo := s.Zones[zone]
		sortOffers(zo.Hourly)
		sortOffers(zo.Monthly)
		fmt.Fprintf(&buf, "%s\n  %q: {", comma(i), zone)
		for j, period := range []struct {
			name   string
			offers []*baremetal.Offer
		}{{"hourly", zo.Hourly}, {"monthly", zo.Monthly}} {
			fmt.Fprintf(&buf, "%s\n   %q: [", comma(j), period.name)
			for k, o := range period.offers {
				line, err := marshal(o, "")
				if err != nil {
					return nil, err
				}
				fmt.Fprintf(&buf, "%s\n    %s", comma(k), line)
			}
			if len(period.offers) > 0 {
				buf.WriteString("\n   ")
			}
			buf.WriteString("]")
		}
		buf.WriteString("\n  }")
	}
	buf.WriteString("\n }\n}\n")
	return buf.Bytes(), nil
}

func comma(i int) string {
	if i == 0 {
		return ""
	}
	return ","
}

func marshal(v any, indent string) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if indent != "" {
		enc.SetIndent(" ", indent)
	}
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func sortOffers(offers []*baremetal.Offer) {
	slices.SortFunc(offers, func(a, b *baremetal.Offer) int { return strings.Compare(a.Name, b.Name) })
}

// Normalize prepares offers listed in zone for the snapshot: sets the zone (monthly listings omit it) and the
// subscription period, and drops the OS compatibility lists (the provider installs Talos itself, never a
// Scaleway OS) which would triple the file size.
func Normalize(zone scw.Zone, period baremetal.OfferSubscriptionPeriod, offers []*baremetal.Offer) []*baremetal.Offer {
	out := make([]*baremetal.Offer, 0, len(offers))
	for _, o := range offers {
		if o == nil {
			continue
		}
		c := *o
		c.Zone = zone
		if c.SubscriptionPeriod == "" || c.SubscriptionPeriod == baremetal.OfferSubscriptionPeriodUnknownSubscriptionPeriod {
			c.SubscriptionPeriod = period
		}
		c.IncompatibleOsIDs = nil
		c.Options = withoutLicenses(c.Options)
		out = append(out, &c)
	}
	sortOffers(out)
	return out
}

// withoutLicenses drops OS licence options (Windows...): irrelevant to Talos nodes and most of an offer's size.
func withoutLicenses(opts []*baremetal.OfferOptionOffer) []*baremetal.OfferOptionOffer {
	out := make([]*baremetal.OfferOptionOffer, 0, len(opts))
	for _, o := range opts {
		if o != nil && o.License == nil {
			out = append(out, o)
		}
	}
	return out
}

// Derivation says which commercial ranges a derived zone carries. Scaleway publishes the same offer names and
// prices in every zone; which ranges a zone carries is our assumption, chosen to be plausible, not recorded.
type Derivation struct {
	Zone   scw.Zone
	Ranges []string
}

// DefaultDerivations are used for every zone without real data.
var DefaultDerivations = map[scw.Zone]Derivation{
	scw.ZoneFrPar1: {Zone: scw.ZoneFrPar1, Ranges: []string{"aluminium", "beryllium", "iridium", "lithium"}},
	scw.ZoneFrPar2: {Zone: scw.ZoneFrPar2, Ranges: []string{"aluminium", "beryllium", "iridium", "lithium", "titanium", "labs"}},
	scw.ZoneNlAms1: {Zone: scw.ZoneNlAms1, Ranges: []string{"aluminium", "beryllium", "iridium"}},
	scw.ZoneNlAms2: {Zone: scw.ZoneNlAms2, Ranges: []string{"iridium", "titanium"}},
	scw.ZonePlWaw2: {Zone: scw.ZonePlWaw2, Ranges: []string{"aluminium", "beryllium", "iridium"}},
	scw.ZonePlWaw3: {Zone: scw.ZonePlWaw3, Ranges: []string{"iridium"}},
}

// Derive builds a plausible offer list for d.Zone from the real offers of another zone: same names, IDs
// (recorded: an offer has the same ID in every zone), hardware and prices; only the ranges in d; a stock level
// picked by a stable hash of (zone, name, period); and DerivedTag in the tags.
func Derive(d Derivation, from scw.Zone, real ZoneOffers) ZoneOffers {
	keep := func(period baremetal.OfferSubscriptionPeriod, offers []*baremetal.Offer) []*baremetal.Offer {
		var out []*baremetal.Offer
		for _, o := range offers {
			if !slices.Contains(d.Ranges, o.CommercialRange) {
				continue
			}
			out = append(out, derived(o, d.Zone, derivedStock(d.Zone, o.Name, period)))
		}
		return out
	}
	zo := ZoneOffers{
		Hourly:  keep(baremetal.OfferSubscriptionPeriodHourly, real.Hourly),
		Monthly: keep(baremetal.OfferSubscriptionPeriodMonthly, real.Monthly),
	}
	monthly := map[string]string{}
	for _, o := range zo.Monthly {
		monthly[o.Name] = o.ID
	}
	for _, o := range zo.Hourly {
		if id, ok := monthly[o.Name]; ok {
			o.MonthlyOfferID = scw.StringPtr(id)
		} else {
			o.MonthlyOfferID = nil
		}
	}
	sortOffers(zo.Hourly)
	sortOffers(zo.Monthly)
	return zo
}

// DeriveMonthly builds the monthly offers of a zone whose hourly offers are real but whose monthly listing
// is unknown: the real monthly offers (of any zone) that the hourly offers name as monthly_offer_id (offer
// IDs are the same in every zone), with the stock of the zone's hourly offer of the same name and DerivedTag.
func DeriveMonthly(zone scw.Zone, hourly, monthly []*baremetal.Offer) []*baremetal.Offer {
	byID := map[string]*baremetal.Offer{}
	for _, o := range monthly {
		byID[o.ID] = o
	}
	var out []*baremetal.Offer
	for _, h := range hourly {
		if h.MonthlyOfferID == nil || byID[*h.MonthlyOfferID] == nil {
			continue
		}
		c := derived(byID[*h.MonthlyOfferID], zone, h.Stock)
		c.SubscriptionPeriod = baremetal.OfferSubscriptionPeriodMonthly
		out = append(out, c)
	}
	sortOffers(out)
	return out
}

// derived copies a real offer into zone with the given stock and DerivedTag.
func derived(o *baremetal.Offer, zone scw.Zone, stock baremetal.OfferStock) *baremetal.Offer {
	c := *o
	c.Zone = zone
	c.Stock = stock
	c.Tags = append(slices.Clone(o.Tags), DerivedTag)
	c.IncompatibleOsIDs = nil
	return &c
}

// IsDerived reports whether an offer was derived (NOT real data: never order it).
func IsDerived(o *baremetal.Offer) bool { return slices.Contains(o.Tags, DerivedTag) }

func derivedStock(zone scw.Zone, name string, period baremetal.OfferSubscriptionPeriod) baremetal.OfferStock {
	h := sha256.Sum256([]byte("stock/" + string(zone) + "/" + name + "/" + string(period)))
	switch h[0] % 10 {
	case 0, 1:
		return baremetal.OfferStockEmpty
	case 2, 3:
		return baremetal.OfferStockLow
	default:
		return baremetal.OfferStockAvailable
	}
}

// Complete fills every zone of Zones that has no real data by Derive from the zone named from, and records
// the provenance in the metadata.
func (s *Snapshot) Complete(from scw.Zone) error {
	real, ok := s.Zones[string(from)]
	if !ok {
		return fmt.Errorf("derive: source zone %s has no offers", from)
	}
	if s.Metadata.Zones == nil {
		s.Metadata.Zones = map[string]ZoneSource{}
	}
	for _, z := range Zones {
		if _, ok := s.Zones[string(z)]; ok {
			continue
		}
		d, ok := DefaultDerivations[z]
		if !ok {
			return fmt.Errorf("derive: no derivation rule for zone %s", z)
		}
		s.Zones[string(z)] = Derive(d, from, real)
		s.Metadata.Zones[string(z)] = ZoneSource{
			Origin:      OriginDerived,
			DerivedFrom: string(from),
			Rule: "NOT REAL DATA: offers of " + string(from) + " in commercial ranges " + strings.Join(d.Ranges, ",") +
				"; same names, IDs, hardware and prices; stock picked by a stable hash",
		}
	}
	return nil
}
