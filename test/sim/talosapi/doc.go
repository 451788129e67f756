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
// ApplyConfiguration behaves like Talos 1.12's maintenance service
// (internal/app/maintenance, controllers/runtime/maintenance_service.go):
// modes reboot, auto and try are accepted (no-reboot and staged:
// codes.Unimplemented), the config is parsed with configloader (a parse
// error comes back as "failed to parse config: ..." with codes.Unknown) and
// validated for metal mode (codes.InvalidArgument "configuration validation
// failed: ..."), dry runs change nothing. The first config wins: for
// LeaveDelay afterwards (machined reacting) a second apply is answered OK
// and ignored; then the service stops gracefully — new calls are refused,
// calls stuck on the config channel lose their connection after
// ShutdownTimeout (5 s) — and nothing listens. Version, Upgrade, Reset,
// MetaWrite and MetaDelete answer codes.Unimplemented "API is not
// implemented in maintenance mode" (MsgNotInMaintenance), as they do for
// non-SideroLink clients of a real node. Calls() records every call.
//
// API is apid of a configured node on the same port: mutual TLS with the
// machine CA of its config, so an insecure client (maintenance-mode style,
// or an attacker) is asked for a client certificate and fails the
// handshake. It records every handshake attempt and call.
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
//     kube-node-lease renewed every HeartbeatInterval, and the node's status
//     written again only when it changed (another writer's Ready=False is
//     undone, their own conditions kept) or every StatusReportInterval, as
//     kubelet does since node leases;
//   - the annotation AnnotationKubelet, by which the world's KWOK knows the
//     nodes whose pods it plays (it never writes the Node itself).
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
