package install

import (
	"context"
	"errors"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/simapi"
)

// An install's phase write finds its server no longer tagged for its
// NodeClaim (the garbage collector or a release kept it as a spare, or
// another NodeClaim took it): it writes nothing and stops with
// ErrNotOwned, instead of setting a server of nobody installing again.
func TestAPhaseIsNotWrittenOnAServerThatIsNoLongerTheInstalls(t *testing.T) {
	const zone = scw.Zone("fr-par-2")
	sim, api := simapi.Start(t, zone)
	offerID, ok := sim.OfferID(string(zone), "EM-A116X-SSD", "hourly")
	if !ok {
		t.Fatal("no offer")
	}
	claimTag := scaleway.Tag(scaleway.TagNodeClaim, "mine")
	srv, _, err := api.CreateServer(context.Background(), scaleway.CreateServerRequest{
		Zone: zone, OfferID: offerID, Name: "n", Tags: []string{claimTag}, IdempotencyTag: claimTag})
	if err != nil {
		t.Fatal(err)
	}
	i := &Installer{API: api, Log: testlog.New(t)}
	// Still its own: the phase is written.
	srv, err = i.setPhase(context.Background(), srv, PhaseRescue)
	if err != nil || PhaseOf(srv) != PhaseRescue {
		t.Fatalf("phase write on its own server: %v, phase %s", err, PhaseOf(srv))
	}
	// Kept as a spare meanwhile: untagged, phase spare.
	if _, err := api.EditTags(context.Background(), zone, srv.ID, func(tags []string) ([]string, bool) {
		tags, _ = scaleway.RemoveTagIn(tags, scaleway.TagNodeClaim)
		return SetPhaseIn(tags, PhaseSpare, i.clock().Now()), true
	}); err != nil {
		t.Fatal(err)
	}
	_, err = i.setPhase(context.Background(), srv, PhaseImaging)
	if !errors.Is(err, ErrNotOwned) {
		t.Fatalf("phase write on a server kept as a spare meanwhile: %v, want ErrNotOwned", err)
	}
	var pe *PhaseError
	if errors.As(err, &pe) {
		t.Fatalf("a server taken away is no install failure (the breaker would count it): %v", err)
	}
	got, _ := sim.Server(srv.ID)
	if v, _ := scaleway.TagValue(got.Tags, scaleway.TagPhase); v != string(PhaseSpare) {
		t.Fatalf("the spare's phase became %q", v)
	}
}
