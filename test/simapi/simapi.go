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
// whose default zone is zone.
func Start(t testing.TB, zone scw.Zone) (*scwsim.Sim, *scaleway.Client) {
	sim, api, _ := StartURL(t, zone)
	return sim, api
}

// StartURL is Start that also returns the simulator's URL, for a second
// client (NewClient: a restarted controller, which remembers nothing);
// edits change the test profile's options (e.g. ListLag).
func StartURL(t testing.TB, zone scw.Zone, edits ...func(*scwsim.Options)) (*scwsim.Sim, *scaleway.Client, string) {
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
	return sim, NewClient(t, sim, url, zone), url
}

// NewClient is a new provider client on sim, served at url.
func NewClient(t testing.TB, sim *scwsim.Sim, url string, zone scw.Zone) *scaleway.Client {
	t.Helper()
	opts := sim.Options()
	api, err := scaleway.New(scaleway.Config{
		AccessKey: "SCWSIMULATED00000000", SecretKey: sim.SecretKey(), ProjectID: opts.ProjectID,
		OrganizationID: opts.OrganizationID, APIURL: url, DefaultZone: zone,
	})
	if err != nil {
		t.Fatal(err)
	}
	return api
}
