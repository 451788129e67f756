package conformance

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"
	"k8s.io/apimachinery/pkg/api/equality"
	ktypes "k8s.io/apimachinery/pkg/types"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

func TestParseSkips(t *testing.T) {
	in := `# comment

Chaos should not produce a runaway scale-up :: the suite restarts kube-system/karpenter
  Drift should drift (Static) :: no static capacity
`
	skips, err := ParseSkips(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Skip{
		{Spec: "Chaos should not produce a runaway scale-up", Reason: "the suite restarts kube-system/karpenter", Line: 3},
		{Spec: "Drift should drift (Static)", Reason: "no static capacity", Line: 4},
	}
	if len(skips) != len(want) {
		t.Fatalf("got %+v, want %+v", skips, want)
	}
	for i := range want {
		if skips[i] != want[i] {
			t.Errorf("skip %d: got %+v, want %+v", i, skips[i], want[i])
		}
	}
	for name, bad := range map[string]string{
		"no reason":    "Chaos should not produce a runaway scale-up\n",
		"empty reason": "Chaos should not produce a runaway scale-up :: \n",
		"empty spec":   " :: a reason\n",
		"duplicate":    "a :: one\na :: two\n",
	} {
		if _, err := ParseSkips(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: %q parsed without an error", name, bad)
		}
	}
}

// TestFocusIsLiteral: spec texts hold parentheses, dots and brackets; a
// pass's focus must select its specs as written, whole, and nothing more.
func TestFocusIsLiteral(t *testing.T) {
	p := Plan{Description: "Regression"}
	re := regexp.MustCompile(p.Focus(Pass{Specs: []string{"Drift should drift (Static)", "Integration host ports [x].y"}}))
	for text, want := range map[string]bool{
		"Regression Drift should drift (Static)":               true,
		"Regression Drift should drift Static":                 false,
		"Regression Drift should drift (Static) on image edit": false,
		"Regression Integration host ports [x].y":              true,
		"Regression Integration host ports x-y":                false,
		"Drift should drift (Static)":                          false,
	} {
		if got := re.MatchString(text); got != want {
			t.Errorf("%q: matched %v, want %v", text, got, want)
		}
	}
}

// TestMakePlan: every spec lands in exactly one place (a pass, not
// applicable, outside the focus); a sized spec in its sizing's pass with
// its files; an empty pass is left out; a skip outside the focus is not
// counted.
func TestMakePlan(t *testing.T) {
	specs := []string{
		"Integration Validation NodePool should error on a bad label",
		"Integration DaemonSet host ports arm64",
		"CapacityBuffer Lifecycle should scale down",
		"CapacityBuffer NodePool Limits should not go beyond",
		"Drift Budgets should respect budgets",
		"StaticCapacity Provisioning should create static NodeClaim",
	}
	skips := []Skip{{Spec: "host ports arm64", Reason: "no arm64"}, {Spec: "CapacityBuffer NodePool Limits", Reason: "4 CPUs"}}
	def := Pass{Name: "default", NodeClass: "nc.yaml", NodePool: "np.yaml"}
	sizings := []Sizing{{Spec: "CapacityBuffer", NodeClass: "nc-cb.yaml", NodePool: "np-cb.yaml"}}

	p := MakePlan("Regression", specs, nil, skips, def, sizings, "conformance")
	if len(p.Passes) != 2 || p.Passes[0].Name != "default" || p.Passes[1].NodeClass != filepath.Join("conformance", "nc-cb.yaml") {
		t.Fatalf("passes %+v", p.Passes)
	}
	if got, want := p.Passes[1].Specs, []string{"CapacityBuffer Lifecycle should scale down"}; !reflect.DeepEqual(got, want) {
		t.Errorf("capacitybuffer pass %q, want %q", got, want)
	}
	if got := len(p.Passes[0].Specs); got != 3 {
		t.Errorf("default pass %q, want the 3 other applicable specs", p.Passes[0].Specs)
	}
	if len(p.NotApplicable) != 2 || p.OutsideFocus != 0 {
		t.Errorf("n/a %+v, outside %d", p.NotApplicable, p.OutsideFocus)
	}
	if n := planned(p); n != len(specs) {
		t.Errorf("%d of %d specs planned", n, len(specs))
	}

	// Ginkgo matches a focus against the suite's description and the text.
	p = MakePlan("Regression", specs, regexp.MustCompile(`^Regression (Drift|Integration Validation)`), skips, def, sizings, "conformance")
	if len(p.Passes) != 1 || len(p.Passes[0].Specs) != 2 || len(p.NotApplicable) != 0 || p.OutsideFocus != 4 {
		t.Errorf("focused plan: %+v", p)
	}
	if n := planned(p); n != len(specs) {
		t.Errorf("focused: %d of %d specs planned", n, len(specs))
	}
	p = MakePlan("Regression", specs, regexp.MustCompile(`CapacityBuffer`), skips, def, sizings, "conformance")
	if len(p.Passes) != 1 || p.Passes[0].Name != "capacitybuffer" || len(p.NotApplicable) != 1 {
		t.Errorf("CapacityBuffer focus: %+v", p)
	}
}

// TestShard: shards keep every spec of a pass exactly once, with the pass's
// files, and deal each group of specs across them.
func TestShard(t *testing.T) {
	p := Plan{Passes: []Pass{
		{Name: "default", NodeClass: "nc.yaml", Specs: []string{"B 1", "A 1", "A 2", "B 2", "A 3"}},
		{Name: "capacitybuffer", NodeClass: "nc-cb.yaml", Specs: []string{"C 1"}},
	}}
	if got := p.Shard(1, nil); !reflect.DeepEqual(got, p) {
		t.Errorf("Shard(1) changed the plan: %+v", got)
	}
	got := p.Shard(2, nil)
	want := []Pass{
		{Name: "default-1", NodeClass: "nc.yaml", Specs: []string{"A 1", "A 3", "B 2"}},
		{Name: "default-2", NodeClass: "nc.yaml", Specs: []string{"A 2", "B 1"}},
		{Name: "capacitybuffer-1", NodeClass: "nc-cb.yaml", Specs: []string{"C 1"}},
	}
	if !reflect.DeepEqual(got.Passes, want) {
		t.Errorf("Shard(2):\n%+v\nwant\n%+v", got.Passes, want)
	}
	if len(p.Passes[0].Specs) != 5 || p.Passes[0].Specs[0] != "B 1" {
		t.Errorf("Shard changed the plan it was given: %+v", p.Passes[0])
	}
}

// TestShardByDurations: with an earlier run's durations, the longest specs
// go first, each to the shard with the least time so far, and a spec
// without a duration counts for the mean; the shards end near the total
// divided by their number, where dealing in turn leaves one with both long
// specs.
func TestShardByDurations(t *testing.T) {
	p := Plan{Passes: []Pass{{Name: "default", Specs: []string{"A long", "B long", "C", "D", "E", "F new"}}}}
	took := map[string]time.Duration{"A long": 12 * time.Minute, "B long": 6 * time.Minute,
		"C": 2 * time.Minute, "D": 3 * time.Minute, "E": time.Minute, "gone": time.Hour}
	got := p.Shard(2, took)
	want := []Pass{
		{Name: "default-1", Specs: []string{"A long", "C"}},               // 14m
		{Name: "default-2", Specs: []string{"B long", "D", "E", "F new"}}, // 14m48s: F counts for the mean, 4m48s
	}
	if !reflect.DeepEqual(got.Passes, want) {
		t.Errorf("Shard(2) by durations:\n%+v\nwant\n%+v", got.Passes, want)
	}
	if rr := p.Shard(2, nil); reflect.DeepEqual(rr.Passes, want) {
		t.Errorf("without durations the specs are dealt in turn, got the same shards: %+v", rr.Passes)
	}
}

// TestDurations reads how long each spec that ran took from a report: a
// spec skipped or never reached has no duration, a failed one has.
func TestDurations(t *testing.T) {
	it := func(leaf string, state types.SpecState, d time.Duration) types.SpecReport {
		return types.SpecReport{ContainerHierarchyTexts: []string{"Drift"}, LeafNodeText: leaf,
			LeafNodeType: types.NodeTypeIt, State: state, RunTime: d}
	}
	got := Durations([]types.Report{{SpecReports: types.SpecReports{
		it("passes", types.SpecStatePassed, time.Minute),
		it("fails", types.SpecStateFailed, 2*time.Minute),
		it("times out", types.SpecStateTimedout, 3*time.Minute),
		it("skipped", types.SpecStateSkipped, 0),
		{LeafNodeType: types.NodeTypeAfterSuite, State: types.SpecStatePassed, RunTime: time.Hour},
	}}})
	want := map[string]time.Duration{"Drift passes": time.Minute, "Drift fails": 2 * time.Minute, "Drift times out": 3 * time.Minute}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Durations = %v, want %v", got, want)
	}
}

func planned(p Plan) int {
	n := len(p.NotApplicable) + p.OutsideFocus
	for _, ps := range p.Passes {
		n += len(ps.Specs)
	}
	return n
}

// TestOutcome counts a pass's report with every outcome: passed, failed,
// timed out, skipped by the spec itself, not reached, a planned spec missing
// from the report, and a failed AfterSuite, which must count as a failure.
func TestOutcome(t *testing.T) {
	it := func(leaf string, state types.SpecState, msg string) types.SpecReport {
		return types.SpecReport{ContainerHierarchyTexts: []string{"NodeClaim", "Standalone"}, LeafNodeText: leaf,
			LeafNodeType: types.NodeTypeIt, State: state, RunTime: time.Second, Failure: types.Failure{Message: msg}}
	}
	reports := []types.Report{{RunTime: time.Minute, SpecReports: types.SpecReports{
		it("creates", types.SpecStatePassed, ""),
		it("deletes", types.SpecStateFailed, "expected\n  1 node"),
		it("times out", types.SpecStateTimedout, "timeout"),
		it("needs k8s 1.28", types.SpecStateSkipped, "only valid for K8s >= 1.28"),
		it("not reached", types.SpecStateSkipped, ""),
		{LeafNodeType: types.NodeTypeBeforeSuite, State: types.SpecStatePassed},
		{LeafNodeType: types.NodeTypeAfterSuite, State: types.SpecStateFailed, Failure: types.Failure{Message: "cleanup"}},
	}}}
	var ps Pass
	ps.Name = "default"
	for _, l := range []string{"creates", "deletes", "times out", "needs k8s 1.28", "not reached", "lost"} {
		ps.Specs = append(ps.Specs, "NodeClaim Standalone "+l)
	}
	s := ps.Outcome(reports)
	if len(s.Passed) != 1 || len(s.Failed) != 5 || len(s.NotApplicable) != 1 {
		t.Fatalf("got %d passed, %d failed, %d n/a; want 1, 5, 1: %+v", len(s.Passed), len(s.Failed), len(s.NotApplicable), s)
	}
	if !strings.Contains(s.NotApplicable[0].Reason, "1.28") {
		t.Errorf("reasons: %+v", s.NotApplicable)
	}
	var notRun []string
	for _, f := range s.Failed {
		if strings.HasPrefix(f.Failure, "not run") {
			notRun = append(notRun, f.Text)
		}
		if f.Text == "NodeClaim Standalone deletes" && !strings.Contains(f.Failure, "expected 1 node") {
			t.Errorf("failure message not on one line: %q", f.Failure)
		}
	}
	if want := []string{"NodeClaim Standalone lost", "NodeClaim Standalone not reached"}; !reflect.DeepEqual(notRun, want) {
		t.Errorf("not run %q, want %q", notRun, want)
	}

	// Passes add up into the one line, with the plan's not applicable.
	sum := Summary{NotApplicable: []Spec{{Text: "arm64", Reason: "no arm64"}}}
	sum.Add(s)
	sum.Add(Pass{Name: "capacitybuffer", Specs: []string{"CapacityBuffer a"}}.Outcome(nil))
	if got, want := sum.Line(), "conformance: 1 passed, 6 failed, 2 not applicable (total 9)"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	var b strings.Builder
	sum.Report(&b)
	if !strings.HasSuffix(b.String(), sum.Line()+"\n") {
		t.Errorf("report does not end with the summary line:\n%s", b.String())
	}
}

// TestSkipFile: skip.txt parses, so every spec it skips has a reason.
func TestSkipFile(t *testing.T) {
	if _, err := ReadSkipFile("skip.txt"); err != nil {
		t.Fatal(err)
	}
}

// TestNodeClassMatchesTheWorld: nodeclass.yaml is the NodeClass `make
// world` applies (its bucket, image and join Secret), so a change to the
// world's defaults shows here rather than as a suite whose nodes never come.
func TestNodeClassMatchesTheWorld(t *testing.T) {
	b, err := os.ReadFile("nodeclass.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var nc v1alpha1.ScalewayElasticMetalNodeClass
	if err := yaml.UnmarshalStrict(b, &nc); err != nil {
		t.Fatalf("nodeclass.yaml: %v", err)
	}
	w := &world.World{Bucket: world.DefaultBucket, Prefix: world.DefaultPrefix,
		Opts:       world.Options{SchematicID: world.SchematicID, TalosVersion: world.DefaultTalosVersion},
		JoinSecret: ktypes.NamespacedName{Namespace: world.DefaultSystemNamespace, Name: world.JoinSecretName}}
	want := w.NodeClass(nc.Name)
	if nc.TypeMeta != want.TypeMeta {
		t.Errorf("nodeclass.yaml is a %v, the world's NodeClass a %v", nc.TypeMeta, want.TypeMeta)
	}
	if !equality.Semantic.DeepEqual(nc.Spec, want.Spec) {
		t.Errorf("nodeclass.yaml's spec\n%+v\nis not the world's\n%+v", nc.Spec, want.Spec)
	}

	b, err = os.ReadFile("nodepool.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var np karpv1.NodePool
	if err := yaml.UnmarshalStrict(b, &np); err != nil {
		t.Fatalf("nodepool.yaml: %v", err)
	}
	ref := np.Spec.Template.Spec.NodeClassRef
	if ref == nil || ref.Group != v1alpha1.SchemeGroupVersion.Group || ref.Kind != want.Kind || ref.Name != nc.Name {
		t.Errorf("nodepool.yaml's nodeClassRef %+v does not name nodeclass.yaml's NodeClass", ref)
	}
}

// TestCapacityBufferFilesDifferOnlyBySize: the CapacityBuffer NodeClass and
// NodePool are copies of the default ones (the conformance command takes
// whole files) that differ only in what sizes a node like the suite's
// 2-CPU ones: the kubelet's CPU reservation and the instance types.
func TestCapacityBufferFilesDifferOnlyBySize(t *testing.T) {
	var base, small v1alpha1.ScalewayElasticMetalNodeClass
	readStrict(t, "nodeclass.yaml", &base)
	readStrict(t, "nodeclass-capacitybuffer.yaml", &small)
	if small.Spec.Kubelet == nil || small.Spec.Kubelet.KubeReserved["cpu"] == "" {
		t.Fatal("nodeclass-capacitybuffer.yaml reserves no kubelet CPU")
	}
	small.Spec.Kubelet = base.Spec.Kubelet
	if small.ObjectMeta.Name != base.ObjectMeta.Name || !equality.Semantic.DeepEqual(small.Spec, base.Spec) {
		t.Errorf("nodeclass-capacitybuffer.yaml differs from nodeclass.yaml beyond spec.kubelet:\n%+v\n%+v", small.Spec, base.Spec)
	}

	var basePool, smallPool karpv1.NodePool
	readStrict(t, "nodepool.yaml", &basePool)
	readStrict(t, "nodepool-capacitybuffer.yaml", &smallPool)
	reqs := smallPool.Spec.Template.Spec.Requirements
	if len(reqs) == 0 || reqs[len(reqs)-1].Key != "node.kubernetes.io/instance-type" {
		t.Fatalf("nodepool-capacitybuffer.yaml's last requirement is not the instance types: %+v", reqs)
	}
	smallPool.Spec.Template.Spec.Requirements = reqs[:len(reqs)-1]
	if !equality.Semantic.DeepEqual(smallPool, basePool) {
		t.Errorf("nodepool-capacitybuffer.yaml differs from nodepool.yaml beyond the instance-type requirement:\n%+v\n%+v", smallPool, basePool)
	}
}

func readStrict(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
