package install

import (
	"net"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
)

// A listing older than the install's own write (soak seed 100: phase
// booting written in rescue, the listing still showing the server as
// delivered, ready in boot type normal, untagged) never replaces what the
// write answered; a newer listing does; addresses come from the listing
// when the written state has none.
func TestLatestKeepsTheWriteOverAnOlderListing(t *testing.T) {
	at := time.Date(2026, 11, 28, 15, 37, 1, 0, time.UTC)
	older, newer := at.Add(-8*time.Second), at.Add(time.Second)
	ip := []*baremetal.IP{{Address: net.ParseIP("127.10.0.4"), Version: baremetal.IPVersionIPv4}}
	written := &baremetal.Server{ID: "s", Status: baremetal.ServerStatusReady, BootType: baremetal.ServerBootTypeRescue,
		Tags: []string{"karpenter-scaleway-em/phase=booting"}, UpdatedAt: &at}
	stale := &baremetal.Server{ID: "s", Status: baremetal.ServerStatusReady, BootType: baremetal.ServerBootTypeNormal, IPs: ip, UpdatedAt: &older}

	got := latest(written, stale)
	if got.BootType != baremetal.ServerBootTypeRescue || len(got.Tags) != 1 {
		t.Errorf("an older listing replaced the write: boot type %s, tags %v", got.BootType, got.Tags)
	}
	if len(got.IPs) != 1 {
		t.Errorf("the listing's address was not kept: %v", got.IPs)
	}
	if written.IPs != nil {
		t.Error("latest changed the held state")
	}

	fresh := &baremetal.Server{ID: "s", Status: baremetal.ServerStatusResetting, BootType: baremetal.ServerBootTypeNormal, IPs: ip, UpdatedAt: &newer}
	if got := latest(written, fresh); got != fresh {
		t.Errorf("a newer listing was not taken: %+v", got)
	}
	same := &baremetal.Server{ID: "s", BootType: baremetal.ServerBootTypeNormal, IPs: ip, UpdatedAt: &at}
	if got := latest(written, same); got.BootType != baremetal.ServerBootTypeRescue {
		t.Error("a listing as old as the write replaced it")
	}
	if got := latest(nil, stale); got != stale {
		t.Error("with nothing held, the listing is what there is")
	}
}
