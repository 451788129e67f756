package identity_test

import (
	"context"
	"testing"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
)

// TestMineLeavesForeignServersAlone: a server with this cluster's name and
// another cluster's identity is not kept and is recorded as left alone
// (foreign_identity), one of another cluster's name is neither, and one of
// this cluster is kept. Taking Mine apart once dropped the Foreign case:
// such servers were no longer reported.
func TestMineLeavesForeignServersAlone(t *testing.T) {
	me := identity.Identity{Name: "prod", ID: "uid-1"}
	o := &identity.Owner{Identity: me, Log: testlog.New(t)}
	ours := &baremetal.Server{ID: "ours", Zone: zone, Tags: me.Tags()}
	foreign := &baremetal.Server{ID: "foreign", Zone: zone, Tags: identity.Identity{Name: "prod", ID: "uid-2"}.Tags()}
	other := &baremetal.Server{ID: "other", Zone: zone, Tags: identity.Identity{Name: "staging", ID: "uid-3"}.Tags()}
	kept, err := o.Mine(context.Background(), zone, []*baremetal.Server{ours, foreign, other}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 1 || kept[0] != ours {
		t.Fatalf("kept %v, want only %s", kept, ours.ID)
	}
	alone := o.LeftAlone()
	if len(alone) != 1 || alone[0].ID != foreign.ID || alone[0].Reason != identity.ReasonForeignIdentity {
		t.Fatalf("left alone %+v, want only %s (foreign identity)", alone, foreign.ID)
	}
}
