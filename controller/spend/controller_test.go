package spend_test

import (
	"context"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
	"github.com/prometheus/client_golang/prometheus"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/inventory"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spend"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// The controller prices what the simulated API lists for this cluster only,
// and keeps its last totals when a listing fails.
func TestControllerPricesTheClustersServers(t *testing.T) {
	opts, err := scwsim.Profile("test")
	if err != nil {
		t.Fatal(err)
	}
	sim := scwsim.New(opts)
	url, err := sim.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	api, err := scaleway.New(scaleway.Config{AccessKey: "SCWSIMULATED00000000", SecretKey: sim.SecretKey(), ProjectID: opts.ProjectID,
		OrganizationID: opts.OrganizationID, APIURL: url, DefaultZone: scw.ZoneFrPar2,
		Retry: scaleway.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_ = v1alpha1.SchemeGroupVersion // our types register with client-go's scheme
	order := func(cluster, nodeClass, offer, period string) {
		t.Helper()
		id, ok := sim.OfferID("fr-par-2", offer, period)
		if !ok {
			t.Fatalf("no %s %s offer", period, offer)
		}
		tags := []string{scaleway.Tag(scaleway.TagManagedBy, cluster), scaleway.Tag(scaleway.TagClusterID, "uid-"+cluster), scaleway.Tag(scaleway.TagNodeClass, nodeClass),
			scaleway.Tag(scaleway.TagNodeClaim, nodeClass+"-"+period+"-"+cluster)}
		if _, _, err := api.CreateServer(ctx, scaleway.CreateServerRequest{Zone: scw.ZoneFrPar2, OfferID: id, Name: "n",
			Tags: tags, IdempotencyTag: tags[len(tags)-1]}); err != nil {
			t.Fatal(err)
		}
	}
	order("c1", "gp", "EM-A215R-HDD", "hourly")
	order("c1", "gp", "EM-A215R-HDD", "monthly")
	order("other", "gp", "EM-A215R-HDD", "hourly")

	cat := catalog.New(catalog.Options{})
	gauges := spend.NewGauges(prometheus.NewRegistry())
	// The inventory lists (cluster c1 only, every zone it may have servers in).
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()
	owner := &identity.Owner{Identity: identity.Identity{Name: "c1", ID: "uid-c1"}, API: api, Kube: kube, Log: testlog.New(t)}
	inv := &inventory.Inventory{API: api, Kube: kube, Owner: owner, DefaultZone: "fr-par-2", Log: testlog.New(t)}
	listed := -1
	c := &spend.Controller{Servers: inv.Servers, Offers: cat, Clock: clocktesting.NewFakeClock(time.Now()), Gauges: gauges,
		Listed: func(all []*baremetal.Server) { listed = len(all) }}
	res, err := c.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 {
		t.Errorf("no requeue: %+v", res)
	}
	hourly, _ := cat.Offer("fr-par-2", "EM-A215R-HDD", catalog.BillingHourly)
	monthly, _ := cat.Offer("fr-par-2", "EM-A215R-HDD", catalog.BillingMonthly)
	got := gauges.Totals().NodeClass("gp")
	want := hourly.PricePerHour.ToFloat() + monthly.PricePerMonth.ToFloat()/catalog.HoursPerMonth
	if got.Servers != 2 || got.Unpriced != 0 || !near(got.Hourly, want) || !near(got.Commitment, monthly.PricePerMonth.ToFloat()+monthly.Fee.ToFloat()) {
		t.Fatalf("gp: %+v, want the two servers of c1 (%.4f/h), not the other cluster's", got, want)
	}
	if listed != 2 {
		t.Errorf("Listed was given %d servers, want the listing of c1's two", listed)
	}

	sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Method: "GET", Path: `/servers$`, Status: 500})
	if _, err := c.Reconcile(ctx); err == nil {
		t.Fatal("a failed listing reported no error")
	}
	if listed != 2 {
		t.Errorf("a failed listing was passed on (%d servers)", listed)
	}
	if after := gauges.Totals().NodeClass("gp"); after != got {
		t.Errorf("after a failed listing: %+v, want the last totals %+v kept", after, got)
	}
}
