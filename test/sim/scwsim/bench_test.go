package scwsim

import (
	"fmt"
	"net/http/httptest"
	"testing"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

// benchEnv is a simulator with n servers tagged for one cluster.
func benchEnv(b *testing.B, n int) (*Sim, *baremetal.API) {
	b.Helper()
	opts, _ := Profile(ProfileTest)
	sim := New(opts)
	ts := httptest.NewServer(sim.Handler())
	b.Cleanup(ts.Close)
	benchURL = ts.URL
	b.Cleanup(sim.Close)
	cli, err := scw.NewClient(scw.WithAPIURL(ts.URL), scw.WithAuth(accessKey, sim.SecretKey()), scw.WithDefaultZone(testZone),
		scw.WithDefaultProjectID(zeroID))
	if err != nil {
		b.Fatal(err)
	}
	api := baremetal.NewAPI(cli)
	id, _ := sim.OfferID(string(testZone), offerB112, "hourly")
	for i := 0; i < n; i++ {
		if _, err := api.CreateServer(&baremetal.CreateServerRequest{OfferID: id, Name: fmt.Sprint("n", i),
			Tags: []string{"karpenter.sh/managed-by=c1", fmt.Sprint("karpenter.sh/nodeclaim=n", i)}}); err != nil {
			b.Fatal(err)
		}
	}
	return sim, api
}

// BenchmarkListServers100: one page of 100 tagged servers through the SDK.
func BenchmarkListServers100(b *testing.B) {
	_, api := benchEnv(b, 100)
	size := uint32(100)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := api.ListServers(&baremetal.ListServersRequest{Tags: []string{"karpenter.sh/managed-by=c1"}, PageSize: &size})
		if err != nil || len(res.Servers) != 100 {
			b.Fatalf("%v %d", err, len(res.Servers))
		}
	}
}

// BenchmarkGetServer: the poll a provider does per node.
func BenchmarkGetServer(b *testing.B) {
	sim, api := benchEnv(b, 1)
	id := sim.Servers()[0].ID
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := api.GetServer(&baremetal.GetServerRequest{ServerID: id}); err != nil {
			b.Fatal(err)
		}
	}
}

var benchURL string
