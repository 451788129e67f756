package nodeclass

import (
	"context"
	"testing"

	"github.com/awslabs/operatorpkg/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
)

// A controller upgrade that changes the hashing must neither drift every
// node (a new server each) nor leave the old claims undriftable forever:
// claims of the NodeClass stamped by the old hashing take today's hash, except
// one already marked drifted (its replacement is under way), and claims of
// other NodeClasses or with no stamp at all are left as they are.
func TestRestampClaimsOfAnOlderHashVersion(t *testing.T) {
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "general"}}
	nc.Spec.Zones = []string{"fr-par-2"}
	claim := func(name, class, version string, drifted bool) *karpv1.NodeClaim {
		c := &karpv1.NodeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       karpv1.NodeClaimSpec{NodeClassRef: &karpv1.NodeClassReference{Name: class}},
		}
		if version != "" {
			c.Annotations = map[string]string{
				v1alpha1.AnnotationNodeClassHash: "1234", v1alpha1.AnnotationNodeClassHashVersion: version,
			}
		}
		if drifted {
			c.Status.Conditions = []status.Condition{{Type: karpv1.ConditionTypeDrifted, Status: metav1.ConditionTrue,
				Reason: "NodeClassDrift", LastTransitionTime: metav1.Now()}}
		}
		return c
	}
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nc,
		claim("old", "general", "v1", false),
		claim("old-drifted", "general", "v1", true),
		claim("other-class", "batch", "v1", false),
		claim("unstamped", "general", "", false),
	).Build()
	c := &StatusController{Kube: kube}
	c.restampClaims(context.Background(), nc, nc.Hash())

	for name, want := range map[string][2]string{
		"old":         {nc.Hash(), v1alpha1.NodeClassHashVersion},
		"old-drifted": {"1234", "v1"},
		"other-class": {"1234", "v1"},
		"unstamped":   {"", ""},
	} {
		got := &karpv1.NodeClaim{}
		if err := kube.Get(context.Background(), types.NamespacedName{Name: name}, got); err != nil {
			t.Fatal(err)
		}
		have := [2]string{got.Annotations[v1alpha1.AnnotationNodeClassHash], got.Annotations[v1alpha1.AnnotationNodeClassHashVersion]}
		if have != want {
			t.Errorf("%s: hash, version = %q, want %q", name, have, want)
		}
	}
}
