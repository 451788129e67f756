package talosgen

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

func TestParseJoinSecretForms(t *testing.T) {
	bundle, raw := freshBundle(t)

	cases := map[string]struct {
		data        map[string][]byte
		form        JoinForm
		talosSecret bool
	}{
		"bundle":         {bundleSecretData(raw), FormSecretsBundle, true},
		"worker.yaml":    {map[string][]byte{KeyWorkerConfig: workerConfigFrom(t, bundle)}, FormWorkerConfig, true},
		"cabpt value":    {map[string][]byte{KeyCAPIValue: workerConfigFrom(t, bundle), KeyCAPIFormat: []byte("talosconfig")}, FormWorkerConfig, true},
		"kamaji":         {map[string][]byte{KeyKubernetesCA: bundle.Certs.K8s.Crt, KeyToken: []byte("abcdef.0123456789abcdef"), KeyEndpoint: []byte("https://cp.example.test:6443")}, FormKubernetes, false},
		"kamaji + talos": {map[string][]byte{KeyKubernetesCA: bundle.Certs.K8s.Crt, KeyToken: []byte("abcdef.0123456789abcdef"), KeyEndpoint: []byte("https://cp.example.test"), KeySecretsBundle: raw}, FormKubernetes, true},
	}

	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			j, err := ParseJoinSecret("ns/join", tc.data)
			if err != nil {
				t.Fatal(err)
			}

			if j.Form() != tc.form || j.HasTalosSecrets() != tc.talosSecret {
				t.Errorf("form = %s talosSecrets = %v, want %s %v", j.Form(), j.HasTalosSecrets(), tc.form, tc.talosSecret)
			}

			if j.Endpoint() == "" {
				t.Error("endpoint not parsed")
			}

			// printing the material never shows secrets
			for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
				printed := fmt.Sprintf(verb, j)
				for _, s := range j.secretValues() {
					if len(s) >= 8 && strings.Contains(printed, s) {
						t.Errorf("%s of JoinMaterial shows a secret value", verb)
					}
				}
			}
		})
	}
}

func TestParseJoinSecretErrors(t *testing.T) {
	bundle, raw := freshBundle(t)
	worker := workerConfigFrom(t, bundle)

	cp := strings.Replace(string(worker), "type: worker", "type: controlplane", 1)

	notCA := strings.ReplaceAll(string(bundle.Certs.K8s.Crt), "CERTIFICATE", "PRIVATE KEY")

	with := func(base map[string][]byte, kv ...string) map[string][]byte {
		out := map[string][]byte{}
		for k, v := range base {
			out[k] = v
		}

		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(out, kv[i])
			} else {
				out[kv[i]] = []byte(kv[i+1])
			}
		}

		return out
	}

	kamaji := map[string][]byte{KeyKubernetesCA: bundle.Certs.K8s.Crt, KeyToken: []byte("abcdef.0123456789abcdef"), KeyEndpoint: []byte("https://cp.example.test:6443")}

	cases := map[string]struct {
		data map[string][]byte
		want string
	}{
		"empty":                  {map[string][]byte{}, `join secret "ns/join": no join material`},
		"token without CA":       {with(kamaji, KeyKubernetesCA, ""), `join secret "ns/join": missing key ca.crt`},
		"missing endpoint":       {with(kamaji, KeyEndpoint, ""), `join secret "ns/join": missing key endpoint`},
		"CA not PEM":             {with(kamaji, KeyKubernetesCA, "hello"), `key ca.crt: not PEM encoded`},
		"CA wrong PEM type":      {with(kamaji, KeyKubernetesCA, notCA), `key ca.crt: PEM block is "PRIVATE KEY"`},
		"bad token":              {with(kamaji, KeyToken, "not-a-token"), `key token: not a bootstrap token`},
		"http endpoint":          {with(kamaji, KeyEndpoint, "http://cp.example.test:6443"), `key endpoint: must be an https:// URL`},
		"bare host endpoint":     {with(kamaji, KeyEndpoint, "cp.example.test:6443"), `key endpoint: must be an https:// URL`},
		"endpoint with path":     {with(kamaji, KeyEndpoint, "https://cp.example.test/api"), `key endpoint: must not carry a path`},
		"endpoint bad port":      {with(kamaji, KeyEndpoint, "https://cp.example.test:99999"), `key endpoint: port "99999"`},
		"bad cluster-dns":        {with(kamaji, KeyClusterDNS, "10.96.0.300"), `key cluster-dns: "10.96.0.300" is not an IP address`},
		"bad pod-cidr":           {with(kamaji, KeyPodCIDR, "10.244.0.0"), `key pod-cidr`},
		"bad k8s version":        {with(kamaji, KeyKubernetesVersion, "latest"), `key kubernetes-version`},
		"bundle no name":         {with(bundleSecretData(raw), KeyClusterName, ""), `missing key cluster-name`},
		"bundle not yaml":        {with(bundleSecretData(raw), KeySecretsBundle, "cluster: [unterminated"), `key secrets.yaml: not a Talos secrets bundle`},
		"bundle empty doc":       {with(bundleSecretData(raw), KeySecretsBundle, "foo: bar\n"), `key secrets.yaml: not a Talos secrets bundle`},
		"bundle incomplete":      {with(bundleSecretData(raw), KeySecretsBundle, "cluster:\n  id: x\n"), `key secrets.yaml: incomplete secrets bundle`},
		"worker.yaml garbage":    {map[string][]byte{KeyWorkerConfig: []byte("machine: [")}, `key worker.yaml: not a valid Talos machine config`},
		"controlplane config":    {map[string][]byte{KeyWorkerConfig: []byte(cp)}, `key worker.yaml: machine type is "controlplane", need worker`},
		"worker + bundle":        {map[string][]byte{KeyWorkerConfig: worker, KeySecretsBundle: raw}, `ambiguous join material`},
		"capi wrong format":      {map[string][]byte{KeyCAPIValue: worker, KeyCAPIFormat: []byte("cloud-config")}, `key format: bootstrap data format is not talosconfig`},
		"k8s version on config":  {map[string][]byte{KeyWorkerConfig: worker, KeyKubernetesVersion: []byte("1.35.0")}, `key kubernetes-version: not used with worker.yaml`},
		"kamaji bundle lacks os": {with(kamaji, KeySecretsBundle, "cluster:\n  id: x\n  secret: y\n"), `key secrets.yaml: needs certs.os`},
	}

	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseJoinSecret("ns/join", tc.data)
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}

			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}

			var je *JoinError
			if !errors.As(err, &je) || je.Secret != "ns/join" {
				t.Errorf("error is not a *JoinError naming the secret: %#v", err)
			}
		})
	}
}

func TestRenderErrors(t *testing.T) {
	join := freshJoin(t)

	type input struct {
		nc *karpv1.NodeClaim
		s  NodeSettings
		hw *report.Report
		n  Network
	}

	ok := func() input {
		return input{testNodeClaim("bare-metal-err"), NodeSettings{}, testReport(), testNetwork()}
	}

	cases := map[string]struct {
		mut  func(in *input)
		want string
	}{
		"bad patch syntax": {func(in *input) { in.s.ConfigPatches = []string{"[{\"op\": \"add\", "} }, "configPatches[0]"},
		"patch path missing": {func(in *input) {
			in.s.ConfigPatches = []string{`[{"op": "replace", "path": "/machine/nosuchfield/x", "value": 1}]`}
		}, "configPatches"},
		"patch removes provider-id": {func(in *input) {
			in.s.ConfigPatches = []string{`[{"op": "remove", "path": "/machine/kubelet/extraArgs/provider-id"}]`}
		}, "provider-id"},
		"patch removes unregistered taint": {func(in *input) {
			in.s.ConfigPatches = []string{`[{"op": "remove", "path": "/machine/kubelet/extraConfig/registerWithTaints"}]`}
		}, "registerWithTaints lacks karpenter.sh/unregistered:NoExecute"},
		"patch adds nodeTaints": {func(in *input) {
			in.s.ConfigPatches = []string{"machine:\n  nodeTaints:\n    dedicated: gpu:NoSchedule\n"}
		}, "machine.nodeTaints is set"},
		"patch makes config invalid": {func(in *input) {
			in.s.ConfigPatches = []string{`[{"op": "replace", "path": "/machine/type", "value": "bogus"}]`}
		}, "metal mode"},
		"unknown MAC":         {func(in *input) { in.n.UplinkMAC = "02:00:00:00:00:99" }, "uplinkMac 02:00:00:00:00:99 is not a NIC in the hardware report"},
		"malformed MAC":       {func(in *input) { in.n.UplinkMAC = "zz" }, "network: uplinkMac"},
		"no NIC":              {func(in *input) { in.hw.NICs = nil }, "hardware report: no NIC listed"},
		"ambiguous uplink":    {func(in *input) { in.hw.NICs[1].HasDefaultRoute = true }, "2 NICs have the default route"},
		"no uplink":           {func(in *input) { in.hw.NICs[0].HasDefaultRoute = false; in.hw.NICs[0].LinkUp = false }, "cannot tell the uplink"},
		"no disk":             {func(in *input) { in.hw.Disk = nil }, "no install disk"},
		"failed report":       {func(in *input) { in.hw.OK = false; in.hw.Error = &report.Error{Code: report.CodeDigestMismatch} }, "digest_mismatch"},
		"nil report":          {func(in *input) { in.hw = nil }, "hardware report is nil"},
		"restricted label":    {func(in *input) { in.s.Labels = map[string]string{"node-role.kubernetes.io/gpu": ""} }, `labels: "node-role.kubernetes.io/gpu" is in a domain the kubelet may not set`},
		"restricted k8s.io":   {func(in *input) { in.s.Labels = map[string]string{"example.k8s.io/x": "y"} }, `"example.k8s.io/x"`},
		"node-restriction":    {func(in *input) { in.s.Labels = map[string]string{"node-restriction.kubernetes.io/pool": "a"} }, `"node-restriction.kubernetes.io/pool"`},
		"karpenter label":     {func(in *input) { in.s.Labels = map[string]string{"karpenter.sh/foo": "a"} }, "Karpenter owns"},
		"conflicting label":   {func(in *input) { in.s.Labels = map[string]string{"topology.kubernetes.io/zone": "nl-ams-1"} }, "conflicts with the NodeClaim"},
		"invalid label value": {func(in *input) { in.s.Labels = map[string]string{"example.com/a": "has space"} }, `labels: "example.com/a"`},
		"no providerID":       {func(in *input) { in.nc.Status.ProviderID = "" }, "status.providerID is empty"},
		"bad hostname":        {func(in *input) { in.nc.Name = "Bad_Name" }, "not usable as a hostname"},
		"bad taint effect": {func(in *input) {
			in.nc.Spec.Taints = []corev1.Taint{{Key: "a", Effect: "Sometimes"}}
		}, `taint "a" has effect "Sometimes"`},
		"old talos":           {func(in *input) { in.s.TalosVersion = "v1.11" }, "talosVersion: v1.11 is older than v1.12"},
		"future talos":        {func(in *input) { in.s.TalosVersion = "v1.20" }, "newer than this build"},
		"garbage talos":       {func(in *input) { in.s.TalosVersion = "latest" }, "talosVersion"},
		"bad reserved":        {func(in *input) { in.s.Kubelet.KubeReserved = map[string]string{"cpu": "lots"} }, "kubelet.kubeReserved.cpu"},
		"bad resource":        {func(in *input) { in.s.Kubelet.SystemReserved = map[string]string{"gpu": "1"} }, `unknown resource "gpu"`},
		"bad eviction signal": {func(in *input) { in.s.Kubelet.EvictionHard = map[string]string{"disk.full": "1Gi"} }, "unknown eviction signal"},
		"bad eviction pct":    {func(in *input) { in.s.Kubelet.EvictionHard = map[string]string{"nodefs.available": "150%"} }, "evictionHard.nodefs.available"},
		"gc low >= high": {func(in *input) {
			in.s.Kubelet.ImageGCHighThresholdPercent, in.s.Kubelet.ImageGCLowThresholdPercent = int32p(60), int32p(80)
		}, "imageGCLowThresholdPercent"},
		"maxPods zero":          {func(in *input) { in.s.Kubelet.MaxPods = int32p(0) }, "kubelet.maxPods"},
		"kernel arg with space": {func(in *input) { in.s.ExtraKernelArgs = []string{"a b"} }, "extraKernelArgs[0]"},
		"bad install image":     {func(in *input) { in.s.InstallImage = "Not An Image" }, "installImage"},
		"bad per-node token":    {func(in *input) { in.s.BootstrapToken = "nope" }, "bootstrapToken: not a bootstrap token"},
		"ipv6 not /128":         {func(in *input) { in.n.IPv6Address = "2001:bc8::1/64" }, "want /128"},
		"ipv6 is v4":            {func(in *input) { in.n.IPv6Address = "192.0.2.1" }, "ipv6Address"},
		"ipv6 no gateway":       {func(in *input) { in.n.IPv6Gateway = "" }, "ipv6Gateway: required"},
		"gateway without addr":  {func(in *input) { in.n.IPv6Address = "" }, "ipv6Gateway: set without ipv6Address"},
		"bad nameserver":        {func(in *input) { in.n.Nameservers = []string{"dns.example"} }, "nameservers[0]"},
		"vlan zero":             {func(in *input) { in.n.PrivateNetworks = []PrivateNetwork{{VLAN: 0, DHCP: true}} }, "privateNetworks[0].vlan"},
		"vlan twice": {func(in *input) {
			in.n.PrivateNetworks = []PrivateNetwork{{VLAN: 10, DHCP: true}, {VLAN: 10, DHCP: true}}
		}, "VLAN 10 appears twice"},
		"vlan jumbo mtu":     {func(in *input) { in.n.PrivateNetworks = []PrivateNetwork{{VLAN: 10, DHCP: true, MTU: 9000}} }, "privateNetworks[0].mtu"},
		"vlan no addressing": {func(in *input) { in.n.PrivateNetworks = []PrivateNetwork{{VLAN: 10}} }, "neither dhcp nor addresses"},
	}

	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := ok()
			tc.mut(&in)

			out, err := Render(join, in.nc, in.s, in.hw, in.n)
			if err == nil {
				t.Fatalf("no error (config %d bytes), want %q", len(out.Config), tc.want)
			}

			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestValidationWarnings(t *testing.T) {
	join := freshJoin(t)

	// machinery warns about deprecated install extensions
	patch := "machine:\n  install:\n    extensions:\n      - image: ghcr.io/siderolabs/gvisor:20231214.0-v1.12.0\n"

	_, err := Render(join, testNodeClaim("bare-metal-warn"), NodeSettings{ConfigPatches: []string{patch}}, testReport(), Network{})
	if err == nil || !strings.Contains(err.Error(), "warning:") {
		t.Fatalf("strict mode: err = %v, want the warning as an error", err)
	}

	out, err := Render(join, testNodeClaim("bare-metal-warn"), NodeSettings{ConfigPatches: []string{patch}, AllowValidationWarnings: true}, testReport(), Network{})
	if err != nil {
		t.Fatal(err)
	}

	if len(out.Warnings) == 0 {
		t.Error("warnings allowed but none reported")
	}
}

// No secret value ever reaches an error message, whatever fails.
func TestErrorsNeverContainSecrets(t *testing.T) {
	bundle, raw := freshBundle(t)
	worker := workerConfigFrom(t, bundle)

	const perNode = "s3cr3t.p3rn0d3t0k3n0000"

	secretValues := []string{
		bundle.Secrets.BootstrapToken, bundle.TrustdInfo.Token, bundle.Cluster.Secret,
		bundle.Secrets.SecretboxEncryptionSecret, string(bundle.Certs.K8s.Key), string(bundle.Certs.OS.Key),
		string(bundle.Certs.Etcd.Key), string(bundle.Certs.K8sServiceAccount.Key), perNode,
	}

	var errs []error

	collect := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}

	// bad Secrets that contain secret values
	for _, data := range []map[string][]byte{
		{KeySecretsBundle: raw, KeyEndpoint: []byte("ftp://" + bundle.Secrets.BootstrapToken)},
		{KeySecretsBundle: raw, KeyEndpoint: []byte(testEndpoint)},
		{KeyKubernetesCA: bundle.Certs.K8s.Key, KeyToken: []byte(bundle.Secrets.BootstrapToken), KeyEndpoint: []byte(testEndpoint)},
		{KeyKubernetesCA: bundle.Certs.K8s.Crt, KeyToken: []byte(bundle.TrustdInfo.Token + "x"), KeyEndpoint: []byte(testEndpoint)},
		{KeyKubernetesCA: bundle.Certs.K8s.Crt, KeyToken: []byte(bundle.Secrets.BootstrapToken), KeyEndpoint: []byte(testEndpoint), KeySecretsBundle: []byte("cluster: {secret: " + bundle.Cluster.Secret + "}")},
		// yaml type errors quote the offending value
		{KeySecretsBundle: []byte("secrets: " + bundle.Secrets.BootstrapToken + "\n"), KeyEndpoint: []byte(testEndpoint), KeyClusterName: []byte("c")},
		{KeySecretsBundle: []byte("secrets:\n  bootstraptoken: [" + bundle.Secrets.BootstrapToken + "]\n"), KeyEndpoint: []byte(testEndpoint), KeyClusterName: []byte("c")},
		{KeyWorkerConfig: []byte(strings.Replace(string(worker), "type: worker", "type: controlplane", 1))},
		{KeyWorkerConfig: []byte(strings.Replace(string(worker), "token: "+bundle.Secrets.BootstrapToken, "token: ["+bundle.Secrets.BootstrapToken, 1))},
		{KeyWorkerConfig: append(worker, []byte("\nmachine:\n  token: "+bundle.TrustdInfo.Token+"\n")...)},
	} {
		_, err := ParseJoinSecret("ns/join", data)
		collect(err)
	}

	// render failures with a valid join material, including machinery's own messages
	for _, data := range []map[string][]byte{bundleSecretData(raw), {KeyWorkerConfig: worker}} {
		join, err := ParseJoinSecret("ns/join", data)
		if err != nil {
			t.Fatal(err)
		}

		for _, s := range []NodeSettings{
			{BootstrapToken: perNode, ConfigPatches: []string{`[{"op": "replace", "path": "/machine/type", "value": "bogus"}]`}},
			{BootstrapToken: perNode, ConfigPatches: []string{`[{"op": "test", "path": "/cluster/token", "value": "x"}]`}},
			{BootstrapToken: perNode, ConfigPatches: []string{`[{"op": "replace", "path": "/cluster/token", "value": "` + bundle.Cluster.Secret + `"}]`}},
			{BootstrapToken: perNode, ConfigPatches: []string{"cluster:\n  token: " + perNode + "x\n  ca:\n    crt: " + bundle.Secrets.BootstrapToken + "\n"}},
			// machinery quotes the bad value back: the scrubber must catch it
			{BootstrapToken: perNode, ConfigPatches: []string{"machine:\n  type: " + perNode + "\n"}},
			{ConfigPatches: []string{"machine:\n  type: " + bundle.TrustdInfo.Token + "\n"}},
			{BootstrapToken: perNode + "!"},
			{BootstrapToken: perNode, Labels: map[string]string{"node-role.kubernetes.io/x": perNode}},
		} {
			_, err := Render(join, testNodeClaim("bare-metal-leak"), s, testReport(), testNetwork())
			collect(err)
		}
	}

	if len(errs) < 15 {
		t.Fatalf("only %d of the inputs failed; the test would not prove anything", len(errs))
	}

	scrubbed := 0

	for _, err := range errs {
		if strings.Contains(err.Error(), redacted) {
			scrubbed++
		}

		for _, s := range secretValues {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}

			// whole values, and any long fragment of a PEM key
			if strings.Contains(err.Error(), s) {
				t.Errorf("error leaks a secret value: %v", err)
			}

			for _, line := range strings.Split(s, "\n") {
				if len(line) > 20 && !strings.HasPrefix(line, "-----") && strings.Contains(err.Error(), line) {
					t.Errorf("error leaks a key fragment: %v", err)
				}
			}
		}
	}

	if scrubbed < 4 {
		t.Errorf("only %d errors went through the scrubber; the machinery-quoting cases no longer fail as expected", scrubbed)
	}
}
