package talosgen

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/karpenter/pkg/apis"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// The NodeRestriction admission plugin lets a kubelet set labels in the
// kubernetes.io / k8s.io domains only from this list and these namespaces
// (k8s.io/kubelet/pkg/apis: KubeletLabels, KubeletLabelNamespaces), and
// never under node-restriction.kubernetes.io/.
var (
	kubeletLabels = map[string]bool{
		"kubernetes.io/hostname":                   true,
		"kubernetes.io/arch":                       true,
		"kubernetes.io/os":                         true,
		"beta.kubernetes.io/instance-type":         true,
		"node.kubernetes.io/instance-type":         true,
		"failure-domain.beta.kubernetes.io/region": true,
		"failure-domain.beta.kubernetes.io/zone":   true,
		"topology.kubernetes.io/region":            true,
		"topology.kubernetes.io/zone":              true,
		"beta.kubernetes.io/arch":                  true,
		"beta.kubernetes.io/os":                    true,
	}
	kubeletLabelNamespaces = []string{"kubelet.kubernetes.io", "node.kubernetes.io"}
)

func inDomain(ns, domain string) bool {
	return ns == domain || strings.HasSuffix(ns, "."+domain)
}

// kubeletMaySetLabel applies the NodeRestriction rules to a label key.
func kubeletMaySetLabel(key string) bool {
	ns, _, ok := strings.Cut(key, "/")
	if !ok {
		return true // unprefixed keys are the user's
	}

	if inDomain(ns, "node-restriction.kubernetes.io") {
		return false
	}

	if !inDomain(ns, "kubernetes.io") && !inDomain(ns, "k8s.io") {
		return true
	}

	if kubeletLabels[key] {
		return true
	}

	for _, allowed := range kubeletLabelNamespaces {
		if inDomain(ns, allowed) {
			return true
		}
	}

	return false
}

func validLabel(key, value string) error {
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return fmt.Errorf("key: %s", strings.Join(errs, "; "))
	}

	if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
		return fmt.Errorf("value %q: %s", value, strings.Join(errs, "; "))
	}

	return nil
}

// nodeLabels merges the NodeClaim's labels and the NodeClass's.
//
// A NodeClaim label the kubelet may not set (say node-role.kubernetes.io/x
// from a NodePool template) is left to Karpenter, which copies NodeClaim
// labels onto the Node with its own credentials at registration. A NodeClass
// label has no such second path, so a restricted one is an error.
func nodeLabels(nc *karpv1.NodeClaim, classLabels map[string]string) (map[string]string, []string, error) {
	out := map[string]string{}

	var leftToKarpenter []string

	for _, k := range sortedKeys(nc.Labels) {
		v := nc.Labels[k]

		if err := validLabel(k, v); err != nil {
			return nil, nil, fmt.Errorf("nodeclaim %q: label %q: %w", nc.Name, k, err)
		}

		if !kubeletMaySetLabel(k) {
			leftToKarpenter = append(leftToKarpenter, k)

			continue
		}

		out[k] = v
	}

	for _, k := range sortedKeys(classLabels) {
		v := classLabels[k]

		if err := validLabel(k, v); err != nil {
			return nil, nil, fmt.Errorf("node settings: labels: %q: %w", k, err)
		}

		if !kubeletMaySetLabel(k) {
			return nil, nil, fmt.Errorf("node settings: labels: %q is in a domain the kubelet may not set (NodeRestriction admission)", k)
		}

		if ns, _, ok := strings.Cut(k, "/"); ok && inDomain(ns, apis.Group) {
			return nil, nil, fmt.Errorf("node settings: labels: %q is in the %s domain, which Karpenter owns", k, apis.Group)
		}

		if cur, ok := nc.Labels[k]; ok && cur != v {
			return nil, nil, fmt.Errorf("node settings: labels: %q=%q conflicts with the NodeClaim's %q", k, v, cur)
		}

		out[k] = v
	}

	return out, leftToKarpenter, nil
}

// registerTaints is spec.taints + spec.startupTaints + the unregistered
// taint Karpenter requires, deduplicated by key and effect, in that order.
func registerTaints(nc *karpv1.NodeClaim) ([]corev1.Taint, error) {
	var out []corev1.Taint

	seen := map[string]int{}

	add := func(t corev1.Taint, field string) error {
		if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
			return fmt.Errorf("nodeclaim %q: %s: taint key %q: %s", nc.Name, field, t.Key, strings.Join(errs, "; "))
		}

		if t.Value != "" {
			if errs := validation.IsValidLabelValue(t.Value); len(errs) > 0 {
				return fmt.Errorf("nodeclaim %q: %s: taint %q value: %s", nc.Name, field, t.Key, strings.Join(errs, "; "))
			}
		}

		switch t.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			return fmt.Errorf("nodeclaim %q: %s: taint %q has effect %q, want NoSchedule, PreferNoSchedule or NoExecute", nc.Name, field, t.Key, t.Effect)
		}

		id := t.Key + ":" + string(t.Effect)
		if i, ok := seen[id]; ok {
			if out[i].Value != t.Value {
				return fmt.Errorf("nodeclaim %q: %s: taint %q with effect %s appears with two values", nc.Name, field, t.Key, t.Effect)
			}

			return nil
		}

		seen[id] = len(out)
		out = append(out, corev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})

		return nil
	}

	for _, t := range nc.Spec.Taints {
		if err := add(t, "spec.taints"); err != nil {
			return nil, err
		}
	}

	for _, t := range nc.Spec.StartupTaints {
		if err := add(t, "spec.startupTaints"); err != nil {
			return nil, err
		}
	}

	if err := add(karpv1.UnregisteredNoExecuteTaint, "unregistered taint"); err != nil {
		return nil, err
	}

	return out, nil
}

// taintsConfig renders taints as KubeletConfiguration.registerWithTaints.
func taintsConfig(taints []corev1.Taint) []any {
	out := make([]any, 0, len(taints))

	for _, t := range taints {
		m := map[string]any{"key": t.Key, "effect": string(t.Effect)}
		if t.Value != "" {
			m["value"] = t.Value
		}

		out = append(out, m)
	}

	return out
}

// labelsArg renders labels as kubelet's --node-labels value, keys sorted.
func labelsArg(labels map[string]string) string {
	parts := make([]string, 0, len(labels))
	for _, k := range sortedKeys(labels) {
		parts = append(parts, k+"="+labels[k])
	}

	return strings.Join(parts, ",")
}
