// Package v1alpha1 holds the ScalewayElasticMetalNodeClass API.
// +k8s:openapi-gen=true
// +k8s:deepcopy-gen=package,register
// +k8s:defaulter-gen=TypeMeta
// +groupName=karpenter-scaleway-em.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
)

// SchemeGroupVersion is the group version of this package's types.
var SchemeGroupVersion = schema.GroupVersion{Group: "karpenter-scaleway-em.io", Version: "v1alpha1"}

func init() {
	metav1.AddToGroupVersion(scheme.Scheme, SchemeGroupVersion)
	scheme.Scheme.AddKnownTypes(SchemeGroupVersion,
		&ScalewayElasticMetalNodeClass{},
		&ScalewayElasticMetalNodeClassList{},
	)
}
