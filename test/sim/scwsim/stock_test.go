package scwsim

import (
	"net/http"
	"strings"
	"testing"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

func offerStock(t *testing.T, e *env, name string) baremetal.OfferStock {
	t.Helper()
	res, err := e.bm.ListOffers(&baremetal.ListOffersRequest{SubscriptionPeriod: baremetal.OfferSubscriptionPeriodHourly,
		Name: &name})
	if err != nil || len(res.Offers) != 1 {
		t.Fatalf("ListOffers name=%s: %v %+v", name, err, res)
	}
	return res.Offers[0].Stock
}

func TestOutOfStock(t *testing.T) {
	e := newEnv(t, nil)
	// Offers recorded as empty cannot be ordered.
	_, err := e.bm.CreateServer(&baremetal.CreateServerRequest{OfferID: e.offerID(t, offerEmpty), Name: "x",
		Tags: []string{"karpenter.sh/nodeclaim=empty"}})
	if oos := mustAs[*scw.OutOfStockError](t, err); oos.Resource != offerEmpty {
		t.Fatalf("out of stock: %+v", oos)
	}
	if err := e.sim.SetStock(string(testZone), offerB112, 1); err != nil {
		t.Fatal(err)
	}
	if s := offerStock(t, e, offerB112); s != baremetal.OfferStockLow {
		t.Fatalf("stock 1: offer says %s, want low", s)
	}
	a := e.create(t, offerB112, "karpenter.sh/nodeclaim=a")
	if s := offerStock(t, e, offerB112); s != baremetal.OfferStockEmpty {
		t.Fatalf("stock 0: offer says %s, want empty", s)
	}
	_, err = e.bm.CreateServer(&baremetal.CreateServerRequest{OfferID: e.offerID(t, offerB112), Name: "b",
		Tags: []string{"karpenter.sh/nodeclaim=b"}})
	mustAs[*scw.OutOfStockError](t, err)
	// Stock is per zone: fr-par-1 still sells it.
	fr1, _ := e.sim.OfferID("fr-par-1", offerB112, "hourly")
	if _, err := e.bm.CreateServer(&baremetal.CreateServerRequest{Zone: scw.ZoneFrPar1, OfferID: fr1, Name: "c"}); err != nil {
		t.Fatalf("fr-par-1 create: %v", err)
	}
	// A deleted server returns its machine to the stock.
	if _, err := e.bm.DeleteServer(&baremetal.DeleteServerRequest{ServerID: a.ID}); err != nil {
		t.Fatal(err)
	}
	e.waitGone(t, a.ID)
	if n := e.sim.Stock(string(testZone), offerB112); n != 1 {
		t.Fatalf("stock after delete: %d", n)
	}
	// Refused orders are not counted as creates.
	creates := e.sim.CreatesByTag("karpenter.sh/nodeclaim")
	if creates["a"] != 1 || creates["b"] != 0 || creates["empty"] != 0 {
		t.Fatalf("CreatesByTag: %v", creates)
	}
	if err := e.sim.SetStock("xx-yyy-9", offerB112, 1); err == nil {
		t.Fatal("SetStock accepted an unknown zone")
	}
	if err := e.sim.SetStock("", "EM-NOPE", 1); err == nil || !strings.Contains(err.Error(), "EM-NOPE") {
		t.Fatalf("SetStock unknown offer: %v", err)
	}
}

func TestStockoutServerWaitsForStock(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Stockout = StockoutServer
		o.Stock = map[string]int{"fr-par-2/" + offerB112: 0}
	})
	srv := e.create(t, offerB112)
	if srv.Status != baremetal.ServerStatusOutOfStock {
		t.Fatalf("status %s, want out_of_stock", srv.Status)
	}
	if err := e.sim.SetStock("", offerB112, 1); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
	equalStrings(t, "history", e.sim.History(srv.ID), []string{"out_of_stock", "delivering", "ready"})
	if n := e.sim.Stock(string(testZone), offerB112); n != 0 {
		t.Fatalf("stock after delivery: %d", n)
	}
}

func TestQuotaPerProjectAndOffer(t *testing.T) {
	e := newEnv(t, nil)
	if err := e.sim.SetQuota(zeroID, offerB112, 1); err != nil {
		t.Fatal(err)
	}
	e.create(t, offerB112)
	_, err := e.bm.CreateServer(&baremetal.CreateServerRequest{OfferID: e.offerID(t, offerB112), Name: "b"})
	q := mustAs[*scw.QuotasExceededError](t, err)
	if len(q.Details) != 1 || q.Details[0].Current != 1 || q.Details[0].Quota != 1 || q.Details[0].Resource != "EM_B112X_SSD" {
		t.Fatalf("quota: %+v", q)
	}
	// The quota counts servers of the project in every zone.
	fr1, _ := e.sim.OfferID("fr-par-1", offerB112, "hourly")
	_, err = e.bm.CreateServer(&baremetal.CreateServerRequest{Zone: scw.ZoneFrPar1, OfferID: fr1, Name: "c"})
	mustAs[*scw.QuotasExceededError](t, err)
	// Another offer is not limited; lifting the quota lets the order through.
	e.create(t, "EM-A410X-SSD")
	if err := e.sim.SetQuota(zeroID, offerB112, -1); err != nil {
		t.Fatal(err)
	}
	e.create(t, offerB112)
	if err := e.sim.SetQuota("not-a-uuid", offerB112, 1); err == nil {
		t.Fatal("SetQuota accepted a bad project")
	}
}

func TestQuotaFromOptions(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Quotas = map[string]int{offerB112: 0} })
	_, err := e.bm.CreateServer(&baremetal.CreateServerRequest{OfferID: e.offerID(t, offerB112), Name: "b"})
	if q := mustAs[*scw.QuotasExceededError](t, err); q.Details[0].Quota != 0 {
		t.Fatalf("quota: %+v", q)
	}
}

func TestCreateValidation(t *testing.T) {
	other := "11111111-2222-4333-8444-555555555555"
	e := newEnv(t, func(o *Options) { o.AllowedProjects = []string{zeroID} })
	id := e.offerID(t, offerB112)
	cases := []struct {
		name string
		req  baremetal.CreateServerRequest
		arg  string
	}{
		{"no offer", baremetal.CreateServerRequest{Name: "x"}, "offer_id"},
		{"bad offer id", baremetal.CreateServerRequest{OfferID: "nope", Name: "x"}, "offer_id"},
		{"no name", baremetal.CreateServerRequest{OfferID: id}, "name"},
		{"empty tag", baremetal.CreateServerRequest{OfferID: id, Name: "x", Tags: []string{""}}, "tags"},
		{"option of no offer", baremetal.CreateServerRequest{OfferID: id, Name: "x",
			OptionIDs: []string{"31f5cddb-8217-4eb0-ac6a-96dbcb080b88"}}, "option_ids"}, // 10Gbps: not on B112X
	}
	for _, c := range cases {
		_, err := e.bm.CreateServer(&c.req)
		if ia := mustAs[*scw.InvalidArgumentsError](t, err); ia.Details[0].ArgumentName != c.arg {
			t.Fatalf("%s: %+v", c.name, ia)
		}
	}
	_, err := e.bm.CreateServer(&baremetal.CreateServerRequest{OfferID: "00000000-0000-4000-8000-000000000000", Name: "x"})
	if nf := mustAs[*scw.ResourceNotFoundError](t, err); nf.Resource != "offer" {
		t.Fatalf("unknown offer: %+v", nf)
	}
	_, err = e.bm.CreateServer(&baremetal.CreateServerRequest{OfferID: id, Name: "x", ProjectID: &other})
	if pd := mustAs[*scw.PermissionsDeniedError](t, err); pd.Details[0].Resource != "baremetal_server" {
		t.Fatalf("foreign project: %+v", pd)
	}
	if len(e.sim.Servers()) != 0 {
		t.Fatalf("refused creates left servers: %+v", e.sim.Servers())
	}
}

func TestAuthentication(t *testing.T) {
	e := newEnv(t, nil)
	bad := baremetal.NewAPI(newClient(t, e.url, "22222222-2222-4222-8222-222222222222"))
	_, err := bad.ListServers(&baremetal.ListServersRequest{})
	if da := mustAs[*scw.DeniedAuthenticationError](t, err); da.Method != "api_key" || da.Reason != "not_found" {
		t.Fatalf("wrong key: %+v", da)
	}
	// Without a token at all (plain HTTP, the SDK always sends one).
	resp, err := http.Get(e.url + "/baremetal/v1/zones/fr-par-2/servers")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("no token: status %d", resp.StatusCode)
	}
	if n, _ := e.sim.CountCalls("GET", `/servers$`); n != 2 {
		t.Fatalf("calls recorded: %d", n)
	}
}
