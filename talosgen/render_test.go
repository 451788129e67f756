package talosgen

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// goldenCase is one representative node.
type goldenCase struct {
	name     string
	secret   func(t *testing.T) map[string][]byte
	nc       *karpv1.NodeClaim
	settings NodeSettings
	report   *report.Report
	network  Network
	check    func(t *testing.T, f *Facts, raw string)
}

func int32p(v int32) *int32 { return &v }

func goldenCases() []goldenCase {
	gpu := testNodeClaim("gpu-pool-7xk2p")
	gpu.Labels[corev1.LabelInstanceTypeStable] = "EM-L40S-GPU"
	gpu.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	gpu.Spec.StartupTaints = []corev1.Taint{{Key: "node.cilium.io/agent-not-ready", Value: "true", Effect: corev1.TaintEffectNoExecute}}

	return []goldenCase{
		{
			name:    "secrets-bundle",
			secret:  func(t *testing.T) map[string][]byte { return bundleSecretData(fixedBundle(t)) },
			nc:      testNodeClaim("bare-metal-abcde"),
			report:  testReport(),
			network: testNetwork(),
		},
		{
			name: "base-config",
			secret: func(t *testing.T) map[string][]byte {
				return map[string][]byte{KeyWorkerConfig: workerConfigFrom(t, loadBundleBytes(t, fixedBundle(t)))}
			},
			nc:       testNodeClaim("bare-metal-fghij"),
			settings: NodeSettings{InstallImage: "factory.talos.dev/installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.12.4"},
			report:   testReport(),
			network:  testNetwork(),
		},
		{
			// Kamaji: Kubernetes CA + token + endpoint; secrets.yaml only for
			// the Talos side (so the golden is deterministic).
			name: "kamaji",
			secret: func(t *testing.T) map[string][]byte {
				b := loadBundleBytes(t, fixedBundle(t))

				return map[string][]byte{
					KeyKubernetesCA:      b.Certs.K8s.Crt,
					KeyToken:             []byte("kamaji.0123456789abcdef"),
					KeyEndpoint:          []byte("https://tenant-a.kamaji.example.test:6443"),
					KeyClusterName:       []byte("tenant-a"),
					KeyClusterDNS:        []byte("10.96.0.10"),
					KeyServiceCIDR:       []byte("10.96.0.0/16"),
					KeyPodCIDR:           []byte("10.244.0.0/16"),
					KeyKubernetesVersion: []byte("v1.35.1"),
					KeySecretsBundle:     fixedBundle(t),
				}
			},
			nc:      testNodeClaim("tenant-a-pool-1"),
			report:  testReport(),
			network: testNetwork(),
		},
		{
			name:   "ipv6-private-vlan",
			secret: func(t *testing.T) map[string][]byte { return bundleSecretData(fixedBundle(t)) },
			nc:     testNodeClaim("bare-metal-vlan1"),
			report: testReport(),
			network: Network{
				IPv6Address: "2001:bc8:1201:a22:b683:51ff:fe0f:6bbc/128",
				IPv6Gateway: "2001:bc8:1201:a22::1",
				Nameservers: []string{"51.159.47.28", "2001:bc8:1201::51:159:47:28"},
				UplinkMAC:   "b4:83:51:0f:6d:a0",
				PrivateNetworks: []PrivateNetwork{
					{VLAN: 3001, DHCP: true},
					{VLAN: 3002, Addresses: []string{"172.16.32.10/22"}, MTU: 1450},
				},
			},
			check: func(t *testing.T, f *Facts, raw string) {
				for _, want := range []string{"kind: VLANConfig", "name: uplink.3001", "vlanID: 3001", "parent: uplink", "name: uplink.3002", "172.16.32.10/22", "kind: ResolverConfig", "51.159.47.28"} {
					if !strings.Contains(raw, want) {
						t.Errorf("config lacks %q", want)
					}
				}
			},
		},
		{
			name:   "gpu-taints",
			secret: func(t *testing.T) map[string][]byte { return bundleSecretData(fixedBundle(t)) },
			nc:     gpu,
			settings: NodeSettings{
				TalosVersion: "v1.12",
				Labels:       map[string]string{"example.com/accelerator": "l40s", "node.kubernetes.io/gpu-count": "2"},
				Kubelet: KubeletSettings{
					KubeReserved:                map[string]string{"cpu": "200m", "memory": "1Gi"},
					SystemReserved:              map[string]string{"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "2Gi"},
					EvictionHard:                map[string]string{"memory.available": "500Mi", "nodefs.available": "10%"},
					MaxPods:                     int32p(250),
					ImageGCHighThresholdPercent: int32p(85),
					ImageGCLowThresholdPercent:  int32p(70),
				},
				ExtraKernelArgs:  []string{"iommu=pt", "nvidia-drm.modeset=1"},
				ClusterDiscovery: new(false),
			},
			report:  testReport(),
			network: testNetwork(),
			check: func(t *testing.T, f *Facts, raw string) {
				for _, want := range []string{"maxPods: 250", "imageGCHighThresholdPercent: 85", "imageGCLowThresholdPercent: 70", "memory.available: 500Mi", "iommu=pt", "grubUseUKICmdline: false"} {
					if !strings.Contains(raw, want) {
						t.Errorf("config lacks %q", want)
					}
				}

				if f.NodeLabels["example.com/accelerator"] != "l40s" {
					t.Errorf("NodeClass label missing: %v", f.NodeLabels)
				}
			},
		},
		{
			name:   "user-patches",
			secret: func(t *testing.T) map[string][]byte { return bundleSecretData(fixedBundle(t)) },
			nc:     testNodeClaim("bare-metal-patch"),
			settings: NodeSettings{ConfigPatches: []string{
				"machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n",
				`[{"op": "add", "path": "/machine/kubelet/extraArgs/rotate-server-certificates", "value": "true"}]`,
				"apiVersion: v1alpha1\nkind: TimeSyncConfig\nntp:\n  servers:\n    - ntp.example.test\n",
			}},
			report:  testReport(),
			network: testNetwork(),
			check: func(t *testing.T, f *Facts, raw string) {
				for _, want := range []string{"vm.max_map_count: \"262144\"", "rotate-server-certificates: \"true\"", "ntp.example.test"} {
					if !strings.Contains(raw, want) {
						t.Errorf("patched config lacks %q", want)
					}
				}
			},
		},
	}
}

func TestGolden(t *testing.T) {
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			join, err := ParseJoinSecret("karpenter/join", tc.secret(t))
			if err != nil {
				t.Fatal(err)
			}

			out, err := Render(join, tc.nc, tc.settings, tc.report, tc.network)
			if err != nil {
				t.Fatal(err)
			}

			golden(t, tc.name, out.Config)

			// determinism: a second render is byte-identical
			again, err := Render(join, tc.nc, tc.settings, tc.report, tc.network)
			if err != nil {
				t.Fatal(err)
			}

			if string(again.Config) != string(out.Config) || again.Hash != out.Hash {
				t.Fatal("two renders of the same inputs differ")
			}

			f := roundTrip(t, tc.nc, tc.report, tc.network, out.Config)

			if tc.check != nil {
				tc.check(t, f, string(out.Config))
			}
		})
	}
}

// roundTrip loads the config the way the node does and checks every field
// registration depends on.
func roundTrip(t *testing.T, nc *karpv1.NodeClaim, hw *report.Report, n Network, raw []byte) *Facts {
	t.Helper()

	cfg := mustLoad(t, raw)

	if _, err := cfg.Validate(metalMode{}); err != nil {
		t.Fatalf("reloaded config does not validate: %v", err)
	}

	f, err := ReadFacts(cfg)
	if err != nil {
		t.Fatal(err)
	}

	if f.Hostname != nc.Name {
		t.Errorf("hostname = %q, want %q", f.Hostname, nc.Name)
	}

	if f.ProviderID != nc.Status.ProviderID {
		t.Errorf("provider-id = %q, want %q", f.ProviderID, nc.Status.ProviderID)
	}

	if cfg.Machine().Type().String() != "worker" {
		t.Errorf("machine type = %s", cfg.Machine().Type())
	}

	// taints: spec + startup + unregistered, all at registration
	wantTaints := append(append(slices.Clone(nc.Spec.Taints), nc.Spec.StartupTaints...), karpv1.UnregisteredNoExecuteTaint)
	if len(f.RegisterWithTaints) != len(wantTaints) {
		t.Errorf("registerWithTaints = %v, want %v", f.RegisterWithTaints, wantTaints)
	}

	for _, w := range wantTaints {
		if !slices.ContainsFunc(f.RegisterWithTaints, func(g corev1.Taint) bool { return g.MatchTaint(&w) && g.Value == w.Value }) {
			t.Errorf("registerWithTaints lacks %s=%s:%s", w.Key, w.Value, w.Effect)
		}
	}

	if len(cfg.Machine().NodeTaints()) != 0 {
		t.Errorf("machine.nodeTaints must stay empty (NodeRestriction refuses them), got %v", cfg.Machine().NodeTaints())
	}

	for _, k := range []string{karpv1.NodePoolLabelKey, corev1.LabelInstanceTypeStable, corev1.LabelTopologyZone, karpv1.CapacityTypeLabelKey} {
		if f.NodeLabels[k] != nc.Labels[k] {
			t.Errorf("nodeLabels[%s] = %q, want %q", k, f.NodeLabels[k], nc.Labels[k])
		}

		if !strings.Contains(f.KubeletNodeLabels, k+"="+nc.Labels[k]) {
			t.Errorf("kubelet node-labels %q lacks %s", f.KubeletNodeLabels, k)
		}
	}

	if _, ok := f.NodeLabels["node-role.kubernetes.io/worker"]; ok {
		t.Error("a label the kubelet may not set reached nodeLabels")
	}

	if strings.Contains(f.KubeletNodeLabels, "node-role.kubernetes.io") {
		t.Error("a label the kubelet may not set reached --node-labels")
	}

	mac := strings.ToLower(hw.NICs[0].PermanentMAC)
	if n.UplinkMAC != "" {
		mac = n.UplinkMAC
	}

	if f.UplinkSelector != `mac(link.permanent_addr) == "`+mac+`"` {
		t.Errorf("uplink selector = %q, want the permanent MAC %s", f.UplinkSelector, mac)
	}

	if n.IPv6Address != "" {
		want := n.IPv6Address
		if !strings.Contains(want, "/") {
			want += "/128"
		}

		if !slices.Contains(f.UplinkAddresses, netip.MustParsePrefix(want)) {
			t.Errorf("uplink addresses = %v, want %s", f.UplinkAddresses, want)
		}

		var hasDefault bool

		for _, l := range cfg.NetworkCommonLinkConfigs() {
			for _, r := range l.Routes() {
				if gw, ok := r.Gateway().Get(); ok && gw.String() == n.IPv6Gateway {
					hasDefault = true
				}
			}
		}

		if !hasDefault {
			t.Errorf("no route via the IPv6 gateway %s", n.IPv6Gateway)
		}
	}

	var dhcpOnUplink bool

	for _, d := range cfg.NetworkDHCPv4Configs() {
		if d.Name() == UplinkLink {
			dhcpOnUplink = true
		}
	}

	if !dhcpOnUplink {
		t.Error("no DHCPv4 on the uplink")
	}

	if f.InstallDisk != "serial:"+hw.Disk.Serial {
		t.Errorf("install disk = %q, want the serial em-imager wrote", f.InstallDisk)
	}

	return f
}

func TestRenderInstallDiskByPathWithoutSerial(t *testing.T) {
	join := freshJoin(t)

	hw := testReport()
	hw.Disk.Serial = ""
	hw.Disk.Path = "/dev/sda"

	out, err := Render(join, testNodeClaim("bare-metal-sda"), NodeSettings{}, hw, Network{})
	if err != nil {
		t.Fatal(err)
	}

	f, err := ReadFacts(mustLoad(t, out.Config))
	if err != nil {
		t.Fatal(err)
	}

	if f.InstallDisk != "/dev/sda" {
		t.Errorf("install disk = %q, want /dev/sda", f.InstallDisk)
	}

	if len(f.UplinkAddresses) != 0 {
		t.Errorf("no IPv6 given, but uplink has addresses %v", f.UplinkAddresses)
	}
}

func TestRenderUsesHardwareAddrWithoutPermanentMAC(t *testing.T) {
	join := freshJoin(t)

	hw := testReport()
	hw.NICs = []report.NIC{{Name: "eno1", MAC: "0c:c4:7a:00:00:01", LinkUp: true}}

	out, err := Render(join, testNodeClaim("bare-metal-nopm"), NodeSettings{}, hw, Network{})
	if err != nil {
		t.Fatal(err)
	}

	f, err := ReadFacts(mustLoad(t, out.Config))
	if err != nil {
		t.Fatal(err)
	}

	if f.UplinkSelector != `mac(link.hardware_addr) == "0c:c4:7a:00:00:01"` {
		t.Errorf("selector = %q", f.UplinkSelector)
	}
}

// A non-Talos control plane with no secrets.yaml: Talos-side secrets are
// generated, discovery is off, and the node still gets a valid config.
func TestRenderKamajiWithoutTalosSecrets(t *testing.T) {
	bundle, _ := freshBundle(t)

	join, err := ParseJoinSecret("tenants/tenant-b", map[string][]byte{
		KeyKubernetesCA: bundle.Certs.K8s.Crt,
		KeyToken:        []byte("abcdef.0123456789abcdef"),
		KeyEndpoint:     []byte("https://tenant-b.example.test:443"),
	})
	if err != nil {
		t.Fatal(err)
	}

	if join.Form() != FormKubernetes || join.HasTalosSecrets() {
		t.Fatalf("form = %s, talos secrets = %v", join.Form(), join.HasTalosSecrets())
	}

	nc := testNodeClaim("tenant-b-1")

	out, err := Render(join, nc, NodeSettings{}, testReport(), testNetwork())
	if err != nil {
		t.Fatal(err)
	}

	f := roundTrip(t, nc, testReport(), testNetwork(), out.Config)

	if f.BootstrapToken != "abcdef.0123456789abcdef" || f.Endpoint != "https://tenant-b.example.test:443" {
		t.Errorf("token/endpoint not taken from the Secret: %q", f.Endpoint)
	}

	cfg := mustLoad(t, out.Config)
	if cfg.Cluster().Discovery().Enabled() {
		t.Error("discovery must be off without the cluster's Talos secrets")
	}

	if string(cfg.Cluster().IssuingCA().Crt) != string(bundle.Certs.K8s.Crt) {
		t.Error("cluster.ca.crt is not the Secret's ca.crt")
	}

	if len(cfg.Cluster().IssuingCA().Key) != 0 {
		t.Error("a worker must not carry the CA key")
	}

	// Discovery cannot be forced on without a shared cluster secret.
	_, err = Render(join, nc, NodeSettings{ClusterDiscovery: new(true)}, testReport(), testNetwork())
	if err == nil || !strings.Contains(err.Error(), "clusterDiscovery") {
		t.Fatalf("err = %v, want clusterDiscovery error", err)
	}
}

func TestRenderPerNodeClaimToken(t *testing.T) {
	bundle, raw := freshBundle(t)

	for _, data := range []map[string][]byte{
		bundleSecretData(raw),
		{KeyWorkerConfig: workerConfigFrom(t, bundle)},
		// kubernetes form without a shared token: the per-NodeClaim one is required
		{KeyKubernetesCA: bundle.Certs.K8s.Crt, KeyEndpoint: []byte(testEndpoint)},
	} {
		join, err := ParseJoinSecret("karpenter/join", data)
		if err != nil {
			t.Fatal(err)
		}

		const perNode = "n0d3cl.aim0token0000001"

		out, err := Render(join, testNodeClaim("bare-metal-tok"), NodeSettings{BootstrapToken: perNode}, testReport(), Network{})
		if err != nil {
			t.Fatal(err)
		}

		f, err := ReadFacts(mustLoad(t, out.Config))
		if err != nil {
			t.Fatal(err)
		}

		if f.BootstrapToken != perNode {
			t.Errorf("%s: cluster.token is not the per-NodeClaim token", join.Form())
		}

		// the token is not drift-relevant
		if out.Hash != InputsHash(join, NodeSettings{}) {
			t.Errorf("%s: hash depends on the per-NodeClaim token", join.Form())
		}
	}
}

func TestRenderKubernetesFormNeedsSomeToken(t *testing.T) {
	bundle, _ := freshBundle(t)

	join, err := ParseJoinSecret("tenants/t", map[string][]byte{KeyKubernetesCA: bundle.Certs.K8s.Crt, KeyEndpoint: []byte(testEndpoint)})
	if err != nil {
		t.Fatal(err)
	}

	_, err = Render(join, testNodeClaim("bare-metal-notok"), NodeSettings{}, testReport(), Network{})
	if err == nil || !strings.Contains(err.Error(), `join secret "tenants/t": missing key token and no per-NodeClaim bootstrap token given`) {
		t.Fatalf("err = %v", err)
	}
}

func TestInputsHash(t *testing.T) {
	raw := fixedBundle(t)

	join, err := ParseJoinSecret("karpenter/join", bundleSecretData(raw))
	if err != nil {
		t.Fatal(err)
	}

	base := NodeSettings{Labels: map[string]string{"a": "1", "b": "2"}}
	h := InputsHash(join, base)

	if h != InputsHash(join, NodeSettings{Labels: map[string]string{"b": "2", "a": "1"}}) {
		t.Error("hash depends on map order")
	}

	if h != InputsHash(join, NodeSettings{TalosVersion: "1.12.3", Labels: base.Labels}) {
		t.Error("defaulted and explicit v1.12 contract hash differently")
	}

	changed := map[string]NodeSettings{
		"labels":       {Labels: map[string]string{"a": "1", "b": "3"}},
		"maxPods":      {Labels: base.Labels, Kubelet: KubeletSettings{MaxPods: int32p(100)}},
		"patches":      {Labels: base.Labels, ConfigPatches: []string{"machine:\n  sysctls:\n    a.b: \"1\"\n"}},
		"installImage": {Labels: base.Labels, InstallImage: "ghcr.io/siderolabs/installer:v1.12.4"},
		"talosVersion": {Labels: base.Labels, TalosVersion: "v1.13"},
	}

	for name, s := range changed {
		if InputsHash(join, s) == h {
			t.Errorf("changing %s does not change the hash", name)
		}
	}

	data := bundleSecretData(raw)
	data[KeyEndpoint] = []byte("https://other.example.test:6443")

	other, err := ParseJoinSecret("karpenter/join", data)
	if err != nil {
		t.Fatal(err)
	}

	if InputsHash(other, base) == h {
		t.Error("changing the endpoint does not change the hash")
	}

	// Render's hash is InputsHash
	out, err := Render(join, testNodeClaim("bare-metal-hash"), base, testReport(), Network{})
	if err != nil {
		t.Fatal(err)
	}

	if out.Hash != h {
		t.Error("Output.Hash != InputsHash")
	}
}

// BenchmarkRender measures one node's render + validation (what the
// controller pays per Create), with a secrets bundle and a private VLAN.
func BenchmarkRender(b *testing.B) {
	raw, err := os.ReadFile(fixedBundlePath)
	if err != nil {
		b.Fatal(err)
	}

	join, err := ParseJoinSecret("karpenter/join", bundleSecretData(raw))
	if err != nil {
		b.Fatal(err)
	}

	nc := testNodeClaim("bare-metal-bench")
	hw := testReport()
	n := testNetwork()
	n.PrivateNetworks = []PrivateNetwork{{VLAN: 3001, DHCP: true}}
	s := NodeSettings{Kubelet: KubeletSettings{MaxPods: int32p(110)}}

	b.ReportAllocs()

	for b.Loop() {
		if _, err := Render(join, nc, s, hw, n); err != nil {
			b.Fatal(err)
		}
	}
}

// The controller renders nodes concurrently from one JoinMaterial; renders
// must not share state (base config, bundle).
func TestRenderConcurrent(t *testing.T) {
	bundle, _ := freshBundle(t)

	join, err := ParseJoinSecret("karpenter/join", map[string][]byte{KeyWorkerConfig: workerConfigFrom(t, bundle)})
	if err != nil {
		t.Fatal(err)
	}

	const n = 8

	errs := make(chan error, n)

	for i := range n {
		go func() {
			nc := testNodeClaim(fmt.Sprintf("bare-metal-c%d", i))
			nc.Status.ProviderID = fmt.Sprintf("scaleway-em://fr-par-2/server-%d", i)

			out, err := Render(join, nc, NodeSettings{Labels: map[string]string{"example.com/i": fmt.Sprint(i)}}, testReport(), Network{})
			if err != nil {
				errs <- err

				return
			}

			cfg, err := configloader.NewFromBytes(out.Config)
			if err != nil {
				errs <- err

				return
			}

			f, err := ReadFacts(cfg)
			if err != nil {
				errs <- err

				return
			}

			if f.Hostname != nc.Name || f.ProviderID != nc.Status.ProviderID || f.NodeLabels["example.com/i"] != fmt.Sprint(i) || len(f.NodeLabels) != 8 { // 6 + the two local-disk labels
				errs <- fmt.Errorf("node %d got another node's facts: %+v", i, f)

				return
			}

			errs <- nil
		}()
	}

	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}

	// the shared base config was not modified by the renders
	if _, ok := join.base.Machine().NodeLabels()["example.com/i"]; ok {
		t.Error("Render modified the join material's base config")
	}
}

// The newest contract this machinery knows renders a valid config too.
func TestRenderContractV113(t *testing.T) {
	join, err := ParseJoinSecret("karpenter/join", bundleSecretData(fixedBundle(t)))
	if err != nil {
		t.Fatal(err)
	}

	nc := testNodeClaim("bare-metal-113")

	out, err := Render(join, nc, NodeSettings{TalosVersion: "v1.13.0"}, testReport(), testNetwork())
	if err != nil {
		t.Fatal(err)
	}

	roundTrip(t, nc, testReport(), testNetwork(), out.Config)

	if strings.Contains(string(out.Config), "network: {}") {
		t.Error("v1.13 contract should not emit the legacy empty machine.network")
	}
}
