package spare

import (
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

var cat = offers{catalog.BillingHourly: "hourly-id", catalog.BillingMonthly: "monthly-id"}

func server(offerID string, created time.Time, status baremetal.ServerStatus) *baremetal.Server {
	return &baremetal.Server{ID: "s", Zone: "fr-par-2", OfferName: "EM-X", OfferID: offerID, CreatedAt: &created, Status: status}
}

func nodeClass(lifetime *time.Duration) *v1alpha1.ScalewayElasticMetalNodeClass {
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	if lifetime != nil {
		nc.Spec.Billing.MinimumLifetime = &metav1.Duration{Duration: *lifetime}
	}
	return nc
}

func TestKeepUntilCoversThePaidMonthAndRenews(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	srv := server("monthly-id", created, baremetal.ServerStatusReady)
	// Default: the month the order paid for.
	if got, want := KeepUntil(srv, nodeClass(nil), created.Add(time.Hour)), created.Add(Month-RenewalMargin); !got.Equal(want) {
		t.Fatalf("first month: keep until %s, want %s", got, want)
	}
	// In the third month the subscription was renewed twice: kept until the third month ends.
	if got, want := KeepUntil(srv, nodeClass(nil), created.Add(2*Month+time.Hour)), created.Add(3*Month-RenewalMargin); !got.Equal(want) {
		t.Fatalf("third month: keep until %s, want %s", got, want)
	}
	// A minimum lifetime of three months keeps it that long from the first month on.
	three := 3 * Month
	if got, want := KeepUntil(srv, nodeClass(&three), created.Add(time.Hour)), created.Add(3*Month-RenewalMargin); !got.Equal(want) {
		t.Fatalf("minimumLifetime 3 months: keep until %s, want %s", got, want)
	}
	zero := time.Duration(0)
	if got := KeepUntil(srv, nodeClass(&zero), created.Add(time.Hour)); !got.IsZero() {
		t.Fatalf("minimumLifetime 0 keeps until %s, want never", got)
	}
}

func TestDecide(t *testing.T) {
	created := time.Now().Add(-24 * time.Hour)
	now := time.Now()
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
		{"monthly about to renew", server("monthly-id", now.Add(-Month+RenewalMargin/2), baremetal.ServerStatusReady), nodeClass(nil), false},
	}
	for _, tc := range cases {
		d := Decide(cat, tc.srv, tc.nc, now)
		if d.Keep != tc.keep || d.Reason == "" {
			t.Errorf("%s: %+v, want keep=%v with a reason", tc.name, d, tc.keep)
		}
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
