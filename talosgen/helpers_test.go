package talosgen

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"go.yaml.in/yaml/v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

var update = flag.Bool("update", false, "rewrite golden files (and create the fixed test secrets bundle if missing)")

// fixedBundlePath is a TEST-ONLY secrets bundle, committed so golden files are
// deterministic. It belongs to no cluster.
const fixedBundlePath = "testdata/test-only-secrets.yaml"

const testEndpoint = "https://k8s.example.test:6443"

// fixedBundle loads (or with -update creates) the committed test bundle.
func fixedBundle(t *testing.T) []byte {
	t.Helper()

	b, err := os.ReadFile(fixedBundlePath)
	if err == nil {
		return b
	}

	if !*update {
		t.Fatalf("%s missing; run go test ./talosgen/ -run TestGolden -update", fixedBundlePath)
	}

	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), coreconfig.TalosVersion1_12)
	if err != nil {
		t.Fatal(err)
	}

	var buf bytes.Buffer
	buf.WriteString("# TEST-ONLY Talos secrets bundle for talosgen golden files. Not used by any cluster.\n")

	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(bundle); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(fixedBundlePath, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}

	return buf.Bytes()
}

var freshOnce = sync.OnceValues(func() (*secrets.Bundle, error) {
	return secrets.NewBundle(secrets.NewFixedClock(time.Now()), coreconfig.TalosVersion1_12)
})

// freshBundle makes a random bundle with machinery, as operators'
// `talosctl gen secrets` does; once per test binary (RSA keys are slow).
func freshBundle(t *testing.T) (*secrets.Bundle, []byte) {
	t.Helper()

	bundle, err := freshOnce()
	if err != nil {
		t.Fatal(err)
	}

	b, err := yaml.Marshal(bundle)
	if err != nil {
		t.Fatal(err)
	}

	return bundle, b
}

func loadBundleBytes(t *testing.T, raw []byte) *secrets.Bundle {
	t.Helper()

	var b secrets.Bundle
	if err := yaml.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}

	return &b
}

// workerConfigFrom renders a base worker config the way `talosctl gen config` does.
func workerConfigFrom(t *testing.T, bundle *secrets.Bundle) []byte {
	t.Helper()

	in, err := generate.NewInput("base-cluster", testEndpoint, "1.35.1",
		generate.WithSecretsBundle(bundle), generate.WithVersionContract(coreconfig.TalosVersion1_12))
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := in.Config(machine.TypeWorker)
	if err != nil {
		t.Fatal(err)
	}

	b, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		t.Fatal(err)
	}

	return b
}

// freshJoin parses a join Secret made from a fresh secrets bundle.
func freshJoin(t *testing.T) *JoinMaterial {
	t.Helper()
	_, raw := freshBundle(t)
	join, err := ParseJoinSecret("karpenter/join", bundleSecretData(raw))
	if err != nil {
		t.Fatal(err)
	}
	return join
}

func bundleSecretData(raw []byte) map[string][]byte {
	return map[string][]byte{
		KeySecretsBundle: raw,
		KeyEndpoint:      []byte(testEndpoint),
		KeyClusterName:   []byte("prod-eu"),
	}
}

func testNodeClaim(name string) *karpv1.NodeClaim {
	return &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				karpv1.NodePoolLabelKey:          "bare-metal",
				corev1.LabelInstanceTypeStable:   "EM-A610R-NVME",
				corev1.LabelTopologyZone:         "fr-par-2",
				karpv1.CapacityTypeLabelKey:      karpv1.CapacityTypeOnDemand,
				corev1.LabelArchStable:           "amd64",
				"node-role.kubernetes.io/worker": "", // only Karpenter may set it
			},
		},
		Status: karpv1.NodeClaimStatus{ProviderID: "scaleway-em://fr-par-2/0b3e5d6c-58a1-4c0f-9d7e-4c7a7a1c2f10"},
	}
}

func testReport() *report.Report {
	return &report.Report{
		Version: report.Version,
		Command: "write",
		OK:      true,
		Imager:  "test",
		Disk: &report.Disk{
			Path: "/dev/nvme0n1", Name: "nvme0n1", SizeBytes: 960197124096, Model: "SAMSUNG MZQL2960HCJR-00A07",
			Serial: "S64FNE0R812345", LogicalSectorSize: 512, Transport: "nvme", Reason: "largest non-rotational disk",
		},
		NICs: []report.NIC{
			{Name: "eth0", MAC: "b4:83:51:0f:6d:a0", PermanentMAC: "B4:83:51:0F:6D:A0", Driver: "mlx5_core", LinkUp: true, SpeedMbps: 25000, HasDefaultRoute: true},
			{Name: "eth1", MAC: "b4:83:51:0f:6d:a1", PermanentMAC: "b4:83:51:0f:6d:a1", Driver: "mlx5_core", LinkUp: false},
		},
	}
}

func testNetwork() Network {
	return Network{
		IPv6Address: "2001:bc8:1201:a17:b683:51ff:fe0f:6da0",
		IPv6Gateway: "fe80::a293:51ff:fe0f:1",
	}
}

// golden compares got with testdata/<name>.yaml, rewriting it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()

	path := filepath.Join("testdata", name+".golden.yaml")

	if *update {
		if err := os.WriteFile(path, got, 0o600); err != nil {
			t.Fatal(err)
		}

		return
	}

	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}

	if !bytes.Equal(want, got) {
		t.Errorf("%s differs from the rendered config (run with -update if the change is intended)\n--- got:\n%s", path, got)
	}
}

func mustLoad(t *testing.T, raw []byte) coreconfig.Provider {
	t.Helper()

	cfg, err := configloader.NewFromBytes(raw)
	if err != nil {
		t.Fatalf("configloader: %v", err)
	}

	return cfg
}
