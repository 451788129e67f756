package talosgen

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	jsonpatch "github.com/evanphx/json-patch"
	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/network"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// hashVersion is mixed into InputsHash. Bump it when talosgen starts
// rendering the same inputs differently in a way nodes must pick up.
const hashVersion = "talosgen/1"

// Output is a rendered, validated machine config.
type Output struct {
	// Config is the multi-document machine config, ready for ApplyConfiguration.
	Config []byte
	// Hash is InputsHash(join, settings): it changes when the NodeClass or
	// the join material change in a way that matters for drift.
	Hash string
	// Warnings are machinery validation warnings; only ever non-empty when
	// NodeSettings.AllowValidationWarnings is set (else they are errors).
	Warnings []string
}

// InputsHash is a stable hash of the drift-relevant inputs: the join
// material (minus bootstrap tokens and generated secrets) and the NodeClass
// settings (minus the per-NodeClaim bootstrap token). Per-node facts
// (name, providerID, hardware, addresses) are not part of it: they differ
// between nodes without making any of them drifted. Invalid settings hash
// too (their raw form), so the controller can compare without rendering.
func InputsHash(join *JoinMaterial, s NodeSettings) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", hashVersion)

	if join != nil {
		fmt.Fprintf(h, "join=%s\n", join.fingerprint)
	}

	if n, err := normalizeSettings(s); err == nil {
		s = n.NodeSettings
	}

	s.BootstrapToken = ""

	// encoding/json sorts map keys, so this is canonical
	b, _ := json.Marshal(s) //nolint:errchkjson // plain data, cannot fail
	h.Write(b)

	return hex.EncodeToString(h.Sum(nil))
}

// metalMode is Talos's runtime mode on bare metal: installs to disk, not in
// a container. Machinery only has the interface; machined has the modes.
type metalMode struct{}

func (metalMode) String() string        { return "metal" }
func (metalMode) RequiresInstall() bool { return true }
func (metalMode) InContainer() bool     { return false }

// Render builds the machine config of one node: join material + NodeClaim +
// NodeClass settings + em-imager's hardware report + Scaleway addressing.
// The result is validated with machinery in metal mode (strict unless
// s.AllowValidationWarnings). Errors never contain secret values.
func Render(join *JoinMaterial, nc *karpv1.NodeClaim, s NodeSettings, hw *report.Report, net Network) (*Output, error) {
	if join == nil {
		return nil, errors.New("join material is nil")
	}

	secretVals := join.secretValues()
	if s.BootstrapToken != "" {
		secretVals = append(secretVals, s.BootstrapToken)
	}

	out, err := render(join, nc, s, hw, net)
	if err != nil {
		return nil, scrubError(err, secretVals)
	}

	return out, nil
}

// render is Render without the scrubbing of secrets from its errors, in
// three steps: plan (check and parse every input, decide what the node
// gets), build (the machine config documents, patched and encoded), and
// validate (what the node will parse, as machinery and our invariants
// see it).
func render(join *JoinMaterial, nc *karpv1.NodeClaim, s NodeSettings, hw *report.Report, netIn Network) (*Output, error) {
	p, err := plan(join, nc, s, hw, netIn)
	if err != nil {
		return nil, err
	}

	raw, err := p.build()
	if err != nil {
		return nil, err
	}

	warnings, err := p.validate(raw)
	if err != nil {
		return nil, err
	}

	return &Output{Config: raw, Hash: InputsHash(join, s), Warnings: warnings}, nil
}

// nodePlan is what render decided for one node before building anything.
type nodePlan struct {
	join     *JoinMaterial
	nc       *karpv1.NodeClaim
	settings *normalized
	// labels are the node's labels: the NodeClaim's and the NodeClass's,
	// then what its disks really are.
	labels map[string]string
	taints []corev1.Taint
	netw   *parsedNetwork
	uplink *uplinkNIC
	disks  *diskPlan
	// installDisk is the path of the disk em-imager wrote.
	installDisk string
	// token is the bootstrap token the node joins with: the NodeClaim's
	// own, or empty for the join secret's.
	token string
	// discovery is the cluster discovery setting the node gets.
	discovery *bool
}

// plan checks and parses every input, in the order their errors are
// reported, and decides what the node gets.
func plan(join *JoinMaterial, nc *karpv1.NodeClaim, s NodeSettings, hw *report.Report, netIn Network) (*nodePlan, error) {
	if err := checkClaim(nc, hw); err != nil {
		return nil, err
	}

	p := &nodePlan{join: join, nc: nc}

	var err error
	if p.settings, err = normalizeSettings(s); err != nil {
		return nil, err
	}

	if p.labels, _, err = nodeLabels(nc, p.settings.Labels); err != nil {
		return nil, err
	}

	if p.taints, err = registerTaints(nc); err != nil {
		return nil, err
	}

	if p.netw, err = parseNetwork(netIn); err != nil {
		return nil, err
	}

	if err := checkReport(hw); err != nil {
		return nil, err
	}

	if p.uplink, err = pickUplink(hw, p.netw.uplinkMAC); err != nil {
		return nil, err
	}

	if p.disks, err = planDisks(hw, p.settings.policy); err != nil {
		return nil, err
	}

	// What the disks really are wins over the catalogue's prediction
	// (the NodeClaim's labels).
	maps.Copy(p.labels, p.disks.labels)
	p.installDisk = hw.Disk.Path

	if p.token, p.discovery, err = joinPlan(join, p.settings); err != nil {
		return nil, err
	}

	return p, nil
}

// checkClaim refuses a missing NodeClaim or report, and a NodeClaim that
// cannot name a node.
func checkClaim(nc *karpv1.NodeClaim, hw *report.Report) error {
	if nc == nil {
		return errors.New("nodeclaim is nil")
	}

	if hw == nil {
		return errors.New("hardware report is nil")
	}

	if err := checkHostname(nc.Name); err != nil {
		return fmt.Errorf("nodeclaim %q: name is not usable as a hostname: %w", nc.Name, err)
	}

	if nc.Status.ProviderID == "" {
		return fmt.Errorf("nodeclaim %q: status.providerID is empty", nc.Name)
	}

	return nil
}

// checkReport refuses a report of a failed write, or one without the disk
// it wrote: no config for a node that would not boot it.
func checkReport(hw *report.Report) error {
	if !hw.OK {
		code := "unknown"
		if hw.Error != nil {
			code = hw.Error.Code
		}

		return fmt.Errorf("hardware report: em-imager failed (%s); no config for a node whose disk was not written", code)
	}

	if hw.Disk == nil || (hw.Disk.Path == "" && hw.Disk.Serial == "") {
		return errors.New("hardware report: no install disk (disk.path and disk.serial are empty)")
	}

	return nil
}

// joinPlan decides the node's bootstrap token and cluster discovery from
// the join material: a join secret without a token needs the NodeClaim's
// own, and discovery needs the cluster's Talos secrets (it is off without
// them).
func joinPlan(join *JoinMaterial, settings *normalized) (token string, discovery *bool, err error) {
	token = settings.BootstrapToken

	if token == "" && join.form == FormKubernetes && join.bundle.Secrets.BootstrapToken == "" {
		return "", nil, fmt.Errorf("join secret %q: missing key %s and no per-NodeClaim bootstrap token given", join.secretName, KeyToken)
	}

	discovery = settings.ClusterDiscovery
	if !join.HasTalosSecrets() {
		if discovery != nil && *discovery {
			return "", nil, fmt.Errorf("node settings: clusterDiscovery: needs the cluster's Talos secrets; add %s to join secret %q", KeySecretsBundle, join.secretName)
		}

		discovery = new(false)
	}

	return token, discovery, nil
}

// build makes the machine config the plan describes: the base documents,
// the node's own fields, network and disk documents, then the NodeClass
// patches; and encodes it.
func (p *nodePlan) build() ([]byte, error) {
	base, err := baseConfig(p.join, p.settings, p.discovery)
	if err != nil {
		return nil, err
	}

	netDocs, err := networkDocuments(p.nc.Name, p.uplink, p.netw)
	if err != nil {
		return nil, err
	}

	diskDocs, err := p.disks.documents()
	if err != nil {
		return nil, err
	}

	patched, err := base.PatchV1Alpha1(func(c *v1alpha1.Config) error {
		return applyNode(c, p.join, p.settings, p.nc, p.labels, p.taints, p.disks, p.installDisk, p.token, p.discovery)
	})
	if err != nil {
		return nil, err
	}

	docs, err := mergeDocuments(patched, append(netDocs, diskDocs...), len(p.netw.nameservers) > 0)
	if err != nil {
		return nil, err
	}

	cfg, err := container.New(docs...)
	if err != nil {
		return nil, fmt.Errorf("assembling config: %w", err)
	}

	final, err := applyPatches(cfg, p.settings.patches)
	if err != nil {
		return nil, err
	}

	raw, err := final.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return nil, fmt.Errorf("encoding config: %w", err)
	}

	return raw, nil
}

// validate checks what the node will parse, not the in-memory form:
// machinery in metal mode (strict unless AllowValidationWarnings; its
// warnings are returned), then what the NodeClass patches must not have
// undone (checkInvariants).
func (p *nodePlan) validate(raw []byte) ([]string, error) {
	loaded, err := configloader.NewFromBytes(raw)
	if err != nil {
		return nil, fmt.Errorf("rendered config does not load: %w", err)
	}

	opts := []validation.Option{}
	if !p.settings.AllowValidationWarnings {
		opts = append(opts, validation.WithStrict())
	}

	warnings, err := loaded.Validate(metalMode{}, opts...)
	if err != nil {
		return nil, fmt.Errorf("config is invalid for Talos %s (metal mode): %w", p.settings.contract, oneLine(err))
	}

	if err := checkInvariants(loaded, p.nc, p.labels, p.taints, p.uplink); err != nil {
		return nil, fmt.Errorf("node settings: configPatches: %w", err)
	}

	return warnings, nil
}

// applyPatches applies the NodeClass patches in order. Machinery applies
// JSON6902 only to single-document configs, so a JSON6902 patch addresses
// the v1alpha1 document (paths like /machine/...), the way talosctl users
// know them; strategic merge patches may touch any document.
func applyPatches(cfg coreconfig.Provider, patches []configpatcher.Patch) (coreconfig.Provider, error) {
	for i, p := range patches {
		field := fmt.Sprintf("node settings: configPatches[%d]", i)

		var err error
		if jp, isJSON := p.(jsonpatch.Patch); isJSON {
			cfg, err = applyJSON6902(cfg, jp, field)
		} else {
			cfg, err = applyStrategic(cfg, p, field)
		}

		if err != nil {
			return nil, err
		}
	}

	return cfg, nil
}

// applyStrategic applies one strategic merge patch, which may touch any
// document.
func applyStrategic(cfg coreconfig.Provider, p configpatcher.Patch, field string) (coreconfig.Provider, error) {
	res, err := configpatcher.Apply(configpatcher.WithConfig(cfg), []configpatcher.Patch{p})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}

	if cfg, err = res.Config(); err != nil {
		return nil, fmt.Errorf("%s: result is not a machine config: %w", field, err)
	}

	return cfg, nil
}

// applyJSON6902 applies one JSON6902 patch to the v1alpha1 document alone
// and puts the other documents back beside it.
func applyJSON6902(cfg coreconfig.Provider, jp jsonpatch.Patch, field string) (coreconfig.Provider, error) {
	v1 := cfg.RawV1Alpha1()
	if v1 == nil {
		return nil, fmt.Errorf("%s: no v1alpha1 document to apply a JSON6902 patch to", field)
	}

	v1Bytes, err := container.NewV1Alpha1(v1).EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}

	patched, err := configpatcher.JSON6902(v1Bytes, jp)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}

	loaded, err := configloader.NewFromBytes(patched)
	if err != nil {
		return nil, fmt.Errorf("%s: result is not a machine config: %w", field, err)
	}

	newV1 := loaded.RawV1Alpha1()
	if newV1 == nil || len(loaded.Documents()) != 1 {
		return nil, fmt.Errorf("%s: result is not a single v1alpha1 document", field)
	}

	docs := []config.Document{newV1}

	for _, d := range cfg.Documents() {
		if _, isV1 := d.(*v1alpha1.Config); !isV1 {
			docs = append(docs, d)
		}
	}

	if cfg, err = container.New(docs...); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}

	return cfg, nil
}

var (
	multiErrHeadRE = regexp.MustCompile(`\d+ errors? occurred:`)
	multiErrItemRE = regexp.MustCompile(`\s*\n\s*\*\s*`)
)

// oneLine flattens machinery's multierror text into one line for
// conditions and events; errors.Is/As still see the original.
func oneLine(err error) error {
	msg := multiErrHeadRE.ReplaceAllString(err.Error(), "")
	msg = multiErrItemRE.ReplaceAllString(msg, "; ")
	msg = strings.Trim(strings.Join(strings.Fields(msg), " "), "; ")
	msg = strings.ReplaceAll(strings.ReplaceAll(msg, ": ;", ":"), ":;", ":")

	return &scrubbedError{msg: msg, err: err}
}

// baseConfig is the cluster-wide worker config: generated by machinery from
// the bundle, or the operator's base config.
func baseConfig(join *JoinMaterial, s *normalized, discovery *bool) (coreconfig.Provider, error) {
	if join.form == FormWorkerConfig {
		return join.base.Clone(), nil
	}

	opts := []generate.Option{
		generate.WithSecretsBundle(join.bundle),
		generate.WithVersionContract(s.contract),
	}

	if discovery != nil {
		opts = append(opts, generate.WithClusterDiscovery(*discovery))
	}

	if join.dnsDomain != "" {
		opts = append(opts, generate.WithDNSDomain(join.dnsDomain))
	}

	in, err := generate.NewInput(join.clusterName, join.endpoint.String(), join.kubernetesVersion, opts...)
	if err != nil {
		return nil, fmt.Errorf("generating worker config: %w", err)
	}

	if len(join.podCIDR) > 0 {
		in.PodNet = join.podCIDR
	}

	if len(join.serviceCIDR) > 0 {
		in.ServiceNet = join.serviceCIDR
	}

	cfg, err := in.Config(machine.TypeWorker)
	if err != nil {
		return nil, fmt.Errorf("generating worker config: %w", err)
	}

	return cfg, nil
}

// applyNode writes the per-node and NodeClass parts into the v1alpha1
// document: the cluster section (token, and what a worker-config join secret
// says about the cluster), the kubelet, the node labels and the install.
func applyNode(c *v1alpha1.Config, join *JoinMaterial, s *normalized, nc *karpv1.NodeClaim,
	labels map[string]string, taints []corev1.Taint, disks *diskPlan, diskPath, token string, discovery *bool,
) error {
	m, cl := c.MachineConfig, c.ClusterConfig
	if m == nil || cl == nil {
		return errors.New("base config has no machine or cluster section")
	}

	if token != "" {
		cl.BootstrapToken = token
	}

	if cl.BootstrapToken == "" {
		return fmt.Errorf("join secret %q: no bootstrap token (cluster.token) and no per-NodeClaim token given", join.secretName)
	}

	if join.form == FormWorkerConfig {
		if err := clearLegacyNetwork(c, join.secretName); err != nil {
			return err
		}

		applyWorkerCluster(cl, join, discovery)
	}

	applyKubelet(m, join, s, nc.Status.ProviderID, labels, taints)

	if len(labels) > 0 {
		if m.MachineNodeLabels == nil {
			m.MachineNodeLabels = map[string]string{}
		}

		for key, v := range labels {
			m.MachineNodeLabels[key] = v
		}
	}

	applyInstall(m, s, disks, diskPath)

	return nil
}

// applyWorkerCluster writes what a worker-config join secret overrides about
// the cluster: discovery, when the NodeClass sets it, and the cluster
// network's DNS domain and subnets, when the secret names them.
func applyWorkerCluster(cl *v1alpha1.ClusterConfig, join *JoinMaterial, discovery *bool) {
	if discovery != nil {
		if cl.ClusterDiscoveryConfig == nil {
			cl.ClusterDiscoveryConfig = &v1alpha1.ClusterDiscoveryConfig{}
		}

		cl.ClusterDiscoveryConfig.DiscoveryEnabled = new(*discovery)
	}

	if join.dnsDomain == "" && len(join.podCIDR) == 0 && len(join.serviceCIDR) == 0 {
		return
	}

	if cl.ClusterNetwork == nil {
		cl.ClusterNetwork = &v1alpha1.ClusterNetworkConfig{}
	}

	if join.dnsDomain != "" {
		cl.ClusterNetwork.DNSDomain = join.dnsDomain
	}

	if len(join.podCIDR) > 0 {
		cl.ClusterNetwork.PodSubnet = join.podCIDR
	}

	if len(join.serviceCIDR) > 0 {
		cl.ClusterNetwork.ServiceSubnet = join.serviceCIDR
	}
}

// applyKubelet writes the kubelet's part: cluster DNS from the join secret,
// the provider ID, and the labels and taints the Node registers with, over
// the base's extra config and the NodeClass's kubelet settings.
func applyKubelet(m *v1alpha1.MachineConfig, join *JoinMaterial, s *normalized, providerID string,
	labels map[string]string, taints []corev1.Taint,
) {
	if m.MachineKubelet == nil {
		m.MachineKubelet = &v1alpha1.KubeletConfig{}
	}

	k := m.MachineKubelet

	if len(join.clusterDNS) > 0 {
		k.KubeletClusterDNS = join.clusterDNS
	}

	if k.KubeletExtraArgs == nil {
		k.KubeletExtraArgs = v1alpha1.Args{}
	}

	k.KubeletExtraArgs["provider-id"] = v1alpha1.NewArgValue(providerID, nil)
	// Labels at registration: machine.nodeLabels are applied by Talos
	// only once the Node exists, and Karpenter looks at a fresh Node.
	if len(labels) > 0 {
		k.KubeletExtraArgs["node-labels"] = v1alpha1.NewArgValue(labelsArg(labels), nil)
	}

	extra := map[string]any{}
	for key, v := range k.KubeletExtraConfig.Object {
		extra[key] = v
	}

	for key, v := range s.Kubelet.extraConfig() {
		extra[key] = v
	}

	// Talos's machine.nodeTaints are applied after registration and the
	// NodeRestriction admission refuses them from a worker: taints go in
	// at registration through the kubelet itself.
	extra["registerWithTaints"] = taintsConfig(taints)
	k.KubeletExtraConfig = v1alpha1.Unstructured{Object: extra}
}

// applyInstall writes the install section: the disk, the installer image
// and the NodeClass's kernel arguments.
func applyInstall(m *v1alpha1.MachineConfig, s *normalized, disks *diskPlan, diskPath string) {
	if m.MachineInstall == nil {
		m.MachineInstall = &v1alpha1.InstallConfig{}
	}

	inst := m.MachineInstall

	// The disk em-imager wrote, by an identity that survives kernel
	// renaming (nvme and sd numbering changes between boots).
	disks.applyInstallDisk(inst, diskPath)

	if s.InstallImage != "" {
		inst.InstallImage = s.InstallImage
	}

	if len(s.ExtraKernelArgs) > 0 {
		// Deprecated upstream in favour of Image Factory schematics; still how
		// a NodeClass adds kernel arguments to an installed GRUB image.
		inst.InstallExtraKernelArgs = append(inst.InstallExtraKernelArgs, s.ExtraKernelArgs...) //nolint:staticcheck // SA1019, see above
		// machinery refuses extraKernelArgs together with grubUseUKICmdline
		inst.InstallGrubUseUKICmdline = new(false)
	}
}

// clearLegacyNetwork removes the hostname settings of a base config (the
// hostname is the NodeClaim's) and refuses legacy interface settings, which
// would fight the uplink documents talosgen writes.
func clearLegacyNetwork(c *v1alpha1.Config, secret string) error {
	m := c.MachineConfig

	//nolint:staticcheck // reading the legacy fields on purpose
	if nw := m.MachineNetwork; nw != nil {
		if len(nw.NetworkInterfaces) > 0 {
			return fmt.Errorf("join secret %q: key %s: machine.network.interfaces is set; talosgen owns the node's links (use a config patch for extra links)", secret, KeyWorkerConfig)
		}

		nw.NetworkHostname = ""
	}

	if m.MachineFeatures != nil {
		m.MachineFeatures.StableHostname = nil //nolint:staticcheck // legacy field conflicts with HostnameConfig
	}

	return nil
}

// mergeDocuments puts the node's network documents next to the base
// config's other documents. The base's HostnameConfig (and ResolverConfig
// when the node has nameservers) is replaced; any other clash is an error.
func mergeDocuments(base coreconfig.Provider, netDocs []config.Document, replaceResolver bool) ([]config.Document, error) {
	ours := map[string]bool{}
	for _, d := range netDocs {
		ours[docKey(d)] = true
	}

	var docs []config.Document

	if v := base.RawV1Alpha1(); v != nil {
		docs = append(docs, v)
	}

	for _, d := range base.Documents() {
		if _, isV1 := d.(*v1alpha1.Config); isV1 {
			continue
		}

		switch d.Kind() {
		case network.HostnameKind:
			continue
		case network.ResolverKind:
			if replaceResolver {
				continue
			}
		}

		if ours[docKey(d)] {
			return nil, fmt.Errorf("base config already has a %s document named %q, which talosgen writes", d.Kind(), docName(d))
		}

		docs = append(docs, d)
	}

	return append(docs, netDocs...), nil
}

func docName(d config.Document) string {
	if n, ok := d.(config.NamedDocument); ok {
		return n.Name()
	}

	return ""
}

func docKey(d config.Document) string { return d.Kind() + "/" + docName(d) }

func checkHostname(name string) error {
	switch {
	case name == "":
		return errors.New("empty")
	case len(name) > 63:
		return fmt.Errorf("%d characters, at most 63", len(name))
	}

	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' && i > 0 && i < len(name)-1
		if !ok {
			return fmt.Errorf("character %q at %d (want lower-case letters, digits, inner dashes)", r, i)
		}
	}

	return nil
}

// checkInvariants re-reads the final config and makes sure user patches did
// not undo what registration depends on.
func checkInvariants(cfg coreconfig.Provider, nc *karpv1.NodeClaim, labels map[string]string, taints []corev1.Taint, up *uplinkNIC) error {
	facts, err := ReadFacts(cfg)
	if err != nil {
		return err
	}

	if facts.ProviderID != nc.Status.ProviderID {
		return fmt.Errorf("kubelet provider-id is %q, must be %q", facts.ProviderID, nc.Status.ProviderID)
	}

	if len(cfg.Machine().NodeTaints()) > 0 {
		return errors.New("machine.nodeTaints is set; Talos applies it after registration and NodeRestriction refuses it from a worker: put taints on the NodePool")
	}

	if facts.Hostname != nc.Name {
		return fmt.Errorf("hostname is %q, must be %q", facts.Hostname, nc.Name)
	}

	if err := checkRegistration(facts, labels, taints); err != nil {
		return err
	}

	if !strings.Contains(facts.UplinkSelector, up.mac) {
		return fmt.Errorf("uplink alias %q no longer selects MAC %s", UplinkLink, up.mac)
	}

	return nil
}

// checkRegistration makes sure the config still registers the node with
// every taint and label Karpenter expects.
func checkRegistration(facts *Facts, labels map[string]string, taints []corev1.Taint) error {
	for _, t := range taints {
		if !slices.ContainsFunc(facts.RegisterWithTaints, func(got corev1.Taint) bool {
			return got.Key == t.Key && got.Effect == t.Effect && got.Value == t.Value
		}) {
			return fmt.Errorf("registerWithTaints lacks %s:%s", t.Key, t.Effect)
		}
	}

	for k, v := range labels {
		if facts.NodeLabels[k] != v {
			return fmt.Errorf("node label %q is %q, must be %q", k, facts.NodeLabels[k], v)
		}
	}

	return nil
}

// Facts are the registration-relevant fields of a rendered config, read back
// through machinery. Tests and the simulated Talos API use them.
type Facts struct {
	Hostname           string
	ProviderID         string
	NodeLabels         map[string]string // machine.nodeLabels
	KubeletNodeLabels  string            // kubelet --node-labels
	RegisterWithTaints []corev1.Taint
	UplinkSelector     string // CEL expression of the uplink LinkAliasConfig
	UplinkAddresses    []netip.Prefix
	InstallDisk        string // path, or "<field>:<value>" when selected by wwid, serial or busPath
	// Volumes are the volume documents: VolumeConfig and UserVolumeConfig
	// names with their disk selectors.
	Volumes        []VolumeFact
	BootstrapToken string
	Endpoint       string
}

// ReadFacts extracts Facts from a loaded config.
func ReadFacts(cfg coreconfig.Provider) (*Facts, error) {
	f := &Facts{}

	if h := cfg.NetworkHostnameConfig(); h != nil {
		f.Hostname = h.Hostname()
	}

	m := cfg.RawV1Alpha1()
	if m == nil || m.MachineConfig == nil {
		return nil, errors.New("config has no v1alpha1 machine section")
	}

	if err := f.readKubelet(m.MachineConfig.MachineKubelet); err != nil {
		return nil, err
	}

	f.NodeLabels = m.MachineConfig.MachineNodeLabels
	f.InstallDisk = installDiskFact(m.MachineConfig.MachineInstall)
	f.Volumes = volumeFacts(cfg)
	f.BootstrapToken, f.Endpoint = clusterFacts(m.ClusterConfig)
	f.readUplink(cfg)

	return f, nil
}

// readKubelet reads the kubelet's provider ID, node labels and taints; a
// config without a kubelet section leaves them empty.
func (f *Facts) readKubelet(k *v1alpha1.KubeletConfig) error {
	if k == nil {
		return nil
	}

	args := k.KubeletExtraArgs.ToMap()
	f.ProviderID = strings.Join(args["provider-id"], ",")
	f.KubeletNodeLabels = strings.Join(args["node-labels"], ",")

	raw, ok := k.KubeletExtraConfig.Object["registerWithTaints"]
	if !ok {
		return nil
	}

	b, err := json.Marshal(raw)
	if err != nil {
		return fmt.Errorf("kubelet registerWithTaints: %w", err)
	}

	if err := json.Unmarshal(b, &f.RegisterWithTaints); err != nil {
		return fmt.Errorf("kubelet registerWithTaints is not a list of taints: %w", err)
	}

	return nil
}

// installDiskFact is the install disk as a path, or as "<field>:<value>" of
// the disk selector when one is set; of several, busPath wins over serial and
// serial over wwid.
func installDiskFact(inst *v1alpha1.InstallConfig) string {
	if inst == nil {
		return ""
	}

	disk := inst.InstallDisk

	if sel := inst.InstallDiskSelector; sel != nil {
		for _, id := range []DiskID{{IDWWID, sel.WWID}, {IDSerial, sel.Serial}, {"busPath", sel.BusPath}} {
			if id.Value != "" {
				disk = id.String()
			}
		}
	}

	return disk
}

// clusterFacts reads the bootstrap token and control-plane endpoint URL.
func clusterFacts(cl *v1alpha1.ClusterConfig) (token, endpoint string) {
	if cl == nil {
		return "", ""
	}

	if cl.ControlPlane != nil && cl.ControlPlane.Endpoint != nil && cl.ControlPlane.Endpoint.URL != nil {
		endpoint = cl.ControlPlane.Endpoint.URL.String()
	}

	return cl.BootstrapToken, endpoint
}

// readUplink reads the uplink's link selector and static addresses.
func (f *Facts) readUplink(cfg coreconfig.Provider) {
	for _, a := range cfg.NetworkLinkAliasConfigs() {
		if a.Name() == UplinkLink {
			f.UplinkSelector = a.LinkSelector().String()
		}
	}

	for _, l := range cfg.NetworkCommonLinkConfigs() {
		if l.Name() == UplinkLink {
			for _, a := range l.Addresses() {
				f.UplinkAddresses = append(f.UplinkAddresses, a.Address())
			}
		}
	}
}
