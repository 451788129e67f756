package garbagecollection

import (
	"context"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// An hourly warm-pool server is idle by design: the collector leaves it to
// the pool while the pool wants it, and releases it (an hourly spare) once
// the NodeClass's pool no longer does.
func TestHourlyWarmPoolServerIsLeftToThePoolWhileWanted(t *testing.T) {
	nc := nodeClassNamed("nc", string(zone))
	nc.Spec.WarmPool = []v1alpha1.WarmPoolEntry{{Offer: "EM-A116X-SSD", Servers: 1}}
	f := setup(t, nc)
	srv := f.orderIn(t, zone, "hourly", scaleway.Tag(scaleway.TagNodeClass, "nc"), scaleway.Tag(scaleway.TagPhase, "spare"),
		scaleway.Tag(scaleway.TagWarmPool, "true"), scaleway.Tag(scaleway.TagWarmPoolSlot, "nc/fr-par-2/EM-A116X-SSD/hourly/0"))
	f.clk.Step(11 * time.Minute)
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !f.live(t)[srv.ID] {
		t.Fatal("the collector released an hourly warm-pool server the pool wants")
	}

	nc.Spec.WarmPool = nil
	if err := f.gc.Kube.Update(context.Background(), nc); err != nil {
		t.Fatal(err)
	}
	if _, err := f.gc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.live(t)[srv.ID] {
		t.Fatal("an hourly warm-pool server nobody wants was kept")
	}
}
