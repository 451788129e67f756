package warmpool

import (
	"strings"
	"testing"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

var (
	hourly  = Key{Zone: "fr-par-2", Offer: "EM-A116X-SSD", Billing: catalog.BillingHourly}
	monthly = Key{Zone: "fr-par-2", Offer: "EM-A115X-SSD", Billing: catalog.BillingMonthly}
)

func poolServer(id string, k Key, slot int, status baremetal.ServerStatus) *baremetal.Server {
	return &baremetal.Server{ID: id, Zone: scw.Zone(k.Zone), OfferName: k.Offer, Status: status, Tags: []string{
		scaleway.Tag(scaleway.TagPhase, "spare"), scaleway.Tag(scaleway.TagWarmPool, "true"), SlotTag("nc", k, slot)}}
}

// billingByOffer: the monthly offer of these tests is EM-A115X-SSD.
func billingByOffer(s *baremetal.Server) catalog.BillingPeriod {
	if s.OfferName == monthly.Offer {
		return catalog.BillingMonthly
	}
	return catalog.BillingHourly
}

func ids(list []*baremetal.Server) string {
	var out []string
	for _, s := range list {
		out = append(out, s.ID)
	}
	return strings.Join(out, ",")
}

func TestDecide(t *testing.T) {
	ready, delivering := baremetal.ServerStatusReady, baremetal.ServerStatusDelivering
	for _, tc := range []struct {
		name              string
		want              map[Key]int
		pool              []*baremetal.Server
		inFlight          []string
		order             []Slot
		release, demote   string
		keptHourly, keptM int
	}{
		{name: "empty pool: every slot ordered", want: map[Key]int{hourly: 2},
			order: []Slot{{hourly, 0}, {hourly, 1}}},
		{name: "full pool, delivering or not: nothing", want: map[Key]int{hourly: 2},
			pool: []*baremetal.Server{poolServer("a", hourly, 0, ready), poolServer("b", hourly, 1, delivering)}, keptHourly: 2},
		{name: "a taken server's slot (0) is ordered again", want: map[Key]int{hourly: 2},
			pool: []*baremetal.Server{poolServer("b", hourly, 1, ready)}, order: []Slot{{hourly, 0}}, keptHourly: 1},
		{name: "in flight (ordered, not listed) counts as there", want: map[Key]int{hourly: 2},
			inFlight: []string{SlotTag("nc", hourly, 0)}, order: []Slot{{hourly, 1}}},
		{name: "hourly surplus released, highest slots first", want: map[Key]int{hourly: 1},
			pool:    []*baremetal.Server{poolServer("c", hourly, 2, ready), poolServer("a", hourly, 0, ready), poolServer("b", hourly, 1, ready)},
			release: "b,c", keptHourly: 1},
		{name: "monthly surplus demoted, not released", want: map[Key]int{},
			pool: []*baremetal.Server{poolServer("m", monthly, 0, ready)}, demote: "m"},
		{name: "a broken server is released and its slot tag not reused", want: map[Key]int{hourly: 1},
			pool:    []*baremetal.Server{poolServer("x", hourly, 0, baremetal.ServerStatusError)},
			release: "x", order: []Slot{{hourly, 1}}},
		{name: "a deleting server counts for nothing", want: map[Key]int{monthly: 1},
			pool:  []*baremetal.Server{poolServer("d", monthly, 0, baremetal.ServerStatusDeleting)},
			order: []Slot{{monthly, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inFlight := map[string]bool{}
			for _, tag := range tc.inFlight {
				inFlight[tag] = true
			}
			p := Decide(tc.want, tc.pool, billingByOffer, inFlight, "nc")
			if len(p.Order) != len(tc.order) {
				t.Fatalf("order %v, want %v", p.Order, tc.order)
			}
			for i := range p.Order {
				if p.Order[i] != tc.order[i] {
					t.Fatalf("order %v, want %v", p.Order, tc.order)
				}
			}
			if got := ids(p.Release); got != tc.release {
				t.Errorf("release %q, want %q", got, tc.release)
			}
			if got := ids(p.Demote); got != tc.demote {
				t.Errorf("demote %q, want %q", got, tc.demote)
			}
			if len(p.Keep[hourly]) != tc.keptHourly || len(p.Keep[monthly]) != tc.keptM {
				t.Errorf("kept %d hourly, %d monthly", len(p.Keep[hourly]), len(p.Keep[monthly]))
			}
		})
	}
}

type offers map[Key]bool

func (o offers) Offer(zone, name string, billing catalog.BillingPeriod) (*baremetal.Offer, bool) {
	if o[Key{zone, name, billing}] {
		return &baremetal.Offer{Name: name, CPUs: []*baremetal.CPU{{Name: "AMD EPYC 7232P"}}}, true
	}
	return nil, false
}

func TestEntries(t *testing.T) {
	known := offers{hourly: true, monthly: true}
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "nc"}}
	nc.Spec.Zones = []string{"fr-par-2", "nl-ams-1"}
	nc.Spec.Billing.Periods = []string{"hourly"}
	nc.Spec.WarmPool = []v1alpha1.WarmPoolEntry{
		{Offer: hourly.Offer, Servers: 2},                            // zone and billing defaulted
		{Offer: hourly.Offer, Zone: "fr-par-2", Servers: 1},          // same key: added up
		{Offer: monthly.Offer, BillingPeriod: "monthly", Servers: 1}, // billing not allowed
		{Offer: "EM-NOPE", Servers: 1},                               // unknown offer
		{Offer: hourly.Offer, Zone: "pl-waw-2", Servers: 1},          // zone not the nodeclass's
		{Offer: hourly.Offer, Zone: "fr-par-2", Servers: 8},          // over the cap
	}
	want, problems := Entries(nc, "fr-par-1", known)
	if len(want) != 1 || want[hourly] != 3 {
		t.Errorf("want %v", want)
	}
	got := strings.Join(problems, "\n")
	for _, p := range []string{"spec.warmPool[2]: billing period monthly", "spec.warmPool[3]: offer EM-NOPE", "spec.warmPool[4]: zone \"pl-waw-2\"", "spec.warmPool[5]: more than 10"} {
		if !strings.Contains(got, p) {
			t.Errorf("problems lack %q:\n%s", p, got)
		}
	}
	if len(problems) != 4 {
		t.Errorf("%d problems:\n%s", len(problems), got)
	}
	// No zones in the spec: the controller's default zone.
	nc.Spec.Zones = nil
	nc.Spec.WarmPool = []v1alpha1.WarmPoolEntry{{Offer: hourly.Offer, Servers: 1}}
	if want, problems := Entries(nc, "fr-par-2", known); want[hourly] != 1 || len(problems) != 0 {
		t.Errorf("default zone: %v %v", want, problems)
	}
	// Being deleted: no pool.
	now := metav1.Now()
	nc.DeletionTimestamp = &now
	if want, _ := Entries(nc, "fr-par-2", known); len(want) != 0 {
		t.Errorf("a nodeclass being deleted wants %v", want)
	}
}

// A pool names its offer by hand: one whose CPU is not the image's
// architecture (the RISC-V labs board of the real catalogue) is refused, not
// ordered, billed and never installed.
func TestEntriesRefusesOffersOfAnotherArchitecture(t *testing.T) {
	cat := catalog.New(catalog.Options{})
	const rv1 = "EM-RV1-C4M16S128-A"
	if _, ok := cat.Offer("fr-par-2", rv1, catalog.BillingMonthly); !ok {
		t.Fatalf("the catalogue does not sell %s monthly in fr-par-2: the test shows nothing", rv1)
	}
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "nc"}}
	nc.Spec.Zones = []string{"fr-par-2"}
	nc.Spec.Billing.Periods = []string{"hourly", "monthly"}
	nc.Spec.WarmPool = []v1alpha1.WarmPoolEntry{
		{Offer: rv1, BillingPeriod: "monthly", Servers: 1},
		{Offer: "EM-A115X-SSD", BillingPeriod: "monthly", Servers: 1},
	}
	want, problems := Entries(nc, "", cat)
	amd64 := Key{Zone: "fr-par-2", Offer: "EM-A115X-SSD", Billing: catalog.BillingMonthly}
	if len(want) != 1 || want[amd64] != 1 {
		t.Errorf("want %v, only %v", want, amd64)
	}
	if len(problems) != 1 || !strings.Contains(problems[0], "spec.warmPool[0]: offer "+rv1+" is riscv64") {
		t.Errorf("problems %q, want spec.warmPool[0] refused as riscv64", problems)
	}
}
