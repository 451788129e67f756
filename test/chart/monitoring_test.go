package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/monitoring/dashboard"
)

const monitoringValues = minimalValues + `
prometheusRule: {enabled: true}
dashboards: {enabled: true}
`

// promtool is Debian's (package prometheus, installed by `make deps`).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: `make deps` installs Debian's prometheus package")
	}
	return p
}

// ruleFile is the PrometheusRule's spec as a Prometheus rule file.
func ruleFile(t *testing.T, rule *unstructured.Unstructured) []byte {
	t.Helper()
	groups, ok, err := unstructured.NestedSlice(rule.Object, "spec", "groups")
	if err != nil || !ok {
		t.Fatalf("PrometheusRule without spec.groups: %v", err)
	}
	b, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// promtoolDir writes the rule's spec as rules.yaml and the alerts' unit tests
// as alerts-test.yaml into a new directory, for promtool to run in; it
// returns the directory and the tests.
func promtoolDir(t *testing.T, rule *unstructured.Unstructured) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	tests, err := os.ReadFile("testdata/alerts-test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"rules.yaml": ruleFile(t, rule), "alerts-test.yaml": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, tests
}

func alertNames(t *testing.T, rule *unstructured.Unstructured) []string {
	t.Helper()
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	var names []string
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rules {
			if n, ok := r.(map[string]any)["alert"].(string); ok {
				names = append(names, n)
			}
		}
	}
	return names
}

// The rendered rules pass `promtool check rules`, and `promtool test rules`
// shows each alert firing on series written for it and quiet on others.
func TestAlertsWithPromtool(t *testing.T) {
	tool := promtool(t)
	objs := mustRender(t, loadChart(t, controllerChart), monitoringValues)
	rule := mustFind(t, objs, "PrometheusRule", releaseName)
	dir, tests := promtoolDir(t, rule)
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "alerts-test.yaml"}} {
		cmd := exec.Command(tool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			continue
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}

	// Every alert is shown firing and quiet.
	var spec struct {
		Tests []struct {
			AlertRuleTest []struct {
				AlertName string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(tests, &spec); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range spec.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.AlertName] = true
			} else {
				quiet[a.AlertName] = true
			}
		}
	}
	names := alertNames(t, rule)
	if len(names) < 8 {
		t.Fatalf("only %d alerts rendered: %v", len(names), names)
	}
	for _, n := range names {
		if !fires[n] || !quiet[n] {
			t.Errorf("alert %s: testdata/alerts-test.yaml shows it firing: %v, quiet: %v; it needs both", n, fires[n], quiet[n])
		}
	}
}

// promtool test rules can fail: an alert whose threshold moved is caught.
func TestPromtoolCatchesAWrongThreshold(t *testing.T) {
	tool := promtool(t)
	objs := mustRender(t, loadChart(t, controllerChart), minimalValues+`
prometheusRule: {enabled: true, installFailuresPerHour: 3}
`)
	dir, _ := promtoolDir(t, mustFind(t, objs, "PrometheusRule", releaseName))
	cmd := exec.Command(tool, "test", "rules", "alerts-test.yaml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "KarpenterScalewayEMInstallsFailing") {
		t.Errorf("promtool accepted rules whose threshold the tests do not expect (%v):\n%s", err, out)
	}
}

func TestAlertsCanBeLeftOut(t *testing.T) {
	c := loadChart(t, controllerChart)
	objs := mustRender(t, c, minimalValues+`
prometheusRule: {enabled: true, disabled: [KarpenterScalewayEMSparesIdle], alertLabels: {team: platform}, additionalLabels: {release: prom}}
leaderElection: {enabled: false}
replicas: 1
podDisruptionBudget: {enabled: false}
`)
	rule := mustFind(t, objs, "PrometheusRule", releaseName)
	names := alertNames(t, rule)
	for _, gone := range []string{"KarpenterScalewayEMSparesIdle", "KarpenterScalewayEMNoLeader"} {
		if slices.Contains(names, gone) {
			t.Errorf("%s rendered although disabled (or leader election off)", gone)
		}
	}
	if rule.GetLabels()["release"] != "prom" {
		t.Errorf("PrometheusRule labels %v lack additionalLabels", rule.GetLabels())
	}
	if !strings.Contains(string(ruleFile(t, rule)), "team: platform") {
		t.Error("alertLabels not on the alerts")
	}
	if find(mustRender(t, c, minimalValues), "PrometheusRule", "") != nil {
		t.Error("PrometheusRule rendered by default (it needs the Prometheus Operator's CRDs)")
	}
	if _, err := render(t, c, minimalValues+"prometheusRule: {enabled: true, disabled: [NoSuchAlert]}\n"); err == nil {
		t.Error("an unknown alert name in prometheusRule.disabled is accepted")
	}
}

// The dashboard ConfigMap carries the sidecar's label and the generated JSON.
func TestDashboardConfigMap(t *testing.T) {
	c := loadChart(t, controllerChart)
	objs := mustRender(t, c, minimalValues+`
dashboards: {enabled: true, namespace: monitoring, annotations: {grafana_folder: Karpenter}}
`)
	cm := mustFind(t, objs, "ConfigMap", releaseName+"-dashboard")
	if cm.GetNamespace() != "monitoring" || cm.GetLabels()["grafana_dashboard"] != "1" || cm.GetAnnotations()["grafana_folder"] != "Karpenter" {
		t.Errorf("ConfigMap %s/%s labels %v annotations %v", cm.GetNamespace(), cm.GetName(), cm.GetLabels(), cm.GetAnnotations())
	}
	data, _, _ := unstructured.NestedString(cm.Object, "data", "karpenter-scaleway-em.json")
	want, err := dashboard.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(data) != strings.TrimSpace(string(want)) {
		t.Error("the ConfigMap's dashboard is not monitoring/dashboard's (run make dashboards)")
	}
	if find(mustRender(t, c, minimalValues), "ConfigMap", releaseName+"-dashboard") != nil {
		t.Error("dashboard ConfigMap rendered by default")
	}
}
