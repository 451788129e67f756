package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/conformance"
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
	checkPlan(t, dir, worldBin, suiteBin)

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

// checkPlan plans the whole suite as `make conformance` does and checks the
// passes partition it: every spec of the suite's dry run runs in exactly one
// pass or is not applicable, every CapacityBuffer spec that applies runs in
// the CapacityBuffer pass with its files and no other spec does, and every
// line of skip.txt names a spec (a stale line would hide nothing but still
// read as a reason).
func checkPlan(t *testing.T, dir, worldBin, suiteBin string) {
	t.Helper()
	o, err := parse([]string{"-dir", filepath.Join(dir, "plan"), "-world", worldBin, "-suite", suiteBin, "-focus", ""}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	skips, err := conformance.ReadSkipFile(o.skipFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	plan, err := planRun(o, skips)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(o.dir, "specs.json"))
	if err != nil {
		t.Fatal(err)
	}
	reports, err := conformance.ReadReport(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	_, specs := conformance.Specs(reports)
	where := map[string][]string{}
	for _, ps := range plan.Passes {
		for _, s := range ps.Specs {
			where[s] = append(where[s], ps.Name)
		}
	}
	for _, n := range plan.NotApplicable {
		where[n.Text] = append(where[n.Text], "not applicable")
	}
	for _, s := range specs {
		if len(where[s]) != 1 {
			t.Errorf("%q is in %q, want exactly one place", s, where[s])
		}
		sized := strings.Contains(s, "CapacityBuffer")
		if got := where[s]; len(got) == 1 && got[0] != "not applicable" && (got[0] == "capacitybuffer") != sized {
			t.Errorf("%q runs in the %s pass", s, got[0])
		}
	}
	if len(where) != len(specs) || plan.OutsideFocus != 0 {
		t.Errorf("%d specs planned, %d outside the focus, of the suite's %d", len(where), plan.OutsideFocus, len(specs))
	}
	for _, k := range skips {
		if !slices.ContainsFunc(plan.NotApplicable, func(n conformance.Spec) bool { return strings.Contains(n.Text, k.Spec) }) {
			t.Errorf("skip.txt line %d names no spec of the suite: %q", k.Line, k.Spec)
		}
	}
	for _, ps := range plan.Passes {
		if ps.Name == "capacitybuffer" && filepath.Base(ps.NodeClass) != "nodeclass-capacitybuffer.yaml" {
			t.Errorf("the capacitybuffer pass runs with %s", ps.NodeClass)
		}
	}
	t.Logf("%d specs: %d not applicable, passes %v", len(specs), len(plan.NotApplicable), func() (n []string) {
		for _, ps := range plan.Passes {
			n = append(n, fmt.Sprintf("%s %d", ps.Name, len(ps.Specs)))
		}
		return n
	}())
}
