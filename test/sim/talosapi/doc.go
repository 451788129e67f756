// Package talosapi plays Talos on a simulated Elastic Metal server once it
// boots from a disk that holds a Talos-like image (see test/sim/diskimage).
//
// Maintenance is the maintenance-mode Talos API on <ipv4>:50000: gRPC with
// Talos's own MachineService types (github.com/siderolabs/talos/pkg/machinery
// api/machine), over TLS with a self-signed certificate, so clients connect
// the way `talosctl --insecure` does:
//
//	c, _ := client.New(ctx, client.WithEndpoints(addr), client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}))
//	_, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: cfgYAML, Mode: machine.ApplyConfigurationRequest_AUTO})
//
// ApplyConfiguration behaves like Talos's maintenance service: modes reboot,
// auto and try are accepted (no-reboot and staged: codes.Unimplemented), the
// config is parsed with configloader (a parse error comes back as
// "failed to parse config: ..." with codes.Unknown) and validated for metal
// mode (codes.InvalidArgument "configuration validation failed: ..."), dry
// runs change nothing. Once a config is accepted the server stops listening,
// as Talos leaves maintenance mode. Version answers codes.Unimplemented "API
// is not implemented in maintenance mode", as it does for non-SideroLink
// clients of a real node.
//
// Kubelet registers the Node with the kube-apiserver as kubelet would from
// the accepted config:
//   - name: the hostname (HostnameConfig document or machine.network.hostname),
//     else a stable talos-xxxx-xxxx;
//   - spec.providerID: kubelet extra arg provider-id (or extraConfig providerID);
//   - labels: kubelet defaults (hostname, os, arch), extra arg node-labels,
//     machine.nodeLabels; annotations: machine.nodeAnnotations;
//   - taints: kubelet extraConfig registerWithTaints, extra arg
//     register-with-taints, machine.nodeTaints;
//   - capacity: cpu threads, memory, ephemeral-storage, pods (110 or
//     extraConfig maxPods); allocatable subtracts systemReserved (Talos
//     defaults cpu 50m, memory 384Mi, ephemeral-storage 256Mi), kubeReserved
//     and evictionHard (memory.available 100Mi, nodefs.available 10%), each
//     replaced by the extraConfig key of the same name when present;
//   - addresses (IPv4 and IPv6 InternalIP, Hostname), nodeInfo (kubelet
//     version from the kubelet image tag, OS image "Talos (<version>)", arch);
//   - Ready=True (or False "KubeletNotReady" with NeverReady), then a Lease in
//     kube-node-lease and the Ready heartbeat every HeartbeatInterval.
//
// JoinPolicy makes configs that could not join fail to register: the
// bootstrap token must exist as a kube-system bootstrap-token Secret, the
// cluster CA and the endpoint must match. MarkUnknown does what the node
// lifecycle controller would after a heartbeat stops (no
// kube-controller-manager runs in the simulated world).
//
// Tests use machinery's client and a real kube-apiserver (test/testenv; run
// `make tools` once):
//
//	go test -count=1 -race ./test/sim/talosapi/
package talosapi
