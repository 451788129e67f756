package world

import "github.com/scaleway/scaleway-sdk-go/scw"

// SDKClient is a Scaleway SDK client of the simulated API, with the
// world's project and fr-par-2 as defaults: for tests that act on the
// simulated account by hand (a leak, a namesake cluster's server).
func (w *World) SDKClient() (*scw.Client, error) {
	return scw.NewClient(scw.WithAPIURL(w.SimURL), scw.WithAuth("SCWSIMULATED00000000", w.Sim.SecretKey()),
		scw.WithDefaultZone(scw.ZoneFrPar2), scw.WithDefaultProjectID(w.Sim.Options().ProjectID))
}
