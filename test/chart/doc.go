// Package chart holds the tests of the Helm charts (charts/), the examples
// (examples/) and the generated NodeClass reference (docs/).
//
// They render the charts with Helm's Go SDK (helm.sh/helm/v3: values.schema.json
// validation, templates, kubeVersion) for the default and representative
// values, then apply every rendered object to a real kube-apiserver 1.35
// (test/testenv) with server-side apply: dry-run for the whole chart, for real
// for RBAC, which SubjectAccessReviews then check grant what the controller
// needs and nothing more. Every examples/*.yaml is applied too.
//
//	make tools   # bin/kube-apiserver and bin/etcd
//	go test -count=1 ./test/chart/...
//
// When the CRDs or the NodeClass API change: `make chart-crds docs`.
package chart
