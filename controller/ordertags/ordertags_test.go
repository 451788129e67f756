package ordertags

import (
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/billing"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
)

// Every order says what it buys, so that the server, not the catalogue, is
// the record of it.
func TestAnOrderRecordsWhatItBuys(t *testing.T) {
	owner := &identity.Owner{Identity: identity.Identity{Name: "c1", ID: "uid-c1"}}
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "nc"}}
	now := time.Date(2026, 2, 1, 9, 0, 0, 0, time.UTC)
	for _, period := range catalog.BillingPeriods {
		tags := For(owner, nc, install.PhaseOrdered, now, period, "karpenter.sh/nodeclaim=n")
		r, ok := billing.Tagged(&baremetal.Server{Tags: tags})
		if !ok || r.Period != period || !r.Since.Equal(now) {
			t.Errorf("an order bought %s records %+v (%v): %v", period, r, ok, tags)
		}
	}
}
