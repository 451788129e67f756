package world

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
)

// NodeClass returns a NodeClass for this world's image and join Secret, in
// the given zones (none: the controller's default zone).
func (w *World) NodeClass(name string, zones ...string) *v1alpha1.ScalewayElasticMetalNodeClass {
	return &v1alpha1.ScalewayElasticMetalNodeClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "ScalewayElasticMetalNodeClass"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ScalewayElasticMetalNodeClassSpec{
			Zones: zones,
			Image: v1alpha1.ImageSpec{Bucket: w.Bucket, Prefix: w.Prefix, SchematicID: w.Opts.SchematicID,
				TalosVersion: w.Opts.TalosVersion, Formats: []string{"zst", "xz"}, Architecture: "amd64"},
			Talos: v1alpha1.TalosSpec{JoinSecretRef: v1alpha1.SecretReference{Name: w.JoinSecret.Name, Namespace: w.JoinSecret.Namespace}},
		},
	}
}

// NodePool returns a NodePool on the named NodeClass with the given extra
// requirements, consolidating empty or underutilized nodes after 5s.
func (w *World) NodePool(name, nodeClass string, reqs ...corev1.NodeSelectorRequirement) *karpv1.NodePool {
	all := []karpv1.NodeSelectorRequirementWithMinValues{
		{Key: corev1.LabelOSStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}},
		{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}},
	}
	for _, r := range reqs {
		all = append(all, karpv1.NodeSelectorRequirementWithMinValues{Key: r.Key, Operator: r.Operator, Values: r.Values})
	}
	after := karpv1.MustParseNillableDuration("5s")
	return &karpv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: karpv1.NodePoolSpec{
			Template: karpv1.NodeClaimTemplate{
				Spec: karpv1.NodeClaimTemplateSpec{
					NodeClassRef: &karpv1.NodeClassReference{Group: v1alpha1.SchemeGroupVersion.Group,
						Kind: "ScalewayElasticMetalNodeClass", Name: nodeClass},
					Requirements: all,
				},
			},
			Disruption: karpv1.Disruption{
				ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized,
				ConsolidateAfter:    after,
				Budgets:             []karpv1.Budget{{Nodes: "100%"}},
			},
		},
	}
}

// Deployment returns a Deployment of pause pods requesting cpu and memory,
// spread one per node when spread is set (hostname anti-affinity).
func Deployment(namespace, name string, replicas int32, cpu, memory string, spread bool) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	pod := corev1.PodSpec{
		TerminationGracePeriodSeconds: new(int64),
		Containers: []corev1.Container{{
			Name: "app", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}},
		}},
	}
	if spread {
		pod.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: corev1.LabelHostname}}}}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod},
		},
	}
}

// Apply creates objects (NodeClass, NodePool, Deployment...) with the admin client.
func (w *World) Apply(ctx context.Context, objs ...client.Object) error {
	for _, o := range objs {
		if err := w.Kube.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("apply %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// WaitNodeClassReady waits until the NodeClass's Ready condition is True
// (its image manifest read from the bucket, its join Secret parsed); the
// error after timeout says the condition's reason and message.
func (w *World) WaitNodeClassReady(ctx context.Context, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
		if err := w.Kube.Client.Get(ctx, types.NamespacedName{Name: name}, nc); err != nil {
			return err
		}
		msg := "no Ready condition yet"
		for _, c := range nc.Status.Conditions {
			if c.Type == "Ready" {
				if c.Status == metav1.ConditionTrue {
					return nil
				}
				msg = fmt.Sprintf("%s: %s", c.Reason, c.Message)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("NodeClass %s not Ready after %s: %s", name, timeout, msg)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
