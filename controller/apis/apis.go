// Package apis holds the provider's API group and its generated CRDs.
package apis

import (
	_ "embed"

	"github.com/awslabs/operatorpkg/object"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Group is the API group of the provider's own resources.
const Group = "karpenter-scaleway-em.io"

//go:generate ../../bin/controller-gen crd object:headerFile="../../hack/boilerplate.go.txt" paths="./..." output:crd:artifacts:config=crds
var (
	// NodeClassCRD is the NodeClass CRD as controller-gen wrote it.
	//go:embed crds/karpenter-scaleway-em.io_scalewayelasticmetalnodeclasses.yaml
	NodeClassCRD []byte
	// CRDs are the provider's CRDs, for tests and for the CRD chart.
	CRDs = []*apiextensionsv1.CustomResourceDefinition{
		object.Unmarshal[apiextensionsv1.CustomResourceDefinition](NodeClassCRD),
	}
)
