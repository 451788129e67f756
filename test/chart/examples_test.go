package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// Every example a user may apply as is carries the first-run guardrails: a
// spend limit on each NodeClass and a taint on each NodePool's nodes, so
// that a pending pod somewhere in the cluster does not buy bare metal.
func TestExamplesCarryGuardrails(t *testing.T) {
	files, err := filepath.Glob(repoPath(t, "examples/*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(raw), "\n---\n") {
			var obj struct {
				Kind string `json:"kind"`
				Spec struct {
					Limits *struct {
						HourlySpend       string `json:"hourlySpend"`
						MonthlyCommitment string `json:"monthlyCommitment"`
					} `json:"limits"`
					Template struct {
						Spec struct {
							Taints []map[string]any `json:"taints"`
						} `json:"spec"`
					} `json:"template"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			name := filepath.Base(f)
			switch obj.Kind {
			case "ScalewayElasticMetalNodeClass":
				if obj.Spec.Limits == nil || (obj.Spec.Limits.HourlySpend == "" && obj.Spec.Limits.MonthlyCommitment == "") {
					t.Errorf("%s: a NodeClass without spec.limits", name)
				}
			case "NodePool":
				if len(obj.Spec.Template.Spec.Taints) == 0 {
					t.Errorf("%s: a NodePool whose nodes have no taint", name)
				}
			}
		}
	}
}
