package conformance

// The regression suite is the test package sigs.k8s.io/karpenter/test/suites/regression: `go test` builds it from
// the module cache, but only with go.sum entries for everything its test files import, and `go mod tidy` keeps
// those only for packages our own module (its tests included) imports. These blank imports are that anchor: the
// packages the suite's files import that nothing else here does. Remove one and `make conformance` fails to
// build the suite with "missing go.sum entry".
import (
	_ "github.com/onsi/ginkgo/v2"
	_ "github.com/onsi/gomega"
	_ "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	_ "sigs.k8s.io/karpenter/pkg/apis/autoscaling/v1beta1"
	_ "sigs.k8s.io/karpenter/pkg/test"
	_ "sigs.k8s.io/karpenter/pkg/test/expectations"
	_ "sigs.k8s.io/karpenter/pkg/utils/node"
	_ "sigs.k8s.io/karpenter/test/pkg/debug"
	_ "sigs.k8s.io/karpenter/test/pkg/environment/common"
)
