// Package helmrender renders a chart as `helm template --kube-version` does,
// with Helm's Go SDK: values coalesced and checked against
// values.schema.json, the chart's kubeVersion checked, templates rendered
// into objects. test/chart and test/monitoring (the chart's alerts in a real
// Prometheus) use it.
package helmrender

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	helmchart "helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/version"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Release names what is rendered.
type Release struct {
	Name, Namespace string
	// KubeVersion such as v1.35.4.
	KubeVersion string
}

// Render renders c with valuesYAML and returns the objects in file order.
func Render(c *helmchart.Chart, valuesYAML []byte, rel Release) ([]*unstructured.Unstructured, error) {
	vals, err := chartutil.ReadValues(valuesYAML)
	if err != nil {
		return nil, fmt.Errorf("values are not YAML: %w", err)
	}
	if c.Metadata.KubeVersion != "" && !chartutil.IsCompatibleRange(c.Metadata.KubeVersion, rel.KubeVersion) {
		return nil, errors.New("chart requires kubeVersion " + c.Metadata.KubeVersion)
	}
	v, err := version.ParseSemantic(rel.KubeVersion)
	if err != nil {
		return nil, fmt.Errorf("kube version %q: %w", rel.KubeVersion, err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartutil.KubeVersion{Version: rel.KubeVersion, Major: fmt.Sprint(v.Major()), Minor: fmt.Sprint(v.Minor())}
	top, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{Name: rel.Name, Namespace: rel.Namespace, IsInstall: true, Revision: 1}, caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(c, top)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		if strings.HasSuffix(n, ".yaml") {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var objs []*unstructured.Unstructured
	for _, n := range names {
		docs, err := Objects([]byte(files[n]))
		if err != nil {
			return nil, fmt.Errorf("%s renders invalid YAML: %w\n%s", n, err, files[n])
		}
		objs = append(objs, docs...)
	}
	return objs, nil
}

// Objects reads a multi-document YAML stream; empty documents are skipped.
func Objects(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		trimmed := bytes.TrimSpace(raw.Raw)
		if len(trimmed) == 0 || string(trimmed) == "null" || string(trimmed) == "{}" {
			continue
		}
		// UnmarshalJSON keeps integers as int64 (a plain json decode makes
		// them float64) and fails on a missing kind.
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw.Raw); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
}
