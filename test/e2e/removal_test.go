package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/e2e/harness"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/live"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// The uninstall order of docs/uninstall.md on two NodeClasses with a spare
// each: the NodePools go, then the NodeClasses, whose finalizer releases
// one's spare and hands the other's over (sparesOnDeletion: Keep). Nothing
// is left tagged as the cluster's, which smoke-live's server check (the
// documented command) confirms.
func TestNodeClassDeletionEndsItsSpares(t *testing.T) {
	e := harness.Start(t, harness.Setup{NoNodePool: true})
	monthly := corev1.NodeSelectorRequirement{Key: catalog.LabelBillingPeriod, Operator: corev1.NodeSelectorOpIn, Values: []string{"monthly"}}
	for name, onDeletion := range map[string]string{"release": "", "keep": v1alpha1.SparesKeep} {
		nc := e.W.NodeClass(name)
		nc.Spec.Billing = v1alpha1.BillingSpec{Periods: []string{"monthly"}, MinimumLifetime: &metav1.Duration{Duration: time.Hour},
			SparesOnDeletion: onDeletion}
		if err := e.W.Apply(e.Ctx, nc, e.W.NodePool(name, name, monthly)); err != nil {
			t.Fatal(err)
		}
		e.WaitNodeClassReady(name)
		wl := e.W.RunWorkloadOn(harness.Namespace, name+"-app", 1, "3", "1Gi", map[string]string{"karpenter.sh/nodepool": name})
		t.Cleanup(wl.Stop)
		e.WaitBound(name+"-app", 1, harness.WaitLong)
		if err := wl.Scale(e.Ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	spareOf := map[string]string{}
	e.Eventually("both monthly servers kept as spares once their nodes are consolidated", harness.WaitLong, func() (bool, string) {
		for _, s := range e.W.Sim.Servers() {
			if world.TagValue(s.Tags, world.TagPhase) == "spare" {
				spareOf[world.TagValue(s.Tags, scaleway.TagNodeClass)] = s.ID
			}
		}
		return len(spareOf) == 2, fmt.Sprintf("spares %v; %s", spareOf, e.Summary())
	})

	// docs/uninstall.md: NodePools, then NodeClasses (the finalizer), then the chart.
	for _, name := range []string{"release", "keep"} {
		if err := e.W.Kube.Client.Delete(e.Ctx, e.W.NodePool(name, name)); err != nil {
			t.Fatal(err)
		}
	}
	e.Eventually("no nodeclaim left", harness.WaitLong, func() (bool, string) {
		return len(e.NodeClaims()) == 0, e.Summary()
	})
	for _, name := range []string{"release", "keep"} {
		if err := e.W.Kube.Client.Delete(e.Ctx, e.W.NodeClass(name)); err != nil {
			t.Fatal(err)
		}
	}
	e.Eventually("both nodeclasses gone (their finalizer done)", harness.WaitLong, func() (bool, string) {
		var left []string
		for _, name := range []string{"release", "keep"} {
			if err := e.W.Kube.Client.Get(e.Ctx, types.NamespacedName{Name: name}, e.W.NodeClass(name)); err == nil {
				left = append(left, name)
			}
		}
		return len(left) == 0, fmt.Sprintf("still there: %v", left)
	})

	if s, ok := e.W.Sim.Server(spareOf["release"]); ok && s.Status != string(baremetal.ServerStatusDeleting) {
		t.Errorf("the spare of nodeclass release was not released: %s %v", s.Status, s.Tags)
	}
	kept, ok := e.W.Sim.Server(spareOf["keep"])
	if !ok || kept.Status == string(baremetal.ServerStatusDeleting) {
		t.Fatalf("the spare of nodeclass keep was released")
	}
	if world.TagValue(kept.Tags, world.TagManagedBy) != "" || world.TagValue(kept.Tags, world.TagClusterID) != "" ||
		world.TagValue(kept.Tags, scaleway.TagHandedOverBy) != e.W.ClusterName {
		t.Errorf("handed-over server tags %v: want no cluster tags and %s=%s", kept.Tags, scaleway.TagHandedOverBy, e.W.ClusterName)
	}
	for _, s := range e.W.Sim.Servers() {
		if s.Status != string(baremetal.ServerStatusDeleting) && world.TagValue(s.Tags, world.TagManagedBy) != "" {
			t.Errorf("server %s still tagged as the cluster's: %v", s.ID, s.Tags)
		}
	}
	for name, want := range map[string]string{"release": "SparesReleased", "keep": "SparesHandedOver"} {
		evs, err := e.W.Clientset.CoreV1().Events("default").List(e.Ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, ev := range evs.Items {
			found = found || ev.Reason == want
		}
		if !found {
			t.Errorf("no %s event on nodeclass %s", want, name)
		}
	}

	// The documented check: smoke-live's server listing, read-only.
	c, err := scaleway.New(scaleway.Config{AccessKey: "SCWSIMULATED00000000", SecretKey: e.W.Sim.SecretKey(),
		ProjectID: e.W.Sim.Options().ProjectID, APIURL: e.W.SimURL, DefaultZone: scw.ZoneFrPar2},
		scaleway.WithTransport(live.ReadOnly(http.DefaultTransport)))
	if err != nil {
		t.Fatal(err)
	}
	r := live.Run(e.Ctx, c, live.Options{Zones: []scw.Zone{scw.ZoneFrPar2}, Cluster: e.W.ClusterName})
	var out bytes.Buffer
	r.Print(&out)
	t.Logf("smoke-live after the uninstall:\n%s", out.String())
	for _, want := range []string{"0 servers tagged karpenter.sh/managed-by=" + e.W.ClusterName,
		"1 servers tagged karpenter-scaleway-em/handed-over-by=" + e.W.ClusterName} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("smoke-live does not say %q", want)
		}
	}
}
