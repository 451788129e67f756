// Package simapi starts the simulated Scaleway API (scwsim, test profile) for
// one test, with the provider's own API client on it.
package simapi

import (
	"testing"

	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// Start serves a simulator until the test ends and returns it with a client
// whose default zone is zone; edits change the client's configuration (e.g.
// its retry policy).
func Start(t testing.TB, zone scw.Zone, edits ...func(*scaleway.Config)) (*scwsim.Sim, *scaleway.Client) {
	t.Helper()
	opts, err := scwsim.Profile(scwsim.ProfileTest)
	if err != nil {
		t.Fatal(err)
	}
	sim := scwsim.New(opts)
	url, err := sim.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	cfg := scaleway.Config{
		AccessKey: "SCWSIMULATED00000000", SecretKey: sim.SecretKey(), ProjectID: opts.ProjectID,
		OrganizationID: opts.OrganizationID, APIURL: url, DefaultZone: zone,
	}
	for _, edit := range edits {
		edit(&cfg)
	}
	api, err := scaleway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sim, api
}
