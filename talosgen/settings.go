package talosgen

import (
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strings"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
)

// DefaultTalosVersion is the version contract used when NodeSettings gives
// none: nodes run Talos 1.12.x.
const DefaultTalosVersion = "v1.12"

// minContract is the oldest contract talosgen renders: the node's network is
// expressed with the multi-document network config (LinkAliasConfig,
// LinkConfig, VLANConfig, DHCPv4Config, HostnameConfig, ResolverConfig),
// which Talos supports from 1.12.
var minContract = coreconfig.TalosVersion1_12

// NodeSettings is what the NodeClass decides for every node it builds.
// The YAML/JSON field names are those of the talosgen-render settings file.
type NodeSettings struct {
	// TalosVersion is the Talos version contract ("v1.12", "v1.13", "1.12.4").
	// Default DefaultTalosVersion. Older than v1.12 is refused.
	TalosVersion string `json:"talosVersion,omitempty"`
	// InstallImage is the installer image used for upgrades, e.g. the Image
	// Factory installer of the schematic em-imager wrote. Empty: Talos's default.
	InstallImage string `json:"installImage,omitempty"`
	// Kubelet settings, rendered into machine.kubelet.extraConfig.
	Kubelet KubeletSettings `json:"kubelet,omitempty"`
	// Labels are extra node labels. A label the kubelet may not set
	// (NodeRestriction) is an error.
	Labels map[string]string `json:"labels,omitempty"`
	// ExtraKernelArgs go to machine.install.extraKernelArgs (they take effect
	// from the next install/upgrade; the image em-imager wrote has its own).
	ExtraKernelArgs []string `json:"extraKernelArgs,omitempty"`
	// ConfigPatches are applied last, in order. Each is one strategic merge
	// patch (a partial machine config, possibly multi-document) or one
	// JSON6902 patch (a JSON or YAML list of operations).
	ConfigPatches []string `json:"configPatches,omitempty"`
	// ClusterDiscovery turns Talos cluster discovery on or off. Nil keeps
	// the default: on, except for a non-Talos control plane whose Secret has
	// no secrets.yaml (there is no shared cluster secret to discover with).
	ClusterDiscovery *bool `json:"clusterDiscovery,omitempty"`
	// AllowValidationWarnings accepts a config that machinery validates with
	// warnings. Default false: a warning is an error.
	AllowValidationWarnings bool `json:"allowValidationWarnings,omitempty"`
	// LocalDisks is the local-disk policy (package localdisks): Unused
	// (default), Ephemeral, UserVolumes or Raw.
	LocalDisks string `json:"localDisks,omitempty"`
	// BootstrapToken, when set, replaces the join material's bootstrap token
	// for this node only (the controller creates it with a short TTL). It is
	// never serialized and never part of the hash.
	BootstrapToken string `json:"-"`
}

// KubeletSettings are the kubelet knobs the NodeClass exposes. Map values are
// Kubernetes quantities (eviction thresholds may also be percentages).
type KubeletSettings struct {
	KubeReserved                map[string]string `json:"kubeReserved,omitempty"`
	SystemReserved              map[string]string `json:"systemReserved,omitempty"`
	EvictionHard                map[string]string `json:"evictionHard,omitempty"`
	MaxPods                     *int32            `json:"maxPods,omitempty"`
	ImageGCHighThresholdPercent *int32            `json:"imageGCHighThresholdPercent,omitempty"`
	ImageGCLowThresholdPercent  *int32            `json:"imageGCLowThresholdPercent,omitempty"`
}

// Network is what the Scaleway API says about the server's addressing.
type Network struct {
	// IPv6Address is the server's IPv6 address; Scaleway routes a single
	// address, so it is configured as a /128 ("2001:db8::1" or "2001:db8::1/128").
	IPv6Address string `json:"ipv6Address,omitempty"`
	// IPv6Gateway is the IPv6 default gateway (link-local or global).
	IPv6Gateway string `json:"ipv6Gateway,omitempty"`
	// Nameservers replace the DHCP-provided resolvers when set.
	Nameservers []string `json:"nameservers,omitempty"`
	// UplinkMAC optionally pins the uplink NIC; it must be in the report.
	// Empty: the NIC the rescue system routed through.
	UplinkMAC string `json:"uplinkMac,omitempty"`
	// PrivateNetworks are VLANs on the uplink (Scaleway private networks).
	PrivateNetworks []PrivateNetwork `json:"privateNetworks,omitempty"`
}

// PrivateNetwork is one Scaleway private network attachment.
type PrivateNetwork struct {
	// VLAN is the VLAN id the baremetal v3 API gave the attachment.
	VLAN uint16 `json:"vlan"`
	// DHCP runs DHCPv4 on the VLAN interface (Scaleway IPAM).
	DHCP bool `json:"dhcp,omitempty"`
	// Addresses are static addresses (CIDR notation) on the VLAN interface.
	Addresses []string `json:"addresses,omitempty"`
	// MTU of the VLAN interface, 1280-1500; 0 keeps the default.
	MTU uint32 `json:"mtu,omitempty"`
}

// normalized is NodeSettings after defaults and checks.
type normalized struct {
	NodeSettings

	contract *coreconfig.VersionContract
	patches  []configpatcher.Patch
	policy   localdisks.Policy
}

func settingsErr(field, format string, args ...any) error {
	return fmt.Errorf("node settings: %s: %s", field, fmt.Sprintf(format, args...))
}

var (
	imageRefRE  = regexp.MustCompile(`^[a-z0-9]+([._/:@-][a-zA-Z0-9_.-]+)*$`)
	kernelArgRE = regexp.MustCompile(`^[^\s"']+$`)
)

func normalizeSettings(s NodeSettings) (*normalized, error) {
	n := &normalized{NodeSettings: s}

	if n.TalosVersion == "" {
		n.TalosVersion = DefaultTalosVersion
	}

	contract, err := parseContract(n.TalosVersion)
	if err != nil {
		return nil, err
	}

	n.contract = contract
	n.TalosVersion = contract.String()

	if n.policy, err = localdisks.Parse(n.LocalDisks); err != nil {
		return nil, settingsErr("localDisks", "%q is not one of %v", n.LocalDisks, localdisks.Policies)
	}

	if n.policy == localdisks.Unused {
		n.LocalDisks = "" // the default: hashes as before the field existed
	}

	if err := checkBootFields(n.InstallImage, n.ExtraKernelArgs); err != nil {
		return nil, err
	}

	if err := n.Kubelet.validate(); err != nil {
		return nil, err
	}

	if n.patches, err = loadPatches(n.ConfigPatches); err != nil {
		return nil, err
	}

	if n.BootstrapToken != "" && !validBootstrapToken(n.BootstrapToken) {
		return nil, settingsErr("bootstrapToken", "not a bootstrap token of the form [a-z0-9]{6}.[a-z0-9]{16}")
	}

	return n, nil
}

// parseContract reads talosVersion as a version contract within the range
// this build can render: multi-document network config is the floor, the
// vendored machinery the ceiling.
func parseContract(version string) (*coreconfig.VersionContract, error) {
	contract, err := coreconfig.ParseContractFromVersion(version)
	if err != nil {
		return nil, settingsErr("talosVersion", "%q is not a Talos version like v1.12", version)
	}

	if minContract.Greater(contract) {
		return nil, settingsErr("talosVersion", "%s is older than %s, the first with multi-document network config", contract, minContract)
	}

	if contract.Greater(coreconfig.TalosVersion1_13) {
		return nil, settingsErr("talosVersion", "%s is newer than this build's machinery (v1.13)", contract)
	}

	return contract, nil
}

// checkBootFields checks the install image and kernel arguments, the two
// settings that end up on the installer's command line.
func checkBootFields(installImage string, kernelArgs []string) error {
	if installImage != "" && !imageRefRE.MatchString(installImage) {
		return settingsErr("installImage", "%q is not an image reference", installImage)
	}

	for i, a := range kernelArgs {
		if !kernelArgRE.MatchString(a) {
			return settingsErr(fmt.Sprintf("extraKernelArgs[%d]", i), "%q is empty or contains spaces or quotes", a)
		}
	}

	return nil
}

// loadPatches parses each config patch; the result is nil when there are none.
func loadPatches(raw []string) ([]configpatcher.Patch, error) {
	var patches []configpatcher.Patch

	for i, p := range raw {
		if strings.TrimSpace(p) == "" {
			return nil, settingsErr(fmt.Sprintf("configPatches[%d]", i), "empty patch")
		}

		patch, err := configpatcher.LoadPatch([]byte(p))
		if err != nil {
			return nil, settingsErr(fmt.Sprintf("configPatches[%d]", i), "neither a strategic merge patch nor a JSON6902 patch: %v", err)
		}

		patches = append(patches, patch)
	}

	return patches, nil
}

var (
	resourceNames = map[string]bool{"cpu": true, "memory": true, "ephemeral-storage": true, "pid": true}
	// the eviction signals kubelet knows on Linux
	evictionSignals = map[string]bool{
		"memory.available": true, "nodefs.available": true, "nodefs.inodesFree": true,
		"imagefs.available": true, "imagefs.inodesFree": true, "containerfs.available": true,
		"containerfs.inodesFree": true, "pid.available": true,
	}
)

func (k KubeletSettings) validate() error {
	for field, m := range map[string]map[string]string{"kubelet.kubeReserved": k.KubeReserved, "kubelet.systemReserved": k.SystemReserved} {
		if err := validateReserved(field, m); err != nil {
			return err
		}
	}

	for _, sig := range sortedKeys(k.EvictionHard) {
		if err := validateEviction(sig, k.EvictionHard[sig]); err != nil {
			return err
		}
	}

	return k.validateCounts()
}

// validateReserved checks one reservation map: known resource names, each a
// non-negative quantity.
func validateReserved(field string, m map[string]string) error {
	for _, name := range sortedKeys(m) {
		if !resourceNames[name] {
			return settingsErr(field, "unknown resource %q (want cpu, memory, ephemeral-storage or pid)", name)
		}

		q, err := resource.ParseQuantity(m[name])
		if err != nil || q.Sign() < 0 {
			return settingsErr(field+"."+name, "%q is not a non-negative quantity", m[name])
		}
	}

	return nil
}

// validateEviction checks one evictionHard entry: a signal kubelet knows and a
// threshold that is either a percentage in 0-100 or a non-negative quantity.
func validateEviction(sig, v string) error {
	if !evictionSignals[sig] {
		return settingsErr("kubelet.evictionHard", "unknown eviction signal %q", sig)
	}

	if pct, ok := strings.CutSuffix(v, "%"); ok {
		var f float64
		if _, err := fmt.Sscanf(pct, "%g", &f); err != nil || f < 0 || f > 100 {
			return settingsErr("kubelet.evictionHard."+sig, "%q is not a percentage in 0-100%%", v)
		}

		return nil
	}

	if q, err := resource.ParseQuantity(v); err != nil || q.Sign() < 0 {
		return settingsErr("kubelet.evictionHard."+sig, "%q is not a quantity or percentage", v)
	}

	return nil
}

// validateCounts checks maxPods and the image GC thresholds, which must also
// be ordered low < high when both are set.
func (k KubeletSettings) validateCounts() error {
	if k.MaxPods != nil && (*k.MaxPods < 1 || *k.MaxPods > 10000) {
		return settingsErr("kubelet.maxPods", "%d is not in 1-10000", *k.MaxPods)
	}

	for field, p := range map[string]*int32{"kubelet.imageGCHighThresholdPercent": k.ImageGCHighThresholdPercent, "kubelet.imageGCLowThresholdPercent": k.ImageGCLowThresholdPercent} {
		if p != nil && (*p < 0 || *p > 100) {
			return settingsErr(field, "%d is not in 0-100", *p)
		}
	}

	if k.ImageGCHighThresholdPercent != nil && k.ImageGCLowThresholdPercent != nil && *k.ImageGCLowThresholdPercent >= *k.ImageGCHighThresholdPercent {
		return settingsErr("kubelet.imageGCLowThresholdPercent", "%d must be lower than imageGCHighThresholdPercent %d", *k.ImageGCLowThresholdPercent, *k.ImageGCHighThresholdPercent)
	}

	return nil
}

// extraConfig renders the settings as KubeletConfiguration fields.
func (k KubeletSettings) extraConfig() map[string]any {
	out := map[string]any{}

	toAny := func(m map[string]string) map[string]any {
		r := make(map[string]any, len(m))
		for key, v := range m {
			r[key] = v
		}

		return r
	}

	if len(k.KubeReserved) > 0 {
		out["kubeReserved"] = toAny(k.KubeReserved)
	}

	if len(k.SystemReserved) > 0 {
		out["systemReserved"] = toAny(k.SystemReserved)
	}

	if len(k.EvictionHard) > 0 {
		out["evictionHard"] = toAny(k.EvictionHard)
	}

	if k.MaxPods != nil {
		out["maxPods"] = int(*k.MaxPods)
	}

	if k.ImageGCHighThresholdPercent != nil {
		out["imageGCHighThresholdPercent"] = int(*k.ImageGCHighThresholdPercent)
	}

	if k.ImageGCLowThresholdPercent != nil {
		out["imageGCLowThresholdPercent"] = int(*k.ImageGCLowThresholdPercent)
	}

	return out
}

// parsedNetwork is Network after checks.
type parsedNetwork struct {
	ipv6        netip.Prefix
	gateway     netip.Addr
	nameservers []netip.Addr
	uplinkMAC   string
	private     []parsedPrivate
}

type parsedPrivate struct {
	vlan      uint16
	dhcp      bool
	addresses []netip.Prefix
	mtu       uint32
}

func networkErr(field, format string, args ...any) error {
	return fmt.Errorf("network: %s: %s", field, fmt.Sprintf(format, args...))
}

// parseNetwork checks the node's network settings and parses them, one
// part after the other, stopping at the first problem.
func parseNetwork(n Network) (*parsedNetwork, error) {
	p := &parsedNetwork{}

	var err error
	if p.ipv6, err = parseIPv6(n); err != nil {
		return nil, err
	}

	if p.gateway, err = parseIPv6Gateway(n, p.ipv6); err != nil {
		return nil, err
	}

	for i, ns := range n.Nameservers {
		a, err := netip.ParseAddr(ns)
		if err != nil || a.IsUnspecified() {
			return nil, networkErr(fmt.Sprintf("nameservers[%d]", i), "%q is not an IP address", ns)
		}

		p.nameservers = append(p.nameservers, a)
	}

	if n.UplinkMAC != "" {
		mac, err := normalizeMAC(n.UplinkMAC)
		if err != nil {
			return nil, networkErr("uplinkMac", "%q is not a MAC address", n.UplinkMAC)
		}

		p.uplinkMAC = mac
	}

	seen := map[uint16]bool{}

	for i, pn := range n.PrivateNetworks {
		pp, err := parsePrivate(fmt.Sprintf("privateNetworks[%d]", i), pn, seen)
		if err != nil {
			return nil, err
		}

		p.private = append(p.private, pp)
	}

	return p, nil
}

// parseIPv6 reads the node's public IPv6 address, the zero prefix when it
// has none. Scaleway routes one address to a server, so only a global /128
// is accepted (a bare address means /128), and it needs its gateway.
func parseIPv6(n Network) (netip.Prefix, error) {
	if n.IPv6Address == "" {
		return netip.Prefix{}, nil
	}

	raw := n.IPv6Address
	if !strings.Contains(raw, "/") {
		raw += "/128"
	}

	pfx, err := netip.ParsePrefix(raw)
	if err != nil || !pfx.Addr().Is6() || pfx.Addr().Is4In6() {
		return netip.Prefix{}, networkErr("ipv6Address", "%q is not an IPv6 address", n.IPv6Address)
	}

	if pfx.Bits() != 128 {
		return netip.Prefix{}, networkErr("ipv6Address", "%q: Scaleway routes a single address, want /128", n.IPv6Address)
	}

	if !pfx.Addr().IsGlobalUnicast() {
		return netip.Prefix{}, networkErr("ipv6Address", "%q is not a global unicast address", n.IPv6Address)
	}

	if n.IPv6Gateway == "" {
		return netip.Prefix{}, networkErr("ipv6Gateway", "required with ipv6Address")
	}

	return pfx, nil
}

// parseIPv6Gateway reads the gateway of the address ipv6 (already parsed):
// a unicast IPv6 address other than the node's own.
func parseIPv6Gateway(n Network, ipv6 netip.Prefix) (netip.Addr, error) {
	if n.IPv6Gateway == "" {
		return netip.Addr{}, nil
	}

	if !ipv6.IsValid() {
		return netip.Addr{}, networkErr("ipv6Gateway", "set without ipv6Address")
	}

	gw, err := netip.ParseAddr(n.IPv6Gateway)
	if err != nil || !gw.Is6() || gw.Is4In6() || gw.IsUnspecified() || gw.IsMulticast() {
		return netip.Addr{}, networkErr("ipv6Gateway", "%q is not a unicast IPv6 address", n.IPv6Gateway)
	}

	if gw == ipv6.Addr() {
		return netip.Addr{}, networkErr("ipv6Gateway", "is the node's own address")
	}

	return gw, nil
}

// parsePrivate checks one private network, named field in messages: a VLAN
// ID not seen before (seen records it), addresses in CIDR notation or DHCP,
// and an MTU the uplink can carry.
func parsePrivate(field string, pn PrivateNetwork, seen map[uint16]bool) (parsedPrivate, error) {
	if pn.VLAN < 1 || pn.VLAN > 4094 {
		return parsedPrivate{}, networkErr(field+".vlan", "%d is not in 1-4094", pn.VLAN)
	}

	if seen[pn.VLAN] {
		return parsedPrivate{}, networkErr(field+".vlan", "VLAN %d appears twice", pn.VLAN)
	}

	seen[pn.VLAN] = true

	pp := parsedPrivate{vlan: pn.VLAN, dhcp: pn.DHCP, mtu: pn.MTU}

	for j, a := range pn.Addresses {
		pfx, err := netip.ParsePrefix(a)
		if err != nil {
			return parsedPrivate{}, networkErr(fmt.Sprintf("%s.addresses[%d]", field, j), "%q is not an address in CIDR notation", a)
		}

		pp.addresses = append(pp.addresses, pfx)
	}

	if !pp.dhcp && len(pp.addresses) == 0 {
		return parsedPrivate{}, networkErr(field, "VLAN %d has neither dhcp nor addresses", pn.VLAN)
	}

	// A VLAN cannot exceed its parent's MTU, and the uplink also carries
	// the public network, which stays at 1500.
	if pn.MTU != 0 && (pn.MTU < 1280 || pn.MTU > 1500) {
		return parsedPrivate{}, networkErr(field+".mtu", "%d is not in 1280-1500 (the uplink carries the public network at 1500)", pn.MTU)
	}

	return pp, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}

	sort.Strings(keys)

	return keys
}
