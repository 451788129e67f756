// Package world composes the simulated Scaleway world in one call: etcd and
// kube-apiserver (Karpenter's CRDs and the provider's NodeClass CRD),
// kube-scheduler, an S3 server (versitygw) whose bucket holds a Talos-like
// image published with em-imager's publish library, the Elastic Metal API
// simulator (scwsim) and the machines that play its servers (Machines, over
// test/sim/machine: file disks and a fake /sys per server, a rescue SSH/SFTP
// server that runs the uploaded em-imager for real, then the Talos
// maintenance API and a kubelet that registers the Node from the applied
// config, refused unless it carries this cluster's CA, endpoint and
// bootstrap token), the join Secret (cluster
// CA, a bootstrap token, a Talos secrets bundle from machinery) and the
// controller's namespace.
//
// In a test (everything stops on t.Cleanup; a missing binary fails the test
// naming `make tools` or `make build`):
//
//	w := world.Start(t, world.Options{})                 // "test" delays
//	c := world.StartController(t, w, world.ControllerOptions{})
//	_ = c.WaitHealthy(ctx)
//	_ = w.Apply(ctx, w.NodeClass("default"), w.NodePool("default", "default"))
//	wl := w.RunWorkload("default", "app", 3, "3", "1Gi", false) // pending pods
//	tr := w.Track(50*time.Millisecond, nil)                // per-server phase timeline
//	w.Sim.CreatesByTag(world.TagNodeClaim)                 // duplicate orders
//	c.Kill(); c.Restart()                                  // crash the controller
//
// The controller runs as a subprocess (bin/karpenter-scaleway-em, its real
// main) with ControllerEnv: kubeconfig, cluster name, the simulator's URL and
// key, the bucket's endpoint and credentials, and the ports the machines
// listen on (RESCUE_SSH_PORT, TALOS_API_PORT; each server has its own
// 127.x.y.z address). Its log is <Dir>/controller/controller.log.
//
// A program (make demo) uses New and Stop instead of Start.
//
// By default the world runs no kube-controller-manager: Workload plays the
// ReplicaSet (recreating evicted pods), pods stay as the scheduler bound
// them, and a node whose heartbeat stops is not marked Unknown unless a test
// calls talosapi.MarkUnknown. Options.RunPods adds kube-controller-manager
// and KWOK, which plays the pods of the nodes the simulated Talos registered
// (Running and Ready; terminating pods deleted once their preStop hook
// ran, at most for their grace period) and never writes a Node
// (docs/world.md); `make world` (cmd/world) runs such a world until stopped.
//
//	make tools build && go test -count=1 ./test/world/
package world
