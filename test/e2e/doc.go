// Package e2e is the end-to-end suite: each test starts a simulated world
// (test/world: etcd, kube-apiserver, kube-scheduler, S3 with a published
// Talos-like image, the Elastic Metal API simulator and its machines) and
// runs bin/karpenter-scaleway-em against it as a subprocess, with Karpenter
// core's controllers, then drives pods and faults and checks what happened in
// Kubernetes and in the simulator's record of API calls (no duplicate order
// per NodeClaim, a bounded number of calls per server, nothing leaked).
//
//	TestScaleUpFromZeroThenConsolidate        two instance types from zero, then every server released
//	TestOutOfStockFallsBackToAnotherOffering  out_of_stock on order -> another offer or zone
//	TestQuotaReachedIsReported                quotas_exceeded -> NodeClaim event naming the quota, no retry storm
//	TestDriftReplacesNodes                    new Talos version in the NodeClass -> nodes replaced
//	TestControllerKilledDuringImagingResumes  SIGKILL while imaging -> same server resumes, no second order
//	TestNodeNeverReadyIsRepaired              NotReady node (NodeRepair gate) -> replaced by a Ready one
//	TestIntermittentAPIFailuresConverge       5xx and bare 429s -> converges once
//	TestGarbageCollectionKeepsHealthyNodes    orphan server released, healthy nodes untouched
//	TestEphemeralStorageOnTheLargeDisk        localDisks Ephemeral: a 2Ti ephemeral-storage pod on EPHEMERAL's 7.68 TB disk
//	BenchmarkScale50NodeClaims                50 nodes at once: time, calls per server, controller CPU/memory (make bench)
//
// The shared world setup, waits and assertions are in test/e2e/harness; the
// slow-delivery test (real clock, more than 15 minutes) is test/e2e/slowdelivery
// and the secret canary (no secret in logs, events, objects, metrics or
// em-imager's output) is test/e2e/canary, their own packages so that they
// run beside this one.
//
// A missing binary fails the tests with the make target that builds it:
//
//	make build tools && go test -count=1 -v ./test/e2e/     # or: make e2e
//	go test -run '^$' -bench Scale -benchtime 1x ./test/e2e/
//
// The suite takes about 4.5 minutes on two cores with the "test" delay profile.
package e2e
