package scwsim

import (
	"slices"
	"testing"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
)

// The ledger records what the API committed, with the server's tags before
// and after, also when the answer of the change was lost.
func TestLedgerRecordsCommittedChanges(t *testing.T) {
	e := newEnv(t, nil)
	e.sim.MustInject(Fault{Kind: FaultAnswerLost, Method: "POST", Path: `/servers$`, Times: 1})
	if _, err := e.bm.CreateServer(&baremetal.CreateServerRequest{OfferID: e.offerID(t, offerB112), Name: "lost",
		Tags: []string{"karpenter.sh/nodeclaim=a"}}); err == nil {
		t.Fatal("the lost answer reached the client")
	}
	servers := e.sim.Servers()
	if len(servers) != 1 {
		t.Fatalf("%d servers", len(servers))
	}
	id := servers[0].ID
	e.waitStatus(t, id, baremetal.ServerStatusReady)
	tags := []string{"karpenter.sh/nodeclaim=b"}
	if _, err := e.bm.UpdateServer(&baremetal.UpdateServerRequest{ServerID: id, Tags: &tags}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.bm.RebootServer(&baremetal.RebootServerRequest{ServerID: id, BootType: baremetal.ServerBootTypeRescue}); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, id, baremetal.ServerStatusReady)
	if _, err := e.bm.DeleteServer(&baremetal.DeleteServerRequest{ServerID: id}); err != nil {
		t.Fatal(err)
	}
	e.waitGone(t, id)

	var kinds []LedgerKind
	for _, l := range e.sim.Ledger() {
		kinds = append(kinds, l.Kind)
		if l.Server != id || l.Offer != offerB112 || l.Period != "hourly" || l.PricePerHour <= 0 {
			t.Errorf("entry %s: wrong server, offer, period or price", l)
		}
	}
	want := []LedgerKind{LedgerOrder, LedgerTags, LedgerReboot, LedgerDelete, LedgerGone}
	if !slices.Equal(kinds, want) {
		t.Fatalf("ledger kinds %v, want %v", kinds, want)
	}
	l := e.sim.Ledger()
	if l[0].Tag("karpenter.sh/nodeclaim") != "a" {
		t.Errorf("order entry: %s", l[0])
	}
	if l[1].TagBefore("karpenter.sh/nodeclaim") != "a" || l[1].Tag("karpenter.sh/nodeclaim") != "b" {
		t.Errorf("tags entry: %s", l[1])
	}
	if l[2].BootType != "rescue" || l[2].TagBefore("karpenter.sh/nodeclaim") != "b" {
		t.Errorf("reboot entry: %s", l[2])
	}
}
