package garbagecollection

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
)

// orderTagged orders a server with exactly tags (no identity added).
func (f *fixture) orderTagged(t *testing.T, period string, tags ...string) *baremetal.Server {
	t.Helper()
	name := "EM-A116X-SSD"
	if period == "monthly" {
		name = "EM-A115X-SSD"
	}
	offerID, ok := f.sim.OfferID(string(zone), name, period)
	if !ok {
		t.Fatalf("no %s %s offer", name, period)
	}
	srv, _, err := f.api.CreateServer(context.Background(), scaleway.CreateServerRequest{
		Zone: zone, OfferID: offerID, Name: "n", Tags: tags, IdempotencyTag: tags[len(tags)-1]})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// logLines captures the owner's log.
func (f *fixture) logLines() func(substr string) int {
	var lines *testlog.Lines
	f.owner.Log, lines = testlog.Capture(0)
	return lines.Count
}

// A server with this cluster's name and another identity is another
// cluster's: however orphaned it looks (no NodeClaim here, a spare of a
// NodeClass this cluster does not have), sweep after sweep leaves it alone,
// and it is logged once, counted and listed for the NodeClass condition.
func TestServersOfAnotherIdentityAreNeverTouched(t *testing.T) {
	f := setup(t)
	f.owner.Metrics = identity.NewMetrics(prometheus.NewRegistry())
	count := f.logLines()
	other := scaleway.Tag(scaleway.TagClusterID, "uid-production")
	node := f.orderTagged(t, "hourly", scaleway.Tag(scaleway.TagManagedBy, "c1"), other, scaleway.Tag(scaleway.TagNodeClaim, "prod-node"))
	spareTags := install.SetPhaseIn([]string{scaleway.Tag(scaleway.TagManagedBy, "c1"), other,
		scaleway.Tag(scaleway.TagNodeClass, "prod-only")}, install.PhaseSpare, time.Now())
	spare := f.orderTagged(t, "monthly", spareTags...)
	mine := f.order(t, scaleway.Tag(scaleway.TagNodeClaim, "gone"))
	before := len(f.sim.Calls())

	for i := 0; i < 4; i++ {
		f.clk.Step(11 * time.Minute)
		if _, err := f.gc.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	live := f.live(t)
	if !live[node.ID] || !live[spare.ID] {
		t.Fatalf("another cluster's servers collected: live %v", live)
	}
	if live[mine.ID] {
		t.Fatal("this cluster's own orphan was not collected: the sweep did not run")
	}
	for _, s := range f.sim.Calls()[before:] {
		if s.Method != "GET" && (s.ServerID == node.ID || s.ServerID == spare.ID) {
			t.Errorf("%s %s on another cluster's server", s.Method, s.Path)
		}
	}
	if n := count("another cluster's identity"); n != 2 {
		t.Errorf("%d warnings over 4 sweeps, want one per server (2)", n)
	}
	if got := testutil.ToFloat64(f.owner.Metrics.LeftAlone.WithLabelValues(identity.ReasonForeignIdentity)); got != 2 {
		t.Errorf("servers_left_alone{foreign_identity} = %v, want 2", got)
	}
	alone := f.owner.LeftAlone()
	if len(alone) != 2 || alone[0].ClusterID != "uid-production" {
		t.Errorf("LeftAlone = %+v", alone)
	}

	// Gone from the listing (its owner retagged it): forgotten.
	if _, err := f.api.EditTags(context.Background(), zone, node.ID, func(tags []string) ([]string, bool) {
		return scaleway.RemoveTagIn(tags, scaleway.TagManagedBy)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(f.owner.Metrics.LeftAlone.WithLabelValues(identity.ReasonForeignIdentity)); got != 1 {
		t.Errorf("servers_left_alone{foreign_identity} = %v after one is gone, want 1", got)
	}
}

// A server ordered before identities (name only) is adopted when a
// NodeClaim of this cluster names it, and then treated as any other; one
// no NodeClaim names is left alone (it might be a namesake cluster's)
// until the operator sets AdoptAll, then adopted and collected.
func TestServersWithoutIdentityAreAdoptedOnlyWhenProven(t *testing.T) {
	f := setup(t)
	f.owner.Metrics = identity.NewMetrics(prometheus.NewRegistry())
	count := f.logLines()
	name := scaleway.Tag(scaleway.TagManagedBy, "c1")
	used := f.orderTagged(t, "hourly", name, scaleway.Tag(scaleway.TagNodeClaim, "used"))
	pending := f.orderTagged(t, "hourly", name, scaleway.Tag(scaleway.TagNodeClaim, "pending"))
	orphan := f.orderTagged(t, "hourly", name, scaleway.Tag(scaleway.TagNodeClaim, "gone"))
	// "stale" points at another server: its tag alone proves nothing.
	stale := f.orderTagged(t, "hourly", name, scaleway.Tag(scaleway.TagNodeClaim, "stale"))
	for _, c := range []string{"used", "pending", "stale"} {
		pid := ""
		switch c {
		case "used":
			pid = scaleway.ProviderID(zone, used.ID)
		case "stale":
			pid = scaleway.ProviderID(zone, used.ID)
		}
		if err := f.gc.Kube.Create(context.Background(), claim(c, pid)); err != nil {
			t.Fatal(err)
		}
	}
	f.clk.Step(11 * time.Minute)
	for i := 0; i < 2; i++ {
		if _, err := f.gc.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	idTag := scaleway.Tag(scaleway.TagClusterID, "uid-c1")
	for _, s := range []*baremetal.Server{used, pending} {
		got, ok := f.sim.Server(s.ID)
		if !ok || got.Status == string(baremetal.ServerStatusDeleting) || !scaleway.HasTags(got.Tags, idTag) {
			t.Errorf("server %s named by its nodeclaim: not adopted (%+v)", s.ID, got.Tags)
		}
	}
	for _, s := range []*baremetal.Server{orphan, stale} {
		got, ok := f.sim.Server(s.ID)
		if !ok || got.Status == string(baremetal.ServerStatusDeleting) || scaleway.HasTags(got.Tags, idTag) {
			t.Errorf("server %s no nodeclaim names: adopted or collected (%+v)", s.ID, got)
		}
	}
	if got := testutil.ToFloat64(f.owner.Metrics.Adopted); got != 2 {
		t.Errorf("servers_adopted_total = %v, want 2", got)
	}
	if n := count("adopted a server ordered before cluster identities"); n != 2 {
		t.Errorf("%d adoption log lines, want 2", n)
	}
	if got := testutil.ToFloat64(f.owner.Metrics.LeftAlone.WithLabelValues(identity.ReasonNoIdentity)); got != 2 {
		t.Errorf("servers_left_alone{no_identity} = %v, want 2", got)
	}

	f.owner.AdoptAll = true
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	live := f.live(t)
	if live[orphan.ID] || !live[used.ID] || !live[pending.ID] {
		t.Fatalf("with AdoptAll, the orphan should be adopted and collected, the used ones kept: %v", live)
	}
	if got := testutil.ToFloat64(f.owner.Metrics.LeftAlone.WithLabelValues(identity.ReasonNoIdentity)); got != 0 {
		t.Errorf("servers_left_alone{no_identity} = %v after adopting all, want 0", got)
	}
}
