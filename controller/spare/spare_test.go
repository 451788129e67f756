package spare

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
)

type offers map[catalog.BillingPeriod]string // billing -> offer ID of "EM-X"

func (o offers) Offer(_, name string, b catalog.BillingPeriod) (*baremetal.Offer, bool) {
	id, ok := o[b]
	return &baremetal.Offer{ID: id, Name: name}, ok && name == "EM-X"
}

func (o offers) Refreshed(string) bool { return true }

var cat = offers{catalog.BillingHourly: "hourly-id", catalog.BillingMonthly: "monthly-id"}

func server(offerID string, created time.Time, status baremetal.ServerStatus) *baremetal.Server {
	return &baremetal.Server{ID: "s", Zone: "fr-par-2", OfferName: "EM-X", OfferID: offerID, CreatedAt: &created, Status: status}
}

// bought is server with the billing tags its order wrote.
func bought(offerID string, period catalog.BillingPeriod, created time.Time, status baremetal.ServerStatus) *baremetal.Server {
	s := server(offerID, created, status)
	s.Tags = []string{"karpenter-scaleway-em/billing=" + string(period), "karpenter-scaleway-em/paid-since=" + strconv.FormatInt(created.Unix(), 10)}
	return s
}

func nodeClass(lifetime *time.Duration) *v1alpha1.ScalewayElasticMetalNodeClass {
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	if lifetime != nil {
		nc.Spec.Billing.MinimumLifetime = &metav1.Duration{Duration: *lifetime}
	}
	return nc
}

func utc(y int, m time.Month, d, h, min int) time.Time {
	return time.Date(y, m, d, h, min, 0, 0, time.UTC)
}

// A monthly subscription renews at the start of each calendar month (UTC),
// the first month pro rata from the order: a spare is kept until an hour
// before the next first of the month, never past it on a count of 730-hour
// months from its creation (which kept a spare created on 1 February until
// 3 March, paying March).
func TestSpareIsKeptUntilTheCalendarMonthRenews(t *testing.T) {
	paris := time.FixedZone("CET", 3600) // Europe/Paris in winter, without tzdata
	hours := func(h int) *time.Duration { d := time.Duration(h) * time.Hour; return &d }
	cases := []struct {
		name     string
		created  time.Time
		now      time.Time
		lifetime *time.Duration
		keep     bool
		until    time.Time // when kept
	}{
		{"1 Feb: kept in February", utc(2026, 2, 1, 9, 0), utc(2026, 2, 20, 12, 0), nil, true, utc(2026, 2, 28, 23, 0)},
		{"1 Feb: released before 1 March", utc(2026, 2, 1, 9, 0), utc(2026, 2, 28, 23, 30), nil, false, time.Time{}},
		{"1 Feb: a sweep late past 1 March keeps the paid March", utc(2026, 2, 1, 9, 0), utc(2026, 3, 1, 0, 30), nil, true, utc(2026, 3, 31, 23, 0)},
		{"31 Jan: the pro-rata first month ends at midnight", utc(2026, 1, 31, 20, 0), utc(2026, 1, 31, 22, 0), nil, true, utc(2026, 1, 31, 23, 0)},
		{"31 Jan: released in the margin", utc(2026, 1, 31, 20, 0), utc(2026, 1, 31, 23, 1), nil, false, time.Time{}},
		{"31 Jan: February renewed", utc(2026, 1, 31, 20, 0), utc(2026, 2, 1, 10, 0), nil, true, utc(2026, 2, 28, 23, 0)},
		{"28 Feb of a common year", utc(2026, 2, 10, 0, 0), utc(2026, 2, 28, 22, 59), nil, true, utc(2026, 2, 28, 23, 0)},
		{"28 Feb of a leap year is not its end", utc(2028, 2, 10, 0, 0), utc(2028, 2, 28, 23, 30), nil, true, utc(2028, 2, 29, 23, 0)},
		{"29 Feb of a leap year", utc(2028, 2, 10, 0, 0), utc(2028, 2, 29, 23, 30), nil, false, time.Time{}},
		{"year end", utc(2026, 12, 15, 8, 0), utc(2026, 12, 31, 23, 30), nil, false, time.Time{}},
		{"new year", utc(2026, 12, 15, 8, 0), utc(2027, 1, 1, 0, 5), nil, true, utc(2027, 1, 31, 23, 0)},
		// Months are UTC's: 1 March 00:40 in Paris is 28 February 23:40 UTC.
		{"Paris clock, UTC month", time.Date(2026, 2, 10, 12, 0, 0, 0, paris), time.Date(2026, 3, 1, 0, 40, 0, 0, paris), nil, false, time.Time{}},
		{"Paris clock, in the month", time.Date(2026, 2, 10, 12, 0, 0, 0, paris), time.Date(2026, 2, 28, 23, 30, 0, 0, paris), nil, true, utc(2026, 2, 28, 23, 0)},
		// A minimumLifetime counts from the order and ends with the month it
		// ends in (that month is paid once it starts).
		{"lifetime into the next month", utc(2026, 1, 31, 20, 0), utc(2026, 1, 31, 23, 30), hours(48), true, utc(2026, 2, 28, 23, 0)},
		{"lifetime within the month", utc(2026, 2, 1, 9, 0), utc(2026, 2, 28, 23, 30), hours(48), false, time.Time{}},
		{"lifetime ending at midnight", utc(2026, 1, 31, 0, 0), utc(2026, 1, 31, 22, 0), hours(24), true, utc(2026, 1, 31, 23, 0)},
		{"three months", utc(2026, 1, 15, 0, 0), utc(2026, 1, 31, 23, 30), hours(3 * 730), true, utc(2026, 4, 30, 23, 0)},
		{"lifetime 0: no spares", utc(2026, 2, 1, 9, 0), utc(2026, 2, 1, 10, 0), hours(0), false, time.Time{}},
	}
	for _, tc := range cases {
		d := Decide(cat, bought("monthly-id", catalog.BillingMonthly, tc.created, baremetal.ServerStatusReady), nodeClass(tc.lifetime), tc.now)
		if d.Keep != tc.keep || (tc.keep && !d.Until.Equal(tc.until)) {
			t.Errorf("%s: keep=%v until %s (%s), want keep=%v until %s", tc.name, d.Keep, d.Until.UTC(), d.Reason, tc.keep, tc.until)
		}
	}
}

func TestDecide(t *testing.T) {
	// Away from a month's end, where every spare goes.
	now, created := utc(2026, 5, 12, 10, 0), utc(2026, 5, 11, 10, 0)
	cases := []struct {
		name string
		srv  *baremetal.Server
		nc   *v1alpha1.ScalewayElasticMetalNodeClass
		keep bool
	}{
		{"young monthly", server("monthly-id", created, baremetal.ServerStatusReady), nodeClass(nil), true},
		{"hourly", server("hourly-id", created, baremetal.ServerStatusReady), nodeClass(nil), false},
		{"monthly in error", server("monthly-id", created, baremetal.ServerStatusError), nodeClass(nil), false},
		{"monthly never delivered", server("monthly-id", created, baremetal.ServerStatusOutOfStock), nodeClass(nil), false},
		{"monthly without nodeclass", server("monthly-id", created, baremetal.ServerStatusReady), nil, false},
	}
	for _, tc := range cases {
		d := Decide(cat, tc.srv, tc.nc, now)
		if d.Keep != tc.keep || d.Reason == "" {
			t.Errorf("%s: %+v, want keep=%v with a reason", tc.name, d, tc.keep)
		}
	}
}

// noOffers is a catalogue that does not list the server's offer: the
// embedded snapshot before the first refresh, a refresh that replaced the
// zone, an offer Scaleway no longer sells.
type noOffers struct{ refreshed bool }

func (noOffers) Offer(string, string, catalog.BillingPeriod) (*baremetal.Offer, bool) {
	return nil, false
}
func (o noOffers) Refreshed(string) bool { return o.refreshed }

// What a server was bought as is its tags', whatever today's catalogue
// lists: a paid monthly server is kept as a spare when the catalogue no
// longer (or not yet) lists its offer, and an hourly one is not.
func TestBillingIsTheServersRecordNotTheCatalogues(t *testing.T) {
	now, created := utc(2026, 5, 12, 10, 0), utc(2026, 5, 11, 10, 0)
	for _, offers := range []Offers{noOffers{refreshed: false}, noOffers{refreshed: true}, cat} {
		monthly := bought("monthly-id", catalog.BillingMonthly, created, baremetal.ServerStatusReady)
		if !Monthly(offers, monthly) || Billing(offers, monthly) != catalog.BillingMonthly {
			t.Errorf("%v: a server tagged monthly is %s", offers, Billing(offers, monthly))
		}
		if d := Decide(offers, monthly, nodeClass(nil), now); !d.Keep {
			t.Errorf("%v: a tagged monthly server is released: %s", offers, d.Reason)
		}
		// The tag wins over an offer ID the catalogue says is hourly.
		hourly := bought("monthly-id", catalog.BillingHourly, created, baremetal.ServerStatusReady)
		if d := Decide(offers, hourly, nodeClass(nil), now); d.Keep {
			t.Errorf("%v: a server tagged hourly is kept: %s", offers, d.Reason)
		}
	}
	// Untagged (ordered before the tags): a catalogue that cannot tell keeps it.
	untagged := server("hourly-id", created, baremetal.ServerStatusReady)
	for _, offers := range []Offers{noOffers{refreshed: false}, noOffers{refreshed: true}} {
		if d := Decide(offers, untagged, nodeClass(nil), now); !d.Keep {
			t.Errorf("%v: an untagged server the catalogue cannot tell is released: %s", offers, d.Reason)
		}
	}
	if d := Decide(cat, untagged, nodeClass(nil), now); d.Keep {
		t.Errorf("an untagged server a refreshed catalogue lists as hourly is kept: %s", d.Reason)
	}
}

// A spare counts as pre-imaged only with the current image, in the keyed
// rescue boot that wrote it, its host key pinned.
func TestPreImagedNeedsImageKeyedRescueAndPin(t *testing.T) {
	const sha = "0cd82988bde0fcdf39a1004e29b755a1ac2a4b5d3e1df9df8298e5134a496f61"
	tags := []string{"karpenter-scaleway-em/image=0cd82988bde0fcdf", "karpenter-scaleway-em/uplink-mac=d0:50:99:00:00:01",
		"karpenter-scaleway-em/rescue-boot=install", "karpenter-scaleway-em/rescue-host-key=SHA256:abc"}
	srv := &baremetal.Server{Tags: tags, Status: baremetal.ServerStatusReady, BootType: baremetal.ServerBootTypeRescue}
	if !PreImaged(srv, sha) {
		t.Fatal("a pre-imaged spare not recognised")
	}
	if PreImaged(srv, "1"+sha[1:]) {
		t.Fatal("another image counts as pre-imaged")
	}
	for i := range tags[1:] { // without the uplink, the rescue-boot or the pin
		s := *srv
		s.Tags = append(append([]string(nil), tags[:i+1]...), tags[i+2:]...)
		if PreImaged(&s, sha) {
			t.Fatalf("pre-imaged without %s", tags[i+1])
		}
	}
	for _, s := range []baremetal.Server{{Tags: tags, Status: baremetal.ServerStatusReady, BootType: baremetal.ServerBootTypeNormal},
		{Tags: tags, Status: baremetal.ServerStatusStarting, BootType: baremetal.ServerBootTypeRescue}} {
		if PreImaged(&s, sha) {
			t.Fatalf("pre-imaged while %s in %s", s.Status, s.BootType)
		}
	}
}

// Work under Busy is stopped and waited for before a take acts; a second
// Busy on the same spare is refused until the first ends, and no work
// starts while a take, release or end holds the spare.
func TestBusyWorkIsStoppedAndAwaited(t *testing.T) {
	k := &Keeper{}
	stopped := make(chan struct{})
	end, ok := k.Busy("s", func() { close(stopped) })
	if !ok {
		t.Fatal("Busy refused on an idle spare")
	}
	if _, again := k.Busy("s", func() {}); again {
		t.Fatal("two works on one spare")
	}
	var finished atomic.Bool
	go func() {
		<-stopped // the work sees its stop, finishes, then ends
		finished.Store(true)
		end()
	}()
	unhold := k.hold("s")
	if !finished.Load() {
		t.Fatal("hold returned before the work ended")
	}
	if _, ok := k.Busy("s", func() {}); ok {
		t.Fatal("work started on a spare a take holds (it would image a server no longer a spare)")
	}
	unhold()
	if end2, ok := k.Busy("s", func() {}); !ok {
		t.Fatal("Busy refused after the hold ended")
	} else {
		end2()
	}
	k.hold("idle")() // nothing under way: returns at once
}

func TestTakeableLeavesBrokenAndUndeliveredServers(t *testing.T) {
	for status, want := range map[baremetal.ServerStatus]bool{
		baremetal.ServerStatusReady: true, baremetal.ServerStatusDelivering: true, baremetal.ServerStatusStarting: true,
		baremetal.ServerStatusOutOfStock: false, baremetal.ServerStatusError: false, baremetal.ServerStatusDeleting: false,
		baremetal.ServerStatusLocked: false,
	} {
		if got := Takeable(&baremetal.Server{Status: status}); got != want {
			t.Errorf("Takeable(%s) = %v, want %v", status, got, want)
		}
	}
}
