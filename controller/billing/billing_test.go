package billing

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

func utc(y int, m time.Month, d, h, min int) time.Time {
	return time.Date(y, m, d, h, min, 0, 0, time.UTC)
}

func TestPaidUntilIsTheNextFirstOfTheMonthUTC(t *testing.T) {
	paris := time.FixedZone("CET", 3600)
	for _, tc := range []struct {
		now, start, end time.Time
	}{
		{utc(2026, 2, 1, 0, 0), utc(2026, 2, 1, 0, 0), utc(2026, 3, 1, 0, 0)},
		{utc(2026, 2, 1, 9, 0), utc(2026, 2, 1, 0, 0), utc(2026, 3, 1, 0, 0)},
		{utc(2026, 1, 31, 23, 59), utc(2026, 1, 1, 0, 0), utc(2026, 2, 1, 0, 0)},
		{utc(2026, 2, 28, 12, 0), utc(2026, 2, 1, 0, 0), utc(2026, 3, 1, 0, 0)},
		{utc(2028, 2, 28, 12, 0), utc(2028, 2, 1, 0, 0), utc(2028, 3, 1, 0, 0)},
		{utc(2028, 2, 29, 23, 0), utc(2028, 2, 1, 0, 0), utc(2028, 3, 1, 0, 0)},
		{utc(2026, 12, 31, 23, 0), utc(2026, 12, 1, 0, 0), utc(2027, 1, 1, 0, 0)},
		// 1 March 00:30 in Paris is still February in UTC.
		{time.Date(2026, 3, 1, 0, 30, 0, 0, paris), utc(2026, 2, 1, 0, 0), utc(2026, 3, 1, 0, 0)},
		{time.Date(2026, 3, 1, 1, 30, 0, 0, paris), utc(2026, 3, 1, 0, 0), utc(2026, 4, 1, 0, 0)},
	} {
		if got := MonthStart(tc.now); !got.Equal(tc.start) {
			t.Errorf("MonthStart(%s) = %s, want %s", tc.now, got, tc.start)
		}
		if got := PaidUntil(tc.now); !got.Equal(tc.end) {
			t.Errorf("PaidUntil(%s) = %s, want %s", tc.now, got, tc.end)
		}
	}
}

type offers struct {
	ids       map[catalog.BillingPeriod]string // of "EM-X"
	refreshed bool
}

func (o offers) Offer(_, name string, b catalog.BillingPeriod) (*baremetal.Offer, bool) {
	id, ok := o.ids[b]
	return &baremetal.Offer{ID: id, Name: name}, ok && name == "EM-X"
}
func (o offers) Refreshed(string) bool { return o.refreshed }

var both = map[catalog.BillingPeriod]string{catalog.BillingHourly: "h", catalog.BillingMonthly: "m"}

func TestTagsAreReadBack(t *testing.T) {
	since := utc(2026, 2, 1, 9, 0)
	srv := &baremetal.Server{Tags: append([]string{"x=1"}, Tags(catalog.BillingMonthly, since)...), OfferName: "EM-X", OfferID: "h"}
	r, ok := Tagged(srv)
	if !ok || r.Period != catalog.BillingMonthly || !r.Since.Equal(since) || r.Source != SourceTag {
		t.Fatalf("Tagged = %+v, %v", r, ok)
	}
	// The tag wins over the catalogue, refreshed or not.
	if r := Of(offers{both, true}, srv); !r.Monthly() {
		t.Fatalf("Of = %+v, want the tag's monthly", r)
	}
	for _, bad := range [][]string{nil, {"karpenter-scaleway-em/billing=weekly"}, {"karpenter-scaleway-em/billing"}} {
		if _, ok := Tagged(&baremetal.Server{Tags: bad}); ok {
			t.Errorf("Tagged(%q) has a record", bad)
		}
	}
}

func TestDeriveAnswersOnlyFromARefreshedCatalogue(t *testing.T) {
	created := utc(2025, 6, 1, 0, 0)
	for _, tc := range []struct {
		name    string
		offers  Offers
		offerID string
		want    catalog.BillingPeriod
		source  Source
		settled bool
	}{
		{"refreshed, hourly offer", offers{both, true}, "h", catalog.BillingHourly, SourceCatalogue, true},
		{"refreshed, monthly offer", offers{both, true}, "m", catalog.BillingMonthly, SourceCatalogue, true},
		{"refreshed, offer no longer sold", offers{both, true}, "gone", catalog.BillingMonthly, SourceAssumed, true},
		{"snapshot, hourly offer", offers{both, false}, "h", catalog.BillingMonthly, SourceAssumed, false},
		{"snapshot, no offer", offers{nil, false}, "h", catalog.BillingMonthly, SourceAssumed, false},
		{"no catalogue", nil, "h", catalog.BillingMonthly, SourceAssumed, false},
	} {
		srv := &baremetal.Server{OfferName: "EM-X", OfferID: tc.offerID, CreatedAt: &created}
		r, settled := Derive(tc.offers, srv)
		if r.Period != tc.want || r.Source != tc.source || settled != tc.settled || !r.Since.Equal(created) {
			t.Errorf("%s: %+v settled=%v, want %s from %s settled=%v", tc.name, r, settled, tc.want, tc.source, tc.settled)
		}
	}
}

// fakeAPI is a project's servers for Backfill.
type fakeAPI struct{ servers map[string]*baremetal.Server }

func (f *fakeAPI) list(context.Context) ([]*baremetal.Server, error) {
	var out []*baremetal.Server
	for _, s := range f.servers {
		c := *s
		c.Tags = slices.Clone(s.Tags)
		out = append(out, &c)
	}
	return out, nil
}

func (f *fakeAPI) EditTags(_ context.Context, _ scw.Zone, id string, edit func([]string) ([]string, bool)) (*baremetal.Server, error) {
	s := f.servers[id]
	if tags, changed := edit(slices.Clone(s.Tags)); changed {
		s.Tags = tags
	}
	return s, nil
}

// Servers ordered before billing tags get them once the catalogue answers
// for good; until then they stay untagged (and count as monthly), and a
// tagged server is never rewritten.
func TestBackfillTagsServersOnceSettled(t *testing.T) {
	created := utc(2025, 6, 1, 0, 0)
	srv := func(id, offerID string, tags ...string) *baremetal.Server {
		return &baremetal.Server{ID: id, Zone: "fr-par-2", OfferName: "EM-X", OfferID: offerID, CreatedAt: &created, Tags: tags}
	}
	api := &fakeAPI{servers: map[string]*baremetal.Server{
		"hourly":  srv("hourly", "h"),
		"monthly": srv("monthly", "m"),
		"gone":    srv("gone", "delisted"),
		"tagged":  srv("tagged", "h", Tags(catalog.BillingMonthly, created)...),
	}}
	cat := &offers{ids: both}
	b := &Backfill{Servers: api.list, API: api, Offers: cat, Interval: time.Minute, Log: testlog.New(t)}

	res, err := b.Reconcile(context.Background())
	if err != nil || res.RequeueAfter != time.Minute {
		t.Fatalf("before the refresh: %+v, %v", res, err)
	}
	for _, id := range []string{"hourly", "monthly", "gone"} {
		if _, ok := Tagged(api.servers[id]); ok {
			t.Fatalf("%s tagged from an unrefreshed catalogue: %v", id, api.servers[id].Tags)
		}
	}

	cat.refreshed = true
	res, err = b.Reconcile(context.Background())
	if err != nil || res.RequeueAfter != Idle {
		t.Fatalf("after the refresh: %+v, %v", res, err)
	}
	for id, want := range map[string]catalog.BillingPeriod{"hourly": catalog.BillingHourly, "monthly": catalog.BillingMonthly,
		"gone": catalog.BillingMonthly, "tagged": catalog.BillingMonthly} {
		r, ok := Tagged(api.servers[id])
		if !ok || r.Period != want || !r.Since.Equal(created) {
			t.Errorf("%s: %+v %v (tags %v), want %s since %s", id, r, ok, api.servers[id].Tags, want, created)
		}
	}
	// Once written, the record no longer follows the catalogue.
	cat.ids = map[catalog.BillingPeriod]string{catalog.BillingMonthly: "h"}
	if _, err := b.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := Of(cat, api.servers["hourly"]); r.Period != catalog.BillingHourly {
		t.Errorf("a recorded hourly server became %s when the catalogue changed", r.Period)
	}
	if v, _ := scaleway.TagValue(api.servers["hourly"].Tags, scaleway.TagBilling); v != "hourly" {
		t.Errorf("billing tag rewritten: %q", v)
	}
}
