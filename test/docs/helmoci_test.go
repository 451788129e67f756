package docs

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/build/chartpkg"
)

// TestDocsHelmOCIChartReference checks the helm stand-in's push and oci://
// install the way install.md uses them, against an OCI registry in the
// test: the chart comes back by the documented reference and version, and
// a wrong chart name, a wrong version or a reference whose tag contradicts
// --version fails, so a stale command line in the docs fails TestDocs.
func TestDocsHelmOCIChartReference(t *testing.T) {
	t.Setenv("HOME", t.TempDir()) // helm's credentials files
	reg := docsRegistry(t)
	archives, err := chartpkg.Package(t.TempDir(), filepath.Join(root(t), "charts/karpenter-scaleway-em-crd"), filepath.Join(root(t), "charts/karpenter-scaleway-em"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range archives {
		if err := runHelm(t.Context(), []string{"push", a, "oci://" + reg + "/charts"}); err != nil {
			t.Fatalf("helm push %s: %v", a, err)
		}
	}
	c, err := locateChart("oci://"+reg+"/charts/karpenter-scaleway-em", "0.1.0")
	if err != nil {
		t.Fatalf("the documented reference: %v", err)
	}
	if c.Name() != "karpenter-scaleway-em" || c.Metadata.Version != "0.1.0" {
		t.Fatalf("pulled %s %s, want karpenter-scaleway-em 0.1.0", c.Name(), c.Metadata.Version)
	}
	for _, tc := range []struct{ ref, version, want string }{
		{"oci://" + reg + "/charts/karpenter-scaleway-em", "0.2.0", "0.2.0"},
		{"oci://" + reg + "/charts/karpenter-scaleway", "0.1.0", "karpenter-scaleway"},
		{"oci://" + reg + "/karpenter-scaleway-em", "0.1.0", "karpenter-scaleway-em"},
		{"oci://" + reg + "/charts/karpenter-scaleway-em:0.1.0", "0.2.0", "mismatch"},
	} {
		if _, err := locateChart(tc.ref, tc.version); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s --version %s: %v, want an error naming %q", tc.ref, tc.version, err, tc.want)
		}
	}
	// helm push refuses a directory: the docs push the archives.
	if err := runHelm(t.Context(), []string{"push", filepath.Join(root(t), "charts/karpenter-scaleway-em"), "oci://" + reg + "/charts"}); err == nil {
		t.Error("helm push of a chart directory succeeded")
	}
}
