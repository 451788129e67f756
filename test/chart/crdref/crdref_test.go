package crdref

import (
	"strings"
	"testing"
)

const crdYAML = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Cluster
  names: {kind: Widget, plural: widgets, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            x-kubernetes-validations:
            - rule: self.size > 0
              message: size must be positive
            properties:
              size: {type: integer, format: int32, minimum: 1, description: "Size | in <units>."}
              mode: {type: string, enum: [a, b], default: a}
              items:
                type: array
                maxItems: 3
                items:
                  type: object
                  properties:
                    name: {type: string, pattern: "^[a-z]+$"}
`

func TestMarkdown(t *testing.T) {
	crd, err := Parse([]byte(crdYAML))
	if err != nil {
		t.Fatal(err)
	}
	md, err := Markdown(crd)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"- API version: `example.com/v1`",
		"- Short names: `wd`",
		"`spec`: size must be positive",
		"| `spec.size` | integer (int32) | yes |  | minimum 1 | Size \\| in &lt;units&gt;. |",
		"| `spec.mode` | string |  | `\"a\"` | one of `a`, `b` |",
		"| `spec.items` | []object |  |  | at most 3 items |",
		"| `spec.items[].name` | string |  |  | pattern `^[a-z]+$` |",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("missing %q in:\n%s", want, md)
		}
	}
}

func TestErrors(t *testing.T) {
	if _, err := Parse([]byte("kind: ConfigMap\napiVersion: v1\n")); err == nil || !strings.Contains(err.Error(), "ConfigMap") {
		t.Errorf("wrong kind: %v", err)
	}
	if _, err := Parse([]byte("spec: [unclosed")); err == nil {
		t.Error("bad YAML accepted")
	}
	noStorage := strings.Replace(crdYAML, "storage: true", "storage: false", 1)
	crd, err := Parse([]byte(noStorage))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Markdown(crd); err == nil || !strings.Contains(err.Error(), "storage version") {
		t.Errorf("no storage version: %v", err)
	}
}
