package scwsim

import (
	"net/http"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	bmv3 "github.com/scaleway/scaleway-sdk-go/api/baremetal/v3"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

const (
	pnA            = "5a1b5a5e-1111-4111-8111-aaaaaaaaaaaa"
	pnB            = "5a1b5a5e-2222-4222-8222-bbbbbbbbbbbb"
	pnOptionB112ID = "cd4158d7-2d65-49be-8803-c4b8ab6f760c" // "Private Network", recorded
)

func waitPN(t *testing.T, api *bmv3.PrivateNetworkAPI, serverID string, want int, status bmv3.ServerPrivateNetworkStatus) []*bmv3.ServerPrivateNetwork {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := api.ListServerPrivateNetworks(&bmv3.PrivateNetworkAPIListServerPrivateNetworksRequest{ServerID: &serverID})
		if err != nil {
			t.Fatal(err)
		}
		ok := int(res.TotalCount) == want
		for _, a := range res.ServerPrivateNetworks {
			ok = ok && a.Status == status
		}
		if ok {
			return res.ServerPrivateNetworks
		}
		if time.Now().After(deadline) {
			t.Fatalf("server %s private networks: %+v, want %d %s", serverID, res.ServerPrivateNetworks, want, status)
		}
		time.Sleep(3 * time.Millisecond)
	}
}

func TestPrivateNetworkAttach(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.PrivateNetworkIDs = []string{pnA, pnB} })
	pn := bmv3.NewPrivateNetworkAPI(e.cli)
	hold := e.sim.MustInject(Fault{Kind: FaultStuck, Tag: "pn", State: "delivering"})
	srv := e.create(t, offerB112, "pn")
	_, err := pn.AddServerPrivateNetwork(&bmv3.PrivateNetworkAPIAddServerPrivateNetworkRequest{ServerID: srv.ID, PrivateNetworkID: pnA})
	if re := mustAs[*scw.ResponseError](t, err); re.Message != "Server is not delivered" {
		t.Fatalf("attach while delivering: %+v", re)
	}
	e.sim.RemoveFault(hold)
	e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
	_, err = pn.AddServerPrivateNetwork(&bmv3.PrivateNetworkAPIAddServerPrivateNetworkRequest{ServerID: srv.ID, PrivateNetworkID: pnA})
	if pf := mustAs[*scw.PreconditionFailedError](t, err); pf.Precondition != "attribute_must_be_set" {
		t.Fatalf("attach without option: %+v", pf)
	}

	withOpt, err := e.bm.AddOptionServer(&baremetal.AddOptionServerRequest{ServerID: srv.ID, OptionID: pnOptionB112ID})
	if err != nil || len(withOpt.Options) != 1 || withOpt.Options[0].Status != baremetal.ServerOptionOptionStatusOptionStatusEnabling ||
		withOpt.Options[0].PrivateNetwork == nil || withOpt.Options[0].Name != "Private Network" {
		t.Fatalf("AddOptionServer: %v %+v", err, withOpt)
	}
	_, err = e.bm.AddOptionServer(&baremetal.AddOptionServerRequest{ServerID: srv.ID, OptionID: pnOptionB112ID})
	if re := mustAs[*scw.ResponseError](t, err); re.StatusCode != http.StatusConflict {
		t.Fatalf("option twice: %+v", re)
	}
	_, err = e.bm.AddOptionServer(&baremetal.AddOptionServerRequest{ServerID: srv.ID, OptionID: "00000000-0000-4000-8000-0000000000aa"})
	mustAs[*scw.ResourceNotFoundError](t, err)
	optID := pnOptionB112ID
	for {
		s, err := e.bm.GetServer(&baremetal.GetServerRequest{ServerID: srv.ID})
		if err != nil {
			t.Fatal(err)
		}
		if s.Options[0].Status == baremetal.ServerOptionOptionStatusOptionStatusEnable {
			break
		}
		time.Sleep(3 * time.Millisecond)
	}
	byOption, err := e.bm.ListServers(&baremetal.ListServersRequest{OptionID: &optID})
	if err != nil || byOption.TotalCount != 1 {
		t.Fatalf("list by option: %v %+v", err, byOption)
	}

	_, err = pn.AddServerPrivateNetwork(&bmv3.PrivateNetworkAPIAddServerPrivateNetworkRequest{ServerID: srv.ID,
		PrivateNetworkID: "5a1b5a5e-3333-4333-8333-cccccccccccc"})
	if nf := mustAs[*scw.ResourceNotFoundError](t, err); nf.Resource != "private_network" {
		t.Fatalf("unknown pn: %+v", nf)
	}
	_, err = pn.AddServerPrivateNetwork(&bmv3.PrivateNetworkAPIAddServerPrivateNetworkRequest{ServerID: srv.ID, PrivateNetworkID: "bad"})
	mustAs[*scw.InvalidArgumentsError](t, err)
	a, err := pn.AddServerPrivateNetwork(&bmv3.PrivateNetworkAPIAddServerPrivateNetworkRequest{ServerID: srv.ID, PrivateNetworkID: pnA})
	if err != nil || a.Status != bmv3.ServerPrivateNetworkStatusAttaching || a.Vlan == nil || a.ServerID != srv.ID ||
		a.PrivateNetworkID != pnA || a.ProjectID != zeroID || a.IpamIPIDs == nil {
		t.Fatalf("AddServerPrivateNetwork: %v %+v", err, a)
	}
	_, err = pn.AddServerPrivateNetwork(&bmv3.PrivateNetworkAPIAddServerPrivateNetworkRequest{ServerID: srv.ID, PrivateNetworkID: pnA})
	if re := mustAs[*scw.ResponseError](t, err); re.StatusCode != http.StatusConflict {
		t.Fatalf("attach twice: %+v", re)
	}
	b, err := pn.AddServerPrivateNetwork(&bmv3.PrivateNetworkAPIAddServerPrivateNetworkRequest{ServerID: srv.ID, PrivateNetworkID: pnB})
	if err != nil || *b.Vlan == *a.Vlan {
		t.Fatalf("second pn: %v vlan %v vs %v", err, b.Vlan, a.Vlan)
	}
	attached := waitPN(t, pn, srv.ID, 2, bmv3.ServerPrivateNetworkStatusAttached)
	if attached[0].ID != a.ID || *attached[0].Vlan != *a.Vlan {
		t.Fatalf("list: %+v", attached)
	}
	if got := e.sim.PrivateNetworks(srv.ID); got[pnA] != *a.Vlan || got[pnB] != *b.Vlan {
		t.Fatalf("Sim.PrivateNetworks: %v", got)
	}
	pnID := pnA
	byPN, err := pn.ListServerPrivateNetworks(&bmv3.PrivateNetworkAPIListServerPrivateNetworksRequest{PrivateNetworkID: &pnID})
	if err != nil || byPN.TotalCount != 1 {
		t.Fatalf("by pn: %v %+v", err, byPN)
	}

	if err := pn.DeleteServerPrivateNetwork(&bmv3.PrivateNetworkAPIDeleteServerPrivateNetworkRequest{ServerID: srv.ID,
		PrivateNetworkID: pnB}); err != nil {
		t.Fatal(err)
	}
	waitPN(t, pn, srv.ID, 1, bmv3.ServerPrivateNetworkStatusAttached)
	err = pn.DeleteServerPrivateNetwork(&bmv3.PrivateNetworkAPIDeleteServerPrivateNetworkRequest{ServerID: srv.ID, PrivateNetworkID: pnB})
	mustAs[*scw.ResourceNotFoundError](t, err)

	// Set: keep A, add B again.
	set, err := pn.SetServerPrivateNetworks(&bmv3.PrivateNetworkAPISetServerPrivateNetworksRequest{ServerID: srv.ID,
		PerPrivateNetworkIpamIPIDs: map[string]*[]string{pnA: nil, pnB: nil}})
	if err != nil || len(set.ServerPrivateNetworks) != 2 || set.ServerPrivateNetworks[0].ID != a.ID {
		t.Fatalf("SetServerPrivateNetworks: %v %+v", err, set)
	}
	waitPN(t, pn, srv.ID, 2, bmv3.ServerPrivateNetworkStatusAttached)

	// Deleting the server drops its attachments.
	if _, err := e.bm.DeleteServer(&baremetal.DeleteServerRequest{ServerID: srv.ID}); err != nil {
		t.Fatal(err)
	}
	waitPN(t, pn, srv.ID, 0, "")
}
