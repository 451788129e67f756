package chart

import (
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/build/ociimage"
)

// TestDefaultImageIsTheBuiltOne: with default values the Deployment runs
// the reference `make image` names the controller image (and
// `make image-push REGISTRY=ghcr.io/karpenter-scaleway-em` pushes): the same
// repository, tagged with the chart's appVersion. build/ociimage's tests
// check the built layout carries that name.
func TestDefaultImageIsTheBuiltOne(t *testing.T) {
	c := loadChart(t, controllerChart)
	version, err := ociimage.ChartVersion(repoPath(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	if version != c.Metadata.AppVersion {
		t.Fatalf("ociimage.ChartVersion = %q, the chart's appVersion is %q", version, c.Metadata.AppVersion)
	}
	want, err := ociimage.Controller.Reference(ociimage.DefaultRegistry, version)
	if err != nil {
		t.Fatal(err)
	}
	if got := container(t, mustRender(t, c, minimalValues))["image"]; got != want.String() {
		t.Errorf("chart's default image %v, make image builds %s", got, want)
	}
}
