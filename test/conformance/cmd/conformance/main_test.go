package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// subsetFocus is the part of the regression suite `make test` runs: the
// NodePool validation specs and the NodePool hash, which make no node and
// together take about a minute with the world's start. `make conformance`
// runs everything (docs/conformance.md).
const subsetFocus = `Integration (Validation NodePool|CRD Hash)`

// TestRegressionSubset runs `make conformance`'s entry point on the subset:
// the world started without defaults, the suite built from the pinned
// Karpenter module, the summary line read from its report.
func TestRegressionSubset(t *testing.T) {
	dir := t.TempDir()
	worldBin, suiteBin := filepath.Join(dir, "run-world"), filepath.Join(dir, "regression.test")
	for _, args := range [][]string{
		{"build", "-o", worldBin, "github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world/cmd/world"},
		{"test", "-c", "-o", suiteBin, "sigs.k8s.io/karpenter/test/suites/regression"},
	} {
		cmd := exec.Command("go", args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var out bytes.Buffer
	t0 := time.Now()
	code := run(ctx, []string{"-dir", filepath.Join(dir, "run"), "-world", worldBin, "-suite", suiteBin, "-focus", subsetFocus}, &out, &out)
	t.Logf("subset ran in %s", time.Since(t0).Round(time.Second))
	m := regexp.MustCompile(`(?m)^conformance: (\d+) passed, (\d+) failed, (\d+) not applicable \(total (\d+)\)$`).FindSubmatch(out.Bytes())
	if code != 0 || m == nil {
		if b, err := os.ReadFile(filepath.Join(dir, "run", "world.log")); err == nil {
			t.Logf("world.log:\n%s", b)
		}
		t.Fatalf("exit %d, summary %q; output:\n%s", code, m, out.String())
	}
	// 17 NodePool validation specs and the hash spec at v1.14.1: fewer means
	// the focus no longer selects what it should.
	if passed, _ := strconv.Atoi(string(m[1])); passed < 18 || string(m[2]) != "0" {
		t.Fatalf("%s; want at least 18 passed and 0 failed; output:\n%s", m[0], out.String())
	}
	t.Log(string(m[0]))
}
