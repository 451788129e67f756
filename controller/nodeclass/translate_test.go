package nodeclass_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/nodeclass"
)

// A NodePool that names no architecture still only gets offers em-imager can
// install: the catalogue's cheapest offer is a RISC-V board.
func TestFilterOffersOnlyTheImagesArchitecture(t *testing.T) {
	cat := catalog.New(catalog.Options{})
	all, err := cat.InstanceTypes(context.Background(), catalog.Filter{Zones: []string{"fr-par-2"}})
	if err != nil {
		t.Fatal(err)
	}
	riscv := 0
	for _, it := range all {
		if it.Requirements.Get(corev1.LabelArchStable).Has(catalog.ArchitectureRiscv64) {
			riscv++
		}
	}
	if riscv == 0 {
		t.Fatal("no riscv64 offer in fr-par-2: the test shows nothing")
	}
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{Spec: v1alpha1.ScalewayElasticMetalNodeClassSpec{Zones: []string{"fr-par-2"}}}
	its, err := cat.InstanceTypes(context.Background(), nodeclass.Filter(nc, "fr-par-2"))
	if err != nil {
		t.Fatal(err)
	}
	if len(its) == 0 || len(its) != len(all)-riscv {
		t.Errorf("%d instance types for the NodeClass, want the %d amd64 ones of %d", len(its), len(all)-riscv, len(all))
	}
	for _, it := range its {
		if a := it.Requirements.Get(corev1.LabelArchStable).Any(); a != "amd64" {
			t.Errorf("%s (%s) offered for an amd64 image", it.Name, a)
		}
	}
}
