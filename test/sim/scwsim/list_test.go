package scwsim

import (
	"fmt"
	"testing"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

func TestListServersFiltersAndPagination(t *testing.T) {
	e := newEnv(t, nil)
	var mine []string
	for i := 0; i < 7; i++ {
		tags := []string{"karpenter.sh/managed-by=c1", fmt.Sprintf("karpenter.sh/nodepool=p%d", i%2)}
		if i == 3 || i == 6 {
			tags[0] = "karpenter.sh/managed-by=other"
		}
		srv := e.create(t, offerB112, tags...)
		if tags[0] == "karpenter.sh/managed-by=c1" {
			mine = append(mine, srv.ID)
		}
	}
	size := uint32(2)
	req := &baremetal.ListServersRequest{Tags: []string{"karpenter.sh/managed-by=c1"}, PageSize: &size}
	var paged []string
	for page := int32(1); ; page++ {
		p := page
		req.Page = &p
		res, err := e.bm.ListServers(req)
		if err != nil {
			t.Fatal(err)
		}
		if res.TotalCount != 5 {
			t.Fatalf("page %d total_count %d, want 5", page, res.TotalCount)
		}
		if len(res.Servers) == 0 {
			break
		}
		if len(res.Servers) > 2 {
			t.Fatalf("page %d has %d servers", page, len(res.Servers))
		}
		for _, s := range res.Servers {
			paged = append(paged, s.ID)
		}
	}
	equalStrings(t, "paged servers (created_at_asc)", paged, mine)

	all, err := e.bm.ListServers(&baremetal.ListServersRequest{Tags: []string{"karpenter.sh/managed-by=c1"}, PageSize: &size},
		scw.WithAllPages())
	if err != nil || len(all.Servers) != 5 {
		t.Fatalf("WithAllPages: %v %d", err, len(all.Servers))
	}
	// All tags must match.
	both, err := e.bm.ListServers(&baremetal.ListServersRequest{Tags: []string{"karpenter.sh/managed-by=c1", "karpenter.sh/nodepool=p0"}})
	if err != nil || both.TotalCount != 3 { // i = 0, 2, 4
		t.Fatalf("two tags: %v %d", err, both.TotalCount)
	}
	desc, err := e.bm.ListServers(&baremetal.ListServersRequest{Tags: []string{"karpenter.sh/managed-by=c1"},
		OrderBy: baremetal.ListServersRequestOrderByCreatedAtDesc})
	if err != nil || desc.Servers[0].ID != mine[len(mine)-1] {
		t.Fatalf("created_at_desc: %v", err)
	}
	name := "node-1"
	byName, err := e.bm.ListServers(&baremetal.ListServersRequest{Name: &name})
	if err != nil || byName.TotalCount != 1 || byName.Servers[0].Name != name {
		t.Fatalf("name filter: %v %+v", err, byName)
	}
	e.waitStatus(t, mine[0], baremetal.ServerStatusReady)
	for _, id := range mine[1:] {
		e.waitStatus(t, id, baremetal.ServerStatusReady)
	}
	if _, err := e.bm.StopServer(&baremetal.StopServerRequest{ServerID: mine[0]}); err != nil {
		t.Fatal(err)
	}
	byStatus, err := e.bm.ListServers(&baremetal.ListServersRequest{Status: []string{"stopping", "stopped"}})
	if err != nil || byStatus.TotalCount != 1 || byStatus.Servers[0].ID != mine[0] {
		t.Fatalf("status filter: %v %+v", err, byStatus)
	}
	project := zeroID
	byProject, err := e.bm.ListServers(&baremetal.ListServersRequest{ProjectID: &project})
	if err != nil || byProject.TotalCount != 7 {
		t.Fatalf("project filter: %v %d", err, byProject.TotalCount)
	}
	// Another zone lists none of them.
	other, err := e.bm.ListServers(&baremetal.ListServersRequest{Zone: scw.ZoneFrPar1})
	if err != nil || other.TotalCount != 0 || other.Servers == nil {
		t.Fatalf("fr-par-1: %v %+v", err, other)
	}

	big, zero := uint32(101), int32(0)
	for _, r := range []*baremetal.ListServersRequest{{PageSize: &big}, {Page: &zero}, {OrderBy: "name_asc"}} {
		_, err := e.bm.ListServers(r)
		mustAs[*scw.InvalidArgumentsError](t, err)
	}
}

func TestOffersCatalogue(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct {
		period baremetal.OfferSubscriptionPeriod
		want   uint32
	}{{baremetal.OfferSubscriptionPeriodHourly, 33}, {baremetal.OfferSubscriptionPeriodMonthly, 32}, {"", 33}} {
		res, err := e.bm.ListOffers(&baremetal.ListOffersRequest{SubscriptionPeriod: c.period})
		if err != nil || res.TotalCount != c.want || len(res.Offers) != int(c.want) {
			t.Fatalf("ListOffers %q: %v %d/%d", c.period, err, res.TotalCount, len(res.Offers))
		}
		for _, o := range res.Offers {
			want := c.period
			if want == "" {
				want = baremetal.OfferSubscriptionPeriodHourly
			}
			if o.SubscriptionPeriod != want {
				t.Fatalf("offer %s period %s in %q list", o.Name, o.SubscriptionPeriod, c.period)
			}
		}
	}
	size := uint32(10)
	all, err := e.bm.ListOffers(&baremetal.ListOffersRequest{SubscriptionPeriod: "hourly", PageSize: &size}, scw.WithAllPages())
	if err != nil || len(all.Offers) != 33 {
		t.Fatalf("all pages: %v %d", err, len(all.Offers))
	}
	id := e.offerID(t, offerB112)
	o, err := e.bm.GetOffer(&baremetal.GetOfferRequest{OfferID: id})
	if err != nil || o.Name != offerB112 || o.Stock != baremetal.OfferStockAvailable || o.Zone != testZone {
		t.Fatalf("GetOffer: %v %+v", err, o)
	}
	// As recorded, an offer has one ID in every zone, and GET by that ID
	// answers in any zone.
	fr1, _ := e.sim.OfferID("fr-par-1", offerB112, "hourly")
	o1, err := e.bm.GetOffer(&baremetal.GetOfferRequest{Zone: scw.ZoneFrPar1, OfferID: id})
	if err != nil || o1.Name != offerB112 || o1.Zone != scw.ZoneFrPar1 || fr1 != id {
		t.Fatalf("fr-par-1 offer: %v %+v (fr-par-1 lists it as %s)", err, o1, fr1)
	}
	opts, err := e.bm.ListOptions(&baremetal.ListOptionsRequest{OfferID: &id})
	if err != nil || opts.TotalCount == 0 {
		t.Fatalf("ListOptions for offer: %v %+v", err, opts)
	}
	for _, op := range opts.Options {
		found := false
		for _, oo := range o.Options {
			found = found || oo.ID == op.ID
		}
		if !found {
			t.Fatalf("option %s listed for an offer that lacks it", op.Name)
		}
	}
	osList, err := e.bm.ListOS(&baremetal.ListOSRequest{OfferID: &id})
	if err != nil || osList.TotalCount == 0 {
		t.Fatalf("ListOS: %v", err)
	}
	for _, os := range osList.Os {
		for _, bad := range o.IncompatibleOsIDs {
			if os.ID == bad {
				t.Fatalf("incompatible os %s listed", os.Name)
			}
		}
	}
	if _, err := e.bm.GetOS(&baremetal.GetOSRequest{OsID: osList.Os[0].ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.bm.GetOption(&baremetal.GetOptionRequest{OptionID: opts.Options[0].ID}); err != nil {
		t.Fatal(err)
	}
	_, err = e.bm.GetOS(&baremetal.GetOSRequest{OsID: "00000000-0000-4000-8000-000000000009"})
	mustAs[*scw.ResourceNotFoundError](t, err)
}
