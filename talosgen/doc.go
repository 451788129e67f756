// Package talosgen renders and validates the Talos machine config of one
// Elastic Metal node, with github.com/siderolabs/talos/pkg/machinery.
//
// The controller calls, per node:
//
//	join, err := talosgen.ParseJoinSecret("ns/name", secret.Data) // the Secret the NodeClass names
//	out, err := talosgen.Render(join, nodeClaim, settings, report, network)
//	// out.Config: multi-document YAML for ApplyConfiguration
//	// out.Hash:   talosgen.InputsHash(join, settings), for drift
//
// Inputs:
//   - JoinMaterial (ParseJoinSecret): a Talos secrets bundle + endpoint +
//     cluster name; or a complete worker config (worker.yaml, or CABPT's
//     value/format); or, for control planes that are not Talos (Kamaji),
//     ca.crt + token + endpoint. Key names are the Key* constants; README.md
//     has the table.
//   - the NodeClaim: name -> hostname, status.providerID -> kubelet
//     provider-id, labels -> node labels, spec.taints + spec.startupTaints +
//     karpenter.sh/unregistered:NoExecute -> kubelet registerWithTaints.
//   - NodeSettings (from the NodeClass): version contract (default v1.12),
//     install image, kubelet settings, labels, kernel args, config patches
//     (applied last; JSON6902 ones address the v1alpha1 document), discovery,
//     strictness, per-NodeClaim bootstrap token.
//   - the em-imager report (imager/report): the uplink NIC by permanent MAC
//     and the install disk (by serial, else path).
//   - Network (Scaleway API): IPv6 /128 + gateway, nameservers, private
//     network VLANs.
//
// Output is validated in metal mode, strictly (warnings are errors unless
// NodeSettings.AllowValidationWarnings), and re-read to check that patches
// kept providerID, hostname, taints, labels and the uplink selector.
//
// Errors name the input field and the reason; they never contain secret
// values (tokens, keys), and JoinMaterial prints redacted.
//
// cmd/talosgen-render renders a config from files, for operators.
package talosgen
