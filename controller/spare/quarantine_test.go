package spare_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/simapi"
)

const zone = scw.Zone("fr-par-2")

// simOffers is the simulator's catalogue: the offer ID a server was
// ordered with says how it is paid.
type simOffers struct{ sim *scwsim.Sim }

func (o simOffers) Offer(zone, name string, b catalog.BillingPeriod) (*baremetal.Offer, bool) {
	id, ok := o.sim.OfferID(zone, name, string(b))
	return &baremetal.Offer{ID: id, Name: name}, ok
}

// Refreshed: the simulator's offers are the live listing.
func (simOffers) Refreshed(string) bool { return true }

func imagingError(code string) error {
	return &install.PhaseError{Phase: install.PhaseImaging, Release: true,
		Err: fmt.Errorf("em-imager write: %w", &report.Error{Code: code, Message: code})}
}

func TestHostFaultTellsTheServerFromTheCluster(t *testing.T) {
	timeout := errors.New("did not happen in time")
	for _, tc := range []struct {
		name string
		err  error
		disk string
		want string
	}{
		{"stuck delivery", &install.PhaseError{Phase: install.PhaseOrdered, Release: true, Err: timeout}, "auto", "ordered"},
		{"dead rescue", &install.PhaseError{Phase: install.PhaseRescue, Release: true, Err: timeout}, "auto", "rescue"},
		{"no NIC link", &install.PhaseError{Phase: install.PhaseImaging, Release: true, Err: install.ErrNoLink}, "auto", "imaging.no_link"},
		{"bad disk", imagingError(report.CodeWriteFailed), "/dev/sda", "imaging.write_failed"},
		{"no disk, auto", imagingError(report.CodeDiskNotFound), "auto", "imaging.disk_not_found"},
		{"never booted", &install.PhaseError{Phase: install.PhaseBooting, Release: true, Err: timeout}, "auto", "booting"},
		{"deleted while booting", &install.PhaseError{Phase: install.PhaseBooting, Err: install.ErrDeletedBeforeJoin}, "auto", "booting"},
		// The cluster's or the NodeClass's: the server is fine.
		{"no disk at the NodeClass's path", imagingError(report.CodeDiskNotFound), "/dev/nvme9n1", ""},
		{"bad image", imagingError(report.CodeDigestMismatch), "auto", ""},
		{"bucket refuses", imagingError(report.CodeSourceRejected), "auto", ""},
		{"deleted while imaging", &install.PhaseError{Phase: install.PhaseImaging, Err: install.ErrDeletedBeforeJoin}, "auto", ""},
		{"server gone", errors.New("the server is gone"), "auto", ""},
	} {
		if got := spare.HostFault(tc.err, tc.disk); got != tc.want {
			t.Errorf("%s: HostFault = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A monthly server whose install failed for a reason of its own is kept as
// a spare (its month is paid) but quarantined: no NodeClaim takes it, until
// a health check (a pre-imaging) lifts the quarantine. Before, it was taken
// by the very next NodeClaim and failed it again.
func TestQuarantinedSpareIsNotTakenUntilCleared(t *testing.T) {
	ctx := context.Background()
	sim, api := simapi.Start(t, zone)
	f := newKeeperFixture(t, sim, api)
	k, nc := f.k, f.nc
	srv := f.claimed(t, install.PhaseImaging)

	reason := spare.HostFault(imagingError(report.CodeDiskNotFound), "auto")
	if marked, err := k.Quarantine(ctx, zone, srv.ID, "b", reason); err != nil || marked {
		t.Fatalf("Quarantine for another nodeclaim: %v, %v; want left alone", marked, err)
	}
	if marked, err := k.Quarantine(ctx, zone, srv.ID, "a", reason); err != nil || !marked {
		t.Fatalf("Quarantine: %v, %v", marked, err)
	}
	if out, d, err := k.Release(ctx, zone, srv.ID, "a", nc); err != nil || out != spare.Kept {
		t.Fatalf("Release of the failed monthly server: %s (%s), %v; want kept", out, d.Reason, err)
	}
	kept, err := api.GetServer(ctx, zone, srv.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got, q := spare.Quarantined(kept); !q || got != "imaging.disk_not_found" || install.PhaseOf(kept) != install.PhaseSpare {
		t.Fatalf("kept spare: phase %s, quarantine %q (%v); want a quarantined spare", install.PhaseOf(kept), got, q)
	}
	if spare.Takeable(kept) {
		t.Error("a quarantined spare is takeable (and so offered as reserved capacity)")
	}
	if got, err := k.Take(ctx, zone, "EM-A215R-HDD", catalog.BillingMonthly, nc, "c", "np"); err != nil || got != nil {
		t.Fatalf("Take gave a quarantined spare to a new nodeclaim: %v, %v", got, err)
	}

	if err := k.ClearQuarantine(ctx, zone, srv.ID); err != nil {
		t.Fatal(err)
	}
	got, err := k.Take(ctx, zone, "EM-A215R-HDD", catalog.BillingMonthly, nc, "c", "np")
	if err != nil || got == nil || got.ID != srv.ID {
		t.Fatalf("Take after the quarantine was lifted: %v, %v; want the spare", got, err)
	}
}
