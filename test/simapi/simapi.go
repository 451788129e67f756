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
	sim, url := serve(t)
	return sim, NewClient(t, sim, url, zone, edits...)
}

// StartURL is Start that also returns the simulator's URL, for a second
// client (NewClient: a restarted controller, which remembers nothing);
// edits change the test profile's options (e.g. ListLag).
func StartURL(t testing.TB, zone scw.Zone, edits ...func(*scwsim.Options)) (*scwsim.Sim, *scaleway.Client, string) {
	t.Helper()
	sim, url := serve(t, edits...)
	return sim, NewClient(t, sim, url, zone), url
}

func serve(t testing.TB, edits ...func(*scwsim.Options)) (*scwsim.Sim, string) {
	t.Helper()
	opts, err := scwsim.Profile(scwsim.ProfileTest)
	if err != nil {
		t.Fatal(err)
	}
	for _, edit := range edits {
		edit(&opts)
	}
	sim := scwsim.New(opts)
	url, err := sim.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	return sim, url
}

// NewClient is a new provider client on sim, served at url; edits change its
// configuration.
func NewClient(t testing.TB, sim *scwsim.Sim, url string, zone scw.Zone, edits ...func(*scaleway.Config)) *scaleway.Client {
	t.Helper()
	opts := sim.Options()
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
	return api
}
