package talosgen

import (
	"net/url"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// TestSplitListDropsBlanks: the join Secret's lists tolerate spaces and
// trailing commas.
func TestSplitListDropsBlanks(t *testing.T) {
	if got := splitList([]byte(" 10.96.0.10, ,fd00::a,")); !reflect.DeepEqual(got, []string{"10.96.0.10", "fd00::a"}) {
		t.Fatalf("splitList: %q", got)
	}
	if got := splitList(nil); got != nil {
		t.Fatalf("splitList(nil): %q", got)
	}
}

// TestCheckEndpointShape: only scheme, host and port are allowed.
func TestCheckEndpointShape(t *testing.T) {
	for raw, want := range map[string]string{
		"https://cp.example:6443": "",
		"https://cp.example/":     "",
		"http://cp.example":       "https://",
		"https://u@cp.example":    "user info",
		"https://cp.example/?a=b": "query",
		"https://cp.example/api":  "path",
		"https://:6443":           "no host",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		err = checkEndpointShape(u)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: got %v, want %q", raw, err, want)
		}
	}
}

// TestUplinkByRoute: the routed NIC wins over link, two routed NICs are
// for the NodeClass to decide.
func TestUplinkByRoute(t *testing.T) {
	a := report.NIC{Name: "a", MAC: "00:00:00:00:00:0a", LinkUp: true}
	b := report.NIC{Name: "b", MAC: "00:00:00:00:00:0b", LinkUp: true, HasDefaultRoute: true}
	up, err := uplinkByRoute([]report.NIC{a, b})
	if err != nil || up.name != "b" {
		t.Fatalf("routed: %+v, %v", up, err)
	}
	a.HasDefaultRoute = true
	if _, err := uplinkByRoute([]report.NIC{a, b}); err == nil || !strings.Contains(err.Error(), "2 NICs have the default route") {
		t.Fatalf("two routed: %v", err)
	}
	if up, err := uplinkByMAC([]report.NIC{a, b}, "00:00:00:00:00:0a"); err != nil || up.name != "a" {
		t.Fatalf("by MAC: %+v, %v", up, err)
	}
}

// TestCheckRegistration: a missing taint or a changed label fails.
func TestCheckRegistration(t *testing.T) {
	taint := corev1.Taint{Key: "karpenter.sh/unregistered", Effect: corev1.TaintEffectNoExecute}
	facts := &Facts{RegisterWithTaints: []corev1.Taint{taint}, NodeLabels: map[string]string{"a": "1"}}
	if err := checkRegistration(facts, map[string]string{"a": "1"}, []corev1.Taint{taint}); err != nil {
		t.Fatal(err)
	}
	if err := checkRegistration(facts, map[string]string{"a": "2"}, nil); err == nil {
		t.Fatal("changed label passed")
	}
	if err := checkRegistration(&Facts{}, nil, []corev1.Taint{taint}); err == nil {
		t.Fatal("missing taint passed")
	}
}
