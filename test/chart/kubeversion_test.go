package chart

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
)

// TestChartKubeVersionMatchesCompatibilityMatrix: both charts install on
// exactly the control planes docs/upgrade.md's compatibility matrix supports,
// so Helm refuses a cluster the docs do not (and accepts every one they do).
func TestChartKubeVersionMatchesCompatibilityMatrix(t *testing.T) {
	doc, err := os.ReadFile(repoPath(t, "docs/upgrade.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`\| Kubernetes \(control plane\) \| \*\*1\.(\d+) to 1\.(\d+)\*\*`).FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/upgrade.md: no \"| Kubernetes (control plane) | **1.X to 1.Y**\" row in the compatibility matrix")
	}
	lo, _ := strconv.Atoi(string(m[1]))
	hi, _ := strconv.Atoi(string(m[2]))
	want := fmt.Sprintf(">=1.%d.0-0 <1.%d.0-0", lo, hi+1)
	for _, dir := range []string{controllerChart, crdChart} {
		c := loadChart(t, dir)
		if c.Metadata.KubeVersion != want {
			t.Errorf("%s: kubeVersion %q, want %q (docs/upgrade.md supports 1.%d to 1.%d)", dir, c.Metadata.KubeVersion, want, lo, hi)
			continue
		}
		for v, ok := range map[string]bool{
			fmt.Sprintf("v1.%d.0", lo): true, fmt.Sprintf("v1.%d.99", hi): true, fmt.Sprintf("v1.%d.3-gke.100", hi): true,
			fmt.Sprintf("v1.%d.9", lo-1): false, fmt.Sprintf("v1.%d.0", hi+1): false, fmt.Sprintf("v1.%d.0-rc.1", hi+1): false,
		} {
			if got := chartutil.IsCompatibleRange(c.Metadata.KubeVersion, v); got != ok {
				t.Errorf("%s: Kubernetes %s accepted %v, want %v", dir, v, got, ok)
			}
		}
	}
}
