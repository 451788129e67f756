// Package testenv starts the real processes the simulated world is made of —
// kube-apiserver + etcd (through controller-runtime's envtest), kube-scheduler
// and an S3 server (versitygw) — from the binaries `make tools` builds into
// bin/.
//
// Tests call the testing.TB starters, which stop everything on t.Cleanup and
// fail the test (never skip) when a binary is missing. make test-fast leaves
// out every package whose tests link this one:
//
//	k := testenv.StartKube(t, testenv.KubeOptions{})       // Karpenter CRDs included
//	testenv.StartScheduler(t, k)                           // real kube-scheduler
//	s3 := testenv.StartS3(t)                               // real SigV4 S3 server
//	err := s3.CreateBucket(ctx, "images")
//
// A standalone program (make demo) uses the context-based variants that return
// a value with a Stop method: NewKube, NewScheduler and NewS3.
//
// Binaries are found through TEST_ASSET_KUBE_APISERVER, TEST_ASSET_ETCD,
// TEST_ASSET_KUBE_SCHEDULER, TEST_ASSET_VERSITYGW, then KUBEBUILDER_ASSETS,
// then <repository root>/bin (found by walking up to go.mod), so `go test`
// works from an editor once `make tools` has run. Each process logs to a file
// in its directory; a failed test prints the tail of those logs.
//
//	make tools && go test -count=1 ./test/testenv/...
package testenv
