package catalog

import (
	"testing"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog/snapshot"
)

// offerAvailable decides whether Karpenter may order an offering: a derived
// offer (invented stock) never is until the API answered for its zone.
func TestOfferAvailable(t *testing.T) {
	live := &baremetal.Offer{Enable: true, Stock: baremetal.OfferStockAvailable}
	derived := &baremetal.Offer{Enable: true, Stock: baremetal.OfferStockAvailable, Tags: []string{snapshot.DerivedTag}}
	for name, tc := range map[string]struct {
		o      *baremetal.Offer
		origin string
		marked bool
		want   bool
	}{
		"live in stock":            {live, snapshot.OriginLive, false, true},
		"recorded in stock":        {live, snapshot.OriginRecorded, false, true},
		"set aside":                {live, snapshot.OriginLive, true, false},
		"empty":                    {&baremetal.Offer{Enable: true, Stock: baremetal.OfferStockEmpty}, snapshot.OriginLive, false, false},
		"disabled":                 {&baremetal.Offer{Stock: baremetal.OfferStockAvailable}, snapshot.OriginLive, false, false},
		"zone derived":             {live, snapshot.OriginDerived, false, false},
		"derived offer, recorded":  {derived, snapshot.OriginRecorded, false, false},
		"derived offer, live zone": {derived, snapshot.OriginLive, false, true},
	} {
		if got := offerAvailable(tc.o, tc.origin, tc.marked); got != tc.want {
			t.Errorf("%s: offerAvailable = %v, want %v", name, got, tc.want)
		}
	}
}

func TestNormalizeCommitment(t *testing.T) {
	for months, want := range map[int]int{0: 1, 1: 1, MaxCommitmentMonths: MaxCommitmentMonths, -1: -1, MaxCommitmentMonths + 1: -1} {
		got, err := normalizeCommitment(months)
		if want < 0 {
			if err == nil {
				t.Errorf("normalizeCommitment(%d) = %d, want an error", months, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("normalizeCommitment(%d) = %d, %v; want %d", months, got, err, want)
		}
	}
}
