package garbagecollection

import (
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// TestKeptDuplicate pins which of a NodeClaim's servers stays: the one its
// provider ID names, else the oldest, and none while a zone is unlisted
// and the one it names may be there.
func TestKeptDuplicate(t *testing.T) {
	at := func(id string, h int) *baremetal.Server {
		c := time.Date(2026, 1, 1, h, 0, 0, 0, time.UTC)
		return &baremetal.Server{ID: id, Zone: scw.ZoneFrPar2, CreatedAt: &c}
	}
	old, mid, young := at("old", 1), at("mid", 2), at("young", 3)
	for _, tc := range []struct {
		name       string
		providerID string
		complete   bool
		want       *baremetal.Server
	}{
		{"the one the claim names", scaleway.ProviderID(scw.ZoneFrPar2, "young"), false, young},
		{"the oldest when the claim names none", "", true, old},
		{"the oldest when the claim names an unseen one", scaleway.ProviderID(scw.ZoneFrPar2, "elsewhere"), true, old},
		{"none while the named one may be unseen", scaleway.ProviderID(scw.ZoneFrPar2, "elsewhere"), false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := keptDuplicate([]*baremetal.Server{young, old, mid}, tc.providerID, tc.complete); got != tc.want {
				t.Fatalf("kept %v, want %v", got, tc.want)
			}
		})
	}
}
