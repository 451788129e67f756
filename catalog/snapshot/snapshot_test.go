package snapshot_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog/internal/offerserver"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog/snapshot"
)

const recordingsPath = "../../test/fixtures/scaleway/baremetal-api-recordings.json"

func recordings(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(recordingsPath)
	if err != nil {
		t.Fatalf("reading recordings: %v", err)
	}
	return b
}

func generate(t *testing.T) []byte {
	t.Helper()
	s, err := snapshot.FromRecordings(recordings(t), scw.ZoneFrPar2)
	if err != nil {
		t.Fatalf("FromRecordings: %v", err)
	}
	b, err := s.Encode()
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return b
}

func TestCommittedSnapshotEqualsFreshGeneration(t *testing.T) {
	fresh := generate(t)
	if !bytes.Equal(fresh, snapshot.EmbeddedBytes()) {
		t.Fatalf("catalog/snapshot/offers.json is stale: run `go generate ./catalog/` (fresh %d bytes, committed %d bytes)",
			len(fresh), len(snapshot.EmbeddedBytes()))
	}
}

func TestGenerationIsDeterministic(t *testing.T) {
	a, b := generate(t), generate(t)
	if !bytes.Equal(a, b) {
		t.Fatal("two generations from the same recordings differ")
	}
}

func TestSnapshotContent(t *testing.T) {
	s, err := snapshot.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	for _, z := range snapshot.Zones {
		zo, ok := s.Zones[string(z)]
		if !ok || len(zo.Hourly) == 0 || len(zo.Monthly) == 0 {
			t.Errorf("zone %s: missing or empty (%d hourly, %d monthly)", z, len(zo.Hourly), len(zo.Monthly))
		}
		src := s.Metadata.Zones[string(z)]
		want, wantMonthly := snapshot.OriginDerived, ""
		switch z {
		case scw.ZoneFrPar2:
			want = snapshot.OriginRecorded
		case scw.ZoneFrPar1: // recorded hourly listing, no monthly one
			want, wantMonthly = snapshot.OriginRecorded, snapshot.OriginDerived
		}
		if src.Origin != want || src.MonthlyOrigin != wantMonthly {
			t.Errorf("zone %s: origin %q/%q, want %q/%q", z, src.Origin, src.MonthlyOrigin, want, wantMonthly)
		}
		for _, o := range append(zo.Hourly, zo.Monthly...) {
			if o.Zone != z {
				t.Errorf("zone %s: offer %s has zone %q", z, o.Name, o.Zone)
			}
			wantDerived := want == snapshot.OriginDerived ||
				o.SubscriptionPeriod == baremetal.OfferSubscriptionPeriodMonthly && wantMonthly == snapshot.OriginDerived
			if snapshot.IsDerived(o) != wantDerived {
				t.Errorf("zone %s: offer %s %s derived tag = %v", z, o.Name, o.SubscriptionPeriod, snapshot.IsDerived(o))
			}
			if len(o.IncompatibleOsIDs) != 0 {
				t.Errorf("zone %s: offer %s keeps incompatible_os_ids", z, o.Name)
			}
			for _, opt := range o.Options {
				if opt.License != nil {
					t.Errorf("zone %s: offer %s keeps licence option %s", z, o.Name, opt.Name)
				}
			}
		}
	}
	fr := s.Zones["fr-par-2"]
	if len(fr.Hourly) != 33 || len(fr.Monthly) != 32 {
		t.Errorf("fr-par-2: %d hourly, %d monthly offers; the recordings hold 33 and 32", len(fr.Hourly), len(fr.Monthly))
	}
	// Real IDs survive; the monthly listing (which omits zone) gets its zone and period.
	var i220 *baremetal.Offer
	for _, o := range fr.Monthly {
		if o.Name == "EM-I220E-NVME" {
			i220 = o
		}
	}
	if i220 == nil || i220.SubscriptionPeriod != baremetal.OfferSubscriptionPeriodMonthly || i220.PricePerMonth == nil ||
		i220.PricePerMonth.ToFloat() != 199.99 {
		t.Fatalf("fr-par-2 monthly EM-I220E-NVME = %+v", i220)
	}
	if !strings.Contains(s.Metadata.Note, "NOT real") {
		t.Errorf("metadata note does not warn that derived zones are not real: %q", s.Metadata.Note)
	}
	if !strings.Contains(s.Metadata.Zones["pl-waw-3"].Rule, "NOT REAL DATA") {
		t.Errorf("derived zone rule does not say it is not real: %q", s.Metadata.Zones["pl-waw-3"].Rule)
	}
	// Derived zones keep prices and IDs: an offer has one ID in every zone (recorded for fr-par-1 and fr-par-2).
	for _, o := range s.Zones["nl-ams-1"].Hourly {
		for _, r := range fr.Hourly {
			if r.Name == o.Name && (r.ID != o.ID || r.PricePerHour.ToFloat() != o.PricePerHour.ToFloat()) {
				t.Errorf("nl-ams-1 %s: id %s (real %s), price %v (real %v)", o.Name, o.ID, r.ID, o.PricePerHour, r.PricePerHour)
			}
		}
	}
	// fr-par-1's recorded list differs from fr-par-2's (EM-L620E-NVME only there) under the same IDs, and its
	// monthly offers are the ones its hourly offers name.
	par1 := s.Zones["fr-par-1"]
	if len(par1.Hourly) != 27 {
		t.Errorf("fr-par-1: %d hourly offers, the recording holds 27", len(par1.Hourly))
	}
	names := map[string]*baremetal.Offer{}
	for _, o := range fr.Hourly {
		names[o.Name] = o
	}
	l620 := false
	for _, o := range par1.Hourly {
		l620 = l620 || o.Name == "EM-L620E-NVME"
		if r := names[o.Name]; r != nil && r.ID != o.ID {
			t.Errorf("fr-par-1 %s has ID %s, fr-par-2 %s", o.Name, o.ID, r.ID)
		}
	}
	if !l620 || names["EM-L620E-NVME"] != nil {
		t.Error("fr-par-1 and fr-par-2 should sell different offers (EM-L620E-NVME only in fr-par-1)")
	}
	for _, m := range par1.Monthly {
		found := false
		for _, h := range par1.Hourly {
			found = found || h.MonthlyOfferID != nil && *h.MonthlyOfferID == m.ID && h.Name == m.Name && h.Stock == m.Stock
		}
		if !found {
			t.Errorf("fr-par-1 monthly %s (%s) is named by no hourly offer of the zone", m.Name, m.ID)
		}
	}
}

func TestFromRecordingsErrors(t *testing.T) {
	page2only := `{"exchanges":[{"method":"GET","status":200,"path":"/baremetal/v1/zones/fr-par-2/offers?page=2&subscription_period=hourly","response":{"offers":[],"total_count":0}}]}`
	for name, tc := range map[string]struct{ in, want string }{
		"not json":     {`{"exchanges": [`, "decoding recordings"},
		"no offers":    {`{"exchanges":[{"method":"GET","status":200,"path":"/baremetal/v1/zones/fr-par-2/os?page=1","response":{}}]}`, "no ListOffers response"},
		"missing page": {page2only, "page 1 missing"},
		"bad response": {`{"exchanges":[{"method":"GET","status":200,"path":"/baremetal/v1/zones/fr-par-2/offers?subscription_period=hourly","response":{"offers":"x"}}]}`, "field response"},
		"bad page":     {`{"exchanges":[{"method":"GET","status":200,"path":"/baremetal/v1/zones/fr-par-2/offers?page=x&subscription_period=hourly","response":{}}]}`, "bad page"},
		"no source zone": {`{"exchanges":[{"method":"GET","status":200,"path":"/baremetal/v1/zones/nl-ams-1/offers?subscription_period=hourly","response":{"offers":[]}}]}`,
			"source zone fr-par-2"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := snapshot.FromRecordings([]byte(tc.in), scw.ZoneFrPar2)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	for name, tc := range map[string]struct{ in, want string }{
		"truncated":        {`{"zones": {`, "decoding offer snapshot"},
		"no zones":         {`{"metadata":{},"zones":{}}`, "field zones: empty"},
		"bad zone":         {`{"zones":{"mars-1":{"hourly":[],"monthly":[]}}}`, `key "mars-1"`},
		"offer without id": {`{"zones":{"fr-par-2":{"hourly":[{"name":"EM-X"}],"monthly":[]}}}`, "without name or id"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := snapshot.Decode([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestFromAPI drives the real SDK (all pages, small page size) against a server replaying the recordings.
func TestFromAPI(t *testing.T) {
	srv := offerserver.New()
	defer srv.Close()
	if n, err := srv.LoadRecordings(recordings(t)); err != nil || n != 2 {
		t.Fatalf("LoadRecordings = %d, %v", n, err)
	}
	client, err := srv.Client(scw.WithDefaultPageSize(7))
	if err != nil {
		t.Fatal(err)
	}
	api := baremetal.NewAPI(client)
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

	s, err := snapshot.FromAPI(context.Background(), api, []scw.Zone{scw.ZoneFrPar2}, scw.ZoneFrPar2, false, now)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Zones["fr-par-2"]; len(got.Hourly) != 33 || len(got.Monthly) != 32 {
		t.Fatalf("fr-par-2 through 7-offer pages: %d hourly, %d monthly", len(got.Hourly), len(got.Monthly))
	}
	if s.Metadata.Zones["fr-par-2"].Origin != snapshot.OriginLive || s.Metadata.GeneratedAt != "2026-11-22T12:00:00Z" {
		t.Fatalf("metadata = %+v", s.Metadata)
	}
	if s.Metadata.Zones["nl-ams-1"].Origin != snapshot.OriginDerived {
		t.Fatalf("unlisted zone nl-ams-1 not derived: %+v", s.Metadata.Zones["nl-ams-1"])
	}

	// A zone the API does not know fails without -derive-missing, and is derived with it.
	if _, err := snapshot.FromAPI(context.Background(), api, []scw.Zone{scw.ZoneFrPar2, scw.ZonePlWaw3}, scw.ZoneFrPar2, false, now); err == nil ||
		!strings.Contains(err.Error(), "pl-waw-3") {
		t.Fatalf("missing zone: err = %v", err)
	}
	s, err = snapshot.FromAPI(context.Background(), api, []scw.Zone{scw.ZoneFrPar2, scw.ZonePlWaw3}, scw.ZoneFrPar2, true, now)
	if err != nil || s.Metadata.Zones["pl-waw-3"].Origin != snapshot.OriginDerived {
		t.Fatalf("derive-missing: %v, %+v", err, s.Metadata.Zones["pl-waw-3"])
	}

	// 5xx on the second page fails the listing: no half catalogue.
	srv.FailWith(func(r *http.Request) int {
		if r.URL.Query().Get("page") == "2" {
			return http.StatusInternalServerError
		}
		return 0
	})
	_, err = snapshot.FromAPI(context.Background(), api, []scw.Zone{scw.ZoneFrPar2}, scw.ZoneFrPar2, false, now)
	var se *scw.ResponseError
	if !errors.As(err, &se) || se.StatusCode != http.StatusInternalServerError {
		t.Fatalf("5xx on page 2: err = %v", err)
	}
}
