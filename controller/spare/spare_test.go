package spare

import (
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
