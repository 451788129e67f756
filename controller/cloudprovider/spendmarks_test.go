package cloudprovider

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
)

func limitedNodeClass(name, hourly string) *v1alpha1.ScalewayElasticMetalNodeClass {
	return &v1alpha1.ScalewayElasticMetalNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ScalewayElasticMetalNodeClassSpec{Limits: &v1alpha1.LimitsSpec{HourlySpend: hourly}}}
}

func hourlyOffering(zone string) *cloudprovider.Offering {
	return &cloudprovider.Offering{Available: true, Price: 0.5, Requirements: scheduling.NewRequirements(
		scheduling.NewRequirement(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, zone),
		scheduling.NewRequirement(catalog.LabelBillingPeriod, corev1.NodeSelectorOpIn, string(catalog.BillingHourly)))}
}

// An offering set aside at one NodeClass's spend limit stays available to
// the others, comes back as soon as that NodeClass's limits change, and the
// catalogue's shared instance types are never changed in place.
func TestSpendMarksAreTheNodeClasssOwn(t *testing.T) {
	now := time.Now()
	its := []*cloudprovider.InstanceType{{Name: "EM-A116X-SSD", Offerings: cloudprovider.Offerings{hourlyOffering("fr-par-1"), hourlyOffering("fr-par-2")}}}
	available := func(its []*cloudprovider.InstanceType, zone string) bool {
		for _, of := range its[0].Offerings {
			if offeringZone(of) == zone {
				return of.Available
			}
		}
		t.Fatalf("no offering in %s", zone)
		return false
	}
	a, b := limitedNodeClass("a", "1"), limitedNodeClass("b", "1")
	var marks spendMarks
	marks.mark(a, "fr-par-1", "EM-A116X-SSD", catalog.BillingHourly, now)

	got := marks.apply(a, its, now)
	if available(got, "fr-par-1") || !available(got, "fr-par-2") {
		t.Error("nodeclass a: want fr-par-1 set aside, fr-par-2 available")
	}
	if !available(its, "fr-par-1") {
		t.Fatal("the shared instance type was changed in place")
	}
	if !available(marks.apply(b, its, now), "fr-par-1") {
		t.Error("nodeclass b lost the offering to a's spend limit")
	}
	raised := limitedNodeClass("a", "5")
	if !available(marks.apply(raised, its, now), "fr-par-1") {
		t.Error("raising a's limit did not bring the offering back")
	}
	if !available(marks.apply(a, its, now.Add(spendMarkTTL)), "fr-par-1") {
		t.Error("the mark outlived its TTL")
	}
}
