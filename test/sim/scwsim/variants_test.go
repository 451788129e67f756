package scwsim

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	bmv3 "github.com/scaleway/scaleway-sdk-go/api/baremetal/v3"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

// Recorded: attaching right after adding the Private Network option, while
// it is still enabling, is accepted. AttachOnceEnabled is the stricter API.
func TestAttachWhileOptionEnabling(t *testing.T) {
	for _, mode := range []AttachMode{AttachWhileEnabling, AttachOnceEnabled} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t, func(o *Options) {
				o.PrivateNetworkAttach = mode
				o.Delays.OptionEnable = time.Hour // stays enabling for the whole test
			})
			pn := bmv3.NewPrivateNetworkAPI(e.cli)
			srv := e.create(t, offerB112)
			e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
			withOpt, err := e.bm.AddOptionServer(&baremetal.AddOptionServerRequest{ServerID: srv.ID, OptionID: pnOptionB112ID})
			if err != nil || withOpt.Options[0].Status != baremetal.ServerOptionOptionStatusOptionStatusEnabling {
				t.Fatalf("AddOptionServer: %v %+v", err, withOpt)
			}
			a, err := pn.AddServerPrivateNetwork(&bmv3.PrivateNetworkAPIAddServerPrivateNetworkRequest{ServerID: srv.ID, PrivateNetworkID: pnA})
			if mode == AttachWhileEnabling {
				if err != nil || a.Status != bmv3.ServerPrivateNetworkStatusAttaching {
					t.Fatalf("attach while enabling: %v %+v", err, a)
				}
				return
			}
			if pf := mustAs[*scw.PreconditionFailedError](t, err); pf.Precondition != "attribute_must_be_set" {
				t.Fatalf("attach while enabling under %s: %+v", mode, pf)
			}
		})
	}
}

// Recorded: deleting a server turns its options "disabling" and its
// attachments "detaching" until it is gone.
func TestDeleteDisablesOptionsAndDetaches(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Delays.Delete = time.Hour })
	pn := bmv3.NewPrivateNetworkAPI(e.cli)
	srv := e.create(t, offerB112)
	e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
	if _, err := e.bm.AddOptionServer(&baremetal.AddOptionServerRequest{ServerID: srv.ID, OptionID: pnOptionB112ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := pn.AddServerPrivateNetwork(&bmv3.PrivateNetworkAPIAddServerPrivateNetworkRequest{ServerID: srv.ID, PrivateNetworkID: pnA}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.bm.DeleteServer(&baremetal.DeleteServerRequest{ServerID: srv.ID}); err != nil {
		t.Fatal(err)
	}
	deleting := e.waitStatus(t, srv.ID, baremetal.ServerStatusDeleting)
	if deleting.Options[0].Status != baremetal.ServerOptionOptionStatusOptionStatusDisabling {
		t.Fatalf("deleting server options: %+v", deleting.Options)
	}
	waitPN(t, pn, srv.ID, 1, bmv3.ServerPrivateNetworkStatusDetaching)
}

// Zones sell different offers under shared IDs: fr-par-1 serves its recorded
// listing, not fr-par-2's.
func TestZonesServeTheirOwnOffers(t *testing.T) {
	e := newEnv(t, nil)
	names := func(zone scw.Zone) []string {
		res, err := e.bm.ListOffers(&baremetal.ListOffersRequest{Zone: zone, SubscriptionPeriod: "hourly"}, scw.WithAllPages())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, o := range res.Offers {
			out = append(out, o.Name)
			if o.Zone != zone {
				t.Fatalf("%s lists %s with zone %s", zone, o.Name, o.Zone)
			}
		}
		return out
	}
	par1, par2, ams1 := names(scw.ZoneFrPar1), names(scw.ZoneFrPar2), names(scw.ZoneNlAms1)
	// Recorded: EM-L620E-NVME is sold in fr-par-1 only, EM-T620E-H100 in fr-par-2 only.
	if !slices.Contains(par1, "EM-L620E-NVME") || slices.Contains(par2, "EM-L620E-NVME") ||
		slices.Contains(par1, "EM-T620E-H100") || !slices.Contains(par2, "EM-T620E-H100") || len(par1) != 27 {
		t.Fatalf("fr-par-1 %v\nfr-par-2 %v", par1, par2)
	}
	if len(ams1) == 0 || len(ams1) >= len(par2) {
		t.Fatalf("nl-ams-1 (derived) lists %d offers, fr-par-2 %d", len(ams1), len(par2))
	}
	id1, _ := e.sim.OfferID("fr-par-1", offerB112, "monthly")
	id2, _ := e.sim.OfferID("fr-par-2", offerB112, "monthly")
	if id1 == "" || id1 != id2 {
		t.Fatalf("monthly %s: fr-par-1 %q, fr-par-2 %q; want one shared ID", offerB112, id1, id2)
	}
	// Ordering an offer the zone does not sell is refused.
	h100, _ := e.sim.OfferID("fr-par-2", "EM-T620E-H100", "hourly")
	_, err := e.bm.CreateServer(&baremetal.CreateServerRequest{Zone: scw.ZoneFrPar1, OfferID: h100, Name: "x"})
	mustAs[*scw.ResourceNotFoundError](t, err)
}

// Every shape of the unrecorded answers keeps the status; only the body
// changes, and the SDK still reports the status.
func TestUnrecordedShapes(t *testing.T) {
	for _, c := range []struct {
		shape     UnrecordedShape
		ctype     string
		bodyCheck func(string) bool
	}{
		{UnrecordedTyped, "application/json", func(b string) bool { return strings.Contains(b, `"type":"out_of_stock"`) }},
		{UnrecordedMessage, "application/json", func(b string) bool { return b == `{"message":"resource is out of stock"}` }},
		{UnrecordedEmpty, "", func(b string) bool { return b == "" }},
		{UnrecordedText, "text/plain; charset=utf-8", func(b string) bool { return b == "resource is out of stock\n" }},
	} {
		t.Run(string(c.shape), func(t *testing.T) {
			e := newEnv(t, func(o *Options) { o.Unrecorded = c.shape })
			resp := e.send(t, "POST", "/baremetal/v1/zones/fr-par-2/servers",
				strings.NewReader(`{"offer_id":"`+e.offerID(t, offerEmpty)+`","name":"x"}`))
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusPreconditionFailed || resp.Header.Get("Content-Type") != c.ctype || !c.bodyCheck(string(b)) {
				t.Fatalf("out of stock under %s: %d %q %q", c.shape, resp.StatusCode, resp.Header.Get("Content-Type"), b)
			}
			_, err := e.bm.CreateServer(&baremetal.CreateServerRequest{OfferID: e.offerID(t, offerEmpty), Name: "x"})
			if err == nil {
				t.Fatal("an out-of-stock order was accepted")
			}
			if c.shape != UnrecordedTyped {
				// A reboot shows late: still "ready", with the new boot type.
				srv := e.create(t, offerB112)
				e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
				r, err := e.bm.RebootServer(&baremetal.RebootServerRequest{ServerID: srv.ID, BootType: baremetal.ServerBootTypeRescue})
				if err != nil || r.Status != baremetal.ServerStatusReady || r.BootType != baremetal.ServerBootTypeRescue {
					t.Fatalf("reboot answer: %v %+v", err, r)
				}
				e.waitStatus(t, srv.ID, baremetal.ServerStatusStarting)
				e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
			}
		})
	}
}
