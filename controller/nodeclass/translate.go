// Package nodeclass interprets ScalewayElasticMetalNodeClasses: it turns one
// into the inputs of catalog and talosgen, and runs the controller that keeps
// its status (conditions, resolved image, hash) current.
package nodeclass

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/imagesource"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/kubeversion"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/talosgen"
)

// Get returns the NodeClass a NodeClaim (or NodePool template) refers to.
func Get(ctx context.Context, kube client.Reader, ref *karpv1.NodeClassReference) (*v1alpha1.ScalewayElasticMetalNodeClass, error) {
	if ref == nil {
		return nil, fmt.Errorf("no nodeClassRef")
	}
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	if err := kube.Get(ctx, types.NamespacedName{Name: ref.Name}, nc); err != nil {
		return nil, err
	}
	return nc, nil
}

// Lookup is Get for the spare policy, which releases a monthly server whose
// NodeClass is gone: nil (and no error) only when the NodeClass is really
// gone (NotFound, or no reference at all). Any other failure (a timeout, a
// cancelled context, a throttled API server) is an error: taken for "gone",
// it would throw away a month already paid.
func Lookup(ctx context.Context, kube client.Reader, ref *karpv1.NodeClassReference) (*v1alpha1.ScalewayElasticMetalNodeClass, error) {
	if ref == nil {
		return nil, nil
	}
	nc, err := Get(ctx, kube, ref)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading nodeclass %s: %w", ref.Name, err)
	}
	return nc, nil
}

// Filter is the catalog filter of a NodeClass. It offers only offers of the
// image's architecture: a NodePool without a kubernetes.io/arch requirement
// would otherwise get the cheapest offer of any architecture (a RISC-V board),
// which em-imager cannot install, and pay for a server per attempt.
func Filter(nc *v1alpha1.ScalewayElasticMetalNodeClass, defaultZone string) catalog.Filter {
	arch := nc.Spec.Image.Architecture
	if arch == "" {
		arch = "amd64"
	}
	f := catalog.Filter{
		Zones:            nc.ZonesOr(defaultZone),
		CommitmentMonths: int(nc.Spec.Billing.MonthlyCommitmentMonths),
		LocalDisks:       localdisks.Policy(nc.Spec.LocalDisks),
		Requirements:     scheduling.NewRequirements(scheduling.NewRequirement(corev1.LabelArchStable, corev1.NodeSelectorOpIn, arch)),
	}
	for _, p := range nc.Spec.Billing.Periods {
		f.BillingPeriods = append(f.BillingPeriods, catalog.BillingPeriod(p))
	}
	if k := nc.Spec.Kubelet; k != nil {
		f.Kubelet = catalog.KubeletSettings{
			KubeReserved: k.KubeReserved, SystemReserved: k.SystemReserved, EvictionHard: k.EvictionHard, MaxPods: k.MaxPods,
		}
	}
	return f
}

// Settings are the talosgen settings of a NodeClass.
func Settings(nc *v1alpha1.ScalewayElasticMetalNodeClass) talosgen.NodeSettings {
	t := nc.Spec.Talos
	s := talosgen.NodeSettings{
		TalosVersion:            t.VersionContract,
		InstallImage:            t.InstallImage,
		Labels:                  nc.Spec.Labels,
		ExtraKernelArgs:         t.KernelArgs,
		ConfigPatches:           t.ConfigPatches,
		ClusterDiscovery:        t.Discovery,
		AllowValidationWarnings: t.AllowValidationWarnings,
		LocalDisks:              nc.Spec.LocalDisks,
	}
	if k := nc.Spec.Kubelet; k != nil {
		s.Kubelet = talosgen.KubeletSettings{
			KubeReserved: k.KubeReserved, SystemReserved: k.SystemReserved, EvictionHard: k.EvictionHard,
			MaxPods: k.MaxPods, ImageGCHighThresholdPercent: k.ImageGCHighThresholdPercent,
			ImageGCLowThresholdPercent: k.ImageGCLowThresholdPercent,
		}
	}
	return s
}

// ImageSettings are the imagesource settings of a NodeClass.
func ImageSettings(nc *v1alpha1.ScalewayElasticMetalNodeClass) imagesource.Settings {
	i := nc.Spec.Image
	return imagesource.Settings{
		Bucket: i.Bucket, Prefix: i.Prefix, SchematicID: i.SchematicID, TalosVersion: i.TalosVersion,
		Arch: i.Architecture, FormatPreference: i.Formats, ManifestURL: i.ManifestURL, ManifestSHA256: i.ManifestSHA256,
	}
}

// JoinMaterial reads and parses the join Secret a NodeClass names. A Secret
// that names no kubernetes-version gets the control plane's (controlPlane
// nil: Talos machinery's default, which may be newer than the cluster).
func JoinMaterial(ctx context.Context, kube client.Reader, nc *v1alpha1.ScalewayElasticMetalNodeClass, controlPlane kubeversion.ControlPlane) (*talosgen.JoinMaterial, error) {
	ref := nc.Spec.Talos.JoinSecretRef
	name := ref.Namespace + "/" + ref.Name
	sec := &corev1.Secret{}
	if err := kube.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, sec); err != nil {
		return nil, fmt.Errorf("join secret %q: %w", name, err)
	}
	join, err := talosgen.ParseJoinSecret(name, sec.Data)
	if err != nil || controlPlane == nil {
		return join, err
	}
	v, err := controlPlane(ctx)
	if err != nil {
		return nil, err
	}
	join.DefaultKubernetesVersion(v)
	return join, nil
}
