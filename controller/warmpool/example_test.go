package warmpool

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
)

// examples/warm-pool.yaml does what its comments say: a pool of two hourly
// EM-A116X-SSD in fr-par-2 that the catalogue sells there, at the price the
// comment states, under the NodeClass's own spend limit.
func TestWarmPoolExample(t *testing.T) {
	data, err := os.ReadFile("../../examples/warm-pool.yaml")
	if err != nil {
		t.Fatal(err)
	}
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	if err := yaml.UnmarshalStrict(bytes.Split(data, []byte("\n---\n"))[0], nc); err != nil {
		t.Fatal(err)
	}
	cat := catalog.New(catalog.Options{}) // the embedded snapshot
	want, problems := Entries(nc, "", cat)
	if len(problems) > 0 {
		t.Fatalf("the example's pool cannot be served: %v", problems)
	}
	k := Key{Zone: "fr-par-2", Offer: "EM-A116X-SSD", Billing: catalog.BillingHourly}
	if len(want) != 1 || want[k] != 2 {
		t.Fatalf("pool %v, want 2 x %s", want, k)
	}
	offer, _ := cat.Offer(k.Zone, k.Offer, k.Billing)
	perHour := float64(offer.PricePerHour.Units) + float64(offer.PricePerHour.Nanos)/1e9
	if says := fmt.Sprintf("2 x %.3f EUR/h (~%.0f EUR a month)", perHour, 2*perHour*catalog.HoursPerMonth); !strings.Contains(string(data), says) {
		t.Errorf("the example's comment does not say %q", says)
	}
	if limit, _ := v1alpha1.EUR(nc.Spec.Limits.HourlySpend); limit < 2*perHour {
		t.Errorf("the example's hourly limit %v EUR/h does not allow its own pool", limit)
	}
}
