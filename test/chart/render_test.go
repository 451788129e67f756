package chart

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	helmchart "helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/chart/helmrender"
)

// kubeVersion is the Kubernetes release the charts are rendered for (as the
// test apiserver, test/tools/tools.mk KUBE_VERSION).
const kubeVersion = "v1.35.4"

const (
	controllerChart = "charts/karpenter-scaleway-em"
	crdChart        = "charts/karpenter-scaleway-em-crd"
	releaseName     = "karpenter-scaleway-em"
	releaseNS       = "karpenter"
)

// Fake credentials in the formats the controller validates; the tests check
// they never leave the chart's Secret.
const (
	testAccessKey = "SCWABCDEFGHIJ1234567"
	testSecretKey = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
	testProjectID = "11111111-2222-4333-8444-555555555555"
)

// minimalValues is the least a user must set.
const minimalValues = `
clusterName: prod-1
scaleway:
  defaultProjectID: ` + testProjectID + `
  credentials:
    accessKey: ` + testAccessKey + `
    secretKey: ` + testSecretKey + `
`

func repoPath(t testing.TB, rel string) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found above the test directory: %v", err)
	}
	return filepath.Join(root, rel)
}

func loadChart(t testing.TB, rel string) *helmchart.Chart {
	t.Helper()
	c, err := loader.Load(repoPath(t, rel))
	if err != nil {
		t.Fatalf("load %s: %v", rel, err)
	}
	return c
}

// render does what `helm template --kube-version` does: coalesce the values,
// check them against values.schema.json and the chart's kubeVersion, render.
// It returns the objects in file order.
func render(t testing.TB, c *helmchart.Chart, valuesYAML string) ([]*unstructured.Unstructured, error) {
	t.Helper()
	if _, err := chartutil.ReadValues([]byte(valuesYAML)); err != nil {
		t.Fatalf("test values are not YAML: %v", err)
	}
	return helmrender.Render(c, []byte(valuesYAML), helmrender.Release{Name: releaseName, Namespace: releaseNS, KubeVersion: kubeVersion})
}

func mustRender(t testing.TB, c *helmchart.Chart, valuesYAML string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := render(t, c, valuesYAML)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return objs
}

// decodeObjects reads a multi-document YAML stream; empty documents are skipped.
func decodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	return helmrender.Objects(data)
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			return o
		}
	}
	return nil
}

func mustFind(t testing.TB, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	o := find(objs, kind, name)
	if o == nil {
		t.Fatalf("no %s %q rendered; got %s", kind, name, describe(objs))
	}
	return o
}

func describe(objs []*unstructured.Unstructured) string {
	var s []string
	for _, o := range objs {
		s = append(s, o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName())
	}
	return strings.Join(s, ", ")
}

func count(objs []*unstructured.Unstructured, kind string) int {
	n := 0
	for _, o := range objs {
		if o.GetKind() == kind {
			n++
		}
	}
	return n
}

// container returns the Deployment's controller container.
func container(t testing.TB, objs []*unstructured.Unstructured) map[string]any {
	t.Helper()
	d := mustFind(t, objs, "Deployment", releaseName)
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(cs) != 1 {
		t.Fatalf("want 1 container, got %d", len(cs))
	}
	return cs[0].(map[string]any)
}

// envVar returns the container's variable: its plain value, or the
// secretKeyRef "secret/key", or "" and false.
func envVar(c map[string]any, name string) (value, secretRef string, ok bool) {
	env, _ := c["env"].([]any)
	for _, e := range env {
		m := e.(map[string]any)
		if m["name"] != name {
			continue
		}
		if v, has := m["value"]; has {
			s, _ := v.(string)
			return s, "", true
		}
		ref, _, _ := unstructured.NestedMap(m, "valueFrom", "secretKeyRef")
		if ref != nil {
			name, _ := ref["name"].(string)
			key, _ := ref["key"].(string)
			return "", name + "/" + key, true
		}
		return "", "", true
	}
	return "", "", false
}

// rules returns a Role's or ClusterRole's rules.
func rules(t testing.TB, o *unstructured.Unstructured) []map[string]any {
	t.Helper()
	rs, _, _ := unstructured.NestedSlice(o.Object, "rules")
	out := make([]map[string]any, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.(map[string]any))
	}
	return out
}

func strs(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// grants reports whether some rule of o gives verb on resource (no resourceNames restriction unless name matches).
func grants(t testing.TB, o *unstructured.Unstructured, group, resource, verb, name string) bool {
	t.Helper()
	for _, r := range rules(t, o) {
		if !slices.Contains(strs(r["apiGroups"]), group) || !slices.Contains(strs(r["resources"]), resource) || !slices.Contains(strs(r["verbs"]), verb) {
			continue
		}
		names := strs(r["resourceNames"])
		if len(names) == 0 || slices.Contains(names, name) {
			return true
		}
	}
	return false
}
