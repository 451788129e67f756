// Package kubeversion decides which kubelet version nodes get and checks it
// against the version skew policies before any server is bought: a kubelet
// newer than its API server, or one its Talos version does not support,
// never joins, and every such install is billed at least an hour.
package kubeversion

import (
	"context"
	"fmt"

	"github.com/blang/semver/v4"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// ControlPlane reads the version of the cluster's API server ("1.34.2").
type ControlPlane func(ctx context.Context) (string, error)

// FromConfig reads the version from the API server cfg reaches (GET /version).
func FromConfig(cfg *rest.Config) (ControlPlane, error) {
	d, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (string, error) {
		// ServerVersion takes no context; /version is one small GET.
		v, err := d.ServerVersion()
		if err != nil {
			return "", fmt.Errorf("reading the API server's version: %w", err)
		}
		p, err := semver.ParseTolerant(v.GitVersion)
		if err != nil {
			return "", fmt.Errorf("the API server's version %q: %w", v.GitVersion, err)
		}
		return fmt.Sprintf("%d.%d.%d", p.Major, p.Minor, p.Patch), nil
	}, nil
}

// SkewError says why a kubelet version cannot be used.
type SkewError struct{ Reason string }

func (e *SkewError) Error() string { return e.Reason }

// maxKubeletLag is how many minor versions a kubelet may be older than the
// API server (Kubernetes' version skew policy since 1.28).
const maxKubeletLag = 3

// Check refuses a kubelet version newer than the control plane's, more than
// three minor versions older, or outside what talosVersion supports.
// controlPlane "" skips the first two checks, talosVersion "" the last.
func Check(talosVersion, kubelet, controlPlane string) error {
	k, err := semver.ParseTolerant(kubelet)
	if err != nil {
		return &SkewError{Reason: fmt.Sprintf("kubelet version %q is not a version", kubelet)}
	}
	if controlPlane != "" {
		cp, err := semver.ParseTolerant(controlPlane)
		if err != nil {
			return &SkewError{Reason: fmt.Sprintf("API server version %q is not a version", controlPlane)}
		}
		switch {
		case k.Major != cp.Major || k.Minor > cp.Minor:
			return &SkewError{Reason: fmt.Sprintf("kubelet %s is newer than the API server (%s): Kubernetes does not support it; set kubernetes-version in the join Secret to %d.%d or older",
				k, cp, cp.Major, cp.Minor)}
		case cp.Minor-k.Minor > maxKubeletLag:
			return &SkewError{Reason: fmt.Sprintf("kubelet %s is more than %d minor versions older than the API server (%s)", k, maxKubeletLag, cp)}
		}
	}
	if talosVersion == "" {
		return nil
	}
	tv, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: talosVersion})
	if err != nil {
		return &SkewError{Reason: fmt.Sprintf("Talos version %q is not a version", talosVersion)}
	}
	kv, err := compatibility.ParseKubernetesVersion(k.String())
	if err != nil {
		return &SkewError{Reason: err.Error()}
	}
	if err := kv.SupportedWith(tv); err != nil {
		return &SkewError{Reason: "kubelet " + k.String() + " with Talos " + talosVersion + ": " + err.Error()}
	}
	return nil
}
