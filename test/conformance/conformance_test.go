package conformance

import (
	"os"
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

// TestSkipExpressionIsLiteral: spec texts hold parentheses, dots and
// brackets, which the expression must match as written and nothing more.
func TestSkipExpressionIsLiteral(t *testing.T) {
	skips := []Skip{{Spec: "should drift (Static)"}, {Spec: "host ports [x].y"}}
	re := regexp.MustCompile(SkipExpression(skips))
	for text, want := range map[string]bool{
		"Drift should drift (Static) on image change": true,
		"Drift should drift Static":                   false,
		"Integration host ports [x].y of pods":        true,
		"Integration host ports x-y":                  false,
	} {
		if got := re.MatchString(text); got != want {
			t.Errorf("%q: matched %v, want %v", text, got, want)
		}
	}
	if SkipExpression(nil) != "" {
		t.Error("no skips should give an empty expression")
	}
}

// TestSummarize counts a report with every outcome: passed, failed, skipped
// by skip.txt, skipped by the spec itself, outside the focus, and a failed
// BeforeSuite, which must count as a failure.
func TestSummarize(t *testing.T) {
	it := func(leaf string, state types.SpecState, msg string) types.SpecReport {
		return types.SpecReport{ContainerHierarchyTexts: []string{"NodeClaim", "Standalone"}, LeafNodeText: leaf,
			LeafNodeType: types.NodeTypeIt, State: state, RunTime: time.Second, Failure: types.Failure{Message: msg}}
	}
	reports := []types.Report{{RunTime: time.Minute, SpecReports: types.SpecReports{
		it("creates", types.SpecStatePassed, ""),
		it("deletes", types.SpecStateFailed, "expected\n  1 node"),
		it("times out", types.SpecStateTimedout, "timeout"),
		it("restarts karpenter", types.SpecStateSkipped, ""),
		it("needs k8s 1.28", types.SpecStateSkipped, "only valid for K8s >= 1.28"),
		it("unfocused", types.SpecStateSkipped, ""),
		it("pending", types.SpecStatePending, ""),
		{LeafNodeType: types.NodeTypeBeforeSuite, State: types.SpecStatePassed},
		{LeafNodeType: types.NodeTypeAfterSuite, State: types.SpecStateFailed, Failure: types.Failure{Message: "cleanup"}},
	}}}
	s := Summarize(reports, []Skip{{Spec: "restarts karpenter", Reason: "no Deployment"}})
	if len(s.Passed) != 1 || len(s.Failed) != 3 || len(s.NotApplicable) != 2 || s.OutsideFocus != 2 {
		t.Fatalf("got %d passed, %d failed, %d n/a, %d outside focus; want 1, 3, 2, 2: %+v",
			len(s.Passed), len(s.Failed), len(s.NotApplicable), s.OutsideFocus, s)
	}
	if got, want := s.Line(), "conformance: 1 passed, 3 failed, 2 not applicable (total 6)"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	if s.NotApplicable[1].Reason != "no Deployment" || !strings.Contains(s.NotApplicable[0].Reason, "1.28") {
		t.Errorf("reasons: %+v", s.NotApplicable)
	}
	if !strings.Contains(s.Failed[0].Failure, "expected 1 node") {
		t.Errorf("failure message not on one line: %q", s.Failed[0].Failure)
	}
	var b strings.Builder
	s.Report(&b)
	if !strings.HasSuffix(b.String(), s.Line()+"\n") {
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
