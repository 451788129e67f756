// Package phaselabels shows an install's progress on its NodeClaim as
// labels, where operators look first:
//
//	kubectl get nodeclaims -L karpenter-scaleway-em.io/install-phase -L karpenter-scaleway-em.io/imaging-progress
//
// Every write is a JSON merge patch of these two keys only, without a
// resourceVersion: it never conflicts with Karpenter core's writes of the
// NodeClaim, and core's own patches (computed from its copy, so they name
// only what core changed) never undo it. NodeClaim annotations cannot be
// shown by kubectl's -L, and the NodeClaim's printer columns are core's.
//
// Core copies a NodeClaim's labels onto its Node when it registers; Settle
// takes them off the Node again (a Node does not install).
package phaselabels

import (
	"context"
	"encoding/json"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
)

// State is what the labels show: the phase, and while imaging the percent
// written (a multiple of install.ImagingStep).
type State struct {
	Phase   install.Phase
	Percent int
}

// labels is the merge patch's label map: nil removes a key.
func (s State) labels() map[string]*string {
	phase := string(s.Phase)
	out := map[string]*string{v1alpha1.LabelInstallPhase: &phase, v1alpha1.LabelImagingProgress: nil}
	if s.Phase == install.PhaseImaging {
		pct := strconv.Itoa(min(max(s.Percent, 0), 100))
		out[v1alpha1.LabelImagingProgress] = &pct
	}
	return out
}

// Shown reports whether obj's labels already show s.
func (s State) Shown(obj client.Object) bool {
	got := obj.GetLabels()
	for k, v := range s.labels() {
		have, ok := got[k]
		if (v == nil) == ok || (v != nil && *v != have) {
			return false
		}
	}
	return true
}

// Set shows s on NodeClaim name.
func Set(ctx context.Context, kube client.Client, name string, s State) error {
	return kube.Patch(ctx, &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}, rawLabels(s.labels()))
}

// Settle shows a registered NodeClaim as joined, and takes the labels off
// its Node (core copied them there when it registered). A NodeClaim without
// the labels (not installed by this controller) is left alone.
func Settle(ctx context.Context, kube client.Client, claim *karpv1.NodeClaim) error {
	if _, ours := claim.Labels[v1alpha1.LabelInstallPhase]; !ours {
		return nil
	}
	joined := State{Phase: install.PhaseJoined}
	if !joined.Shown(claim) {
		if err := Set(ctx, kube, claim.Name, joined); err != nil {
			return err
		}
	}
	if claim.Status.NodeName == "" {
		return nil
	}
	node := &corev1.Node{}
	if err := kube.Get(ctx, types.NamespacedName{Name: claim.Status.NodeName}, node); err != nil {
		return err
	}
	return unlabel(ctx, kube, node)
}

// unlabel removes the labels from obj, if it has any.
func unlabel(ctx context.Context, kube client.Client, obj client.Object) error {
	out := map[string]*string{}
	for _, k := range []string{v1alpha1.LabelInstallPhase, v1alpha1.LabelImagingProgress} {
		if _, ok := obj.GetLabels()[k]; ok {
			out[k] = nil
		}
	}
	if len(out) == 0 {
		return nil
	}
	return kube.Patch(ctx, obj, rawLabels(out))
}

func rawLabels(labels map[string]*string) client.Patch {
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	return client.RawPatch(types.MergePatchType, body)
}
