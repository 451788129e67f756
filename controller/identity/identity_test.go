package identity

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

func TestClassify(t *testing.T) {
	id := Identity{Name: "prod", ID: "uid-1"}
	name := scaleway.Tag(scaleway.TagManagedBy, "prod")
	for _, c := range []struct {
		tags []string
		want Class
	}{
		{id.Tags(), Owned},
		{[]string{name}, Legacy},
		{[]string{name, scaleway.Tag(scaleway.TagClusterID, "uid-2")}, Foreign},
		// The identity makes it this cluster's: renamed since it was ordered.
		{[]string{scaleway.Tag(scaleway.TagManagedBy, "staging"), scaleway.Tag(scaleway.TagClusterID, "uid-1")}, Owned},
		{[]string{scaleway.Tag(scaleway.TagClusterID, "uid-1")}, Other}, // no name: handed over or hand-made
		{[]string{"hand-made"}, Other},
	} {
		if got := id.Classify(c.tags); got != c.want {
			t.Errorf("Classify(%v) = %v, want %v", c.tags, got, c.want)
		}
	}
}

// The identity is the kube-system namespace's UID unless set; a bad
// setting is refused before anything is tagged with it.
func TestResolve(t *testing.T) {
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system", UID: "0b9e8d1c-uid"}}).Build()
	ctx := context.Background()
	if got, err := Resolve(ctx, kube, ""); err != nil || got != "0b9e8d1c-uid" {
		t.Errorf("Resolve() = %q, %v; want the kube-system UID", got, err)
	}
	if got, err := Resolve(ctx, kube, "staging-2"); err != nil || got != "staging-2" {
		t.Errorf("Resolve(staging-2) = %q, %v", got, err)
	}
	for _, bad := range []string{"a=b", "has space", "-lead", strings.Repeat("x", 64)} {
		if _, err := Resolve(ctx, kube, bad); err == nil {
			t.Errorf("Resolve(%q) accepted", bad)
		}
	}
	empty := fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()
	if _, err := Resolve(ctx, empty, ""); err == nil || !strings.Contains(err.Error(), "CLUSTER_ID") {
		t.Errorf("Resolve without kube-system = %v, want an error naming CLUSTER_ID", err)
	}
}
