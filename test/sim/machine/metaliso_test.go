package machine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"golang.org/x/crypto/ssh"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/configpart"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/diskimage"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// runStdin runs an em-imager command with stdin and parses its report.
func runStdin(t *testing.T, c *ssh.Client, cmd string, stdin []byte) (*report.Report, int, string, string) {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var stdout, stderr bytes.Buffer
	s.Stdout, s.Stderr, s.Stdin = &stdout, &stderr, bytes.NewReader(stdin)
	err = s.Run(cmd)
	code := 0
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitStatus()
	} else if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	r, perr := report.Parse(stdout.Bytes())
	if perr != nil {
		t.Fatalf("%s: report: %v\nstdout: %s\nstderr: %s", cmd, perr, stdout.String(), stderr.String())
	}
	return r, code, stdout.String(), stderr.String()
}

// imageOnDisk puts a Talos-like image at the start of a machine's disk file,
// keeping the disk's size (what em-imager write does, without the network).
func imageOnDisk(t *testing.T, disk string, opts ...diskimage.ImageOption) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "metal-amd64.raw")
	if err := diskimage.BuildTalosLikeImage(img, 16<<20, opts...); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(disk, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
}

// Sealed first boot: em-imager writes the image and then the config from
// rescue; the machine boots, Talos reads config.yaml from the metal-iso
// partition, the Node registers, and nothing ever talks to :50000.
func TestMetalISOBootRegistersNode(t *testing.T) {
	ctx := context.Background()
	imager := emImager(t)
	kube := startKube(t)
	var events eventLog
	h := newHosts(t, Options{Kube: kube, DiskSizeDivisor: 20000, OnEvent: events.record})
	m := newMachine(t, "EM-A610R-NVME")
	c := bootRescue(t, h, m)
	upload(t, c, imager, "em-imager")

	disk := writeMetalISOImage(t, c)

	providerID := "scaleway-em://fr-par-2/" + m.ID
	cfg := workerConfig(t, "em-"+m.Name, providerID)
	parsed, err := configloader.NewFromBytes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	secret := parsed.Cluster().Token().Secret()
	r, code, stdout, stderr := runStdin(t, c, "sudo -n ./em-imager write-config --disk "+disk, cfg)
	want := sha256.Sum256(cfg)
	if code != 0 || !r.OK || r.Config == nil || r.Config.SHA256 != hex.EncodeToString(want[:]) || !r.Config.Verified {
		t.Fatalf("write-config: exit %d %s\n%s", code, stdout, stderr)
	}
	if strings.Contains(stdout+stderr, secret) {
		t.Fatal("the bootstrap token's secret is in em-imager's output")
	}

	h.PowerOff(m.ID)
	if err := h.Boot(ctx, m, scwsim.BootNormal, nil); err != nil {
		t.Fatal(err)
	}
	st, _ := h.Status(m.ID)
	if st.Phase != PhaseRunning || st.ConfigSource != ConfigFromMetalISO || st.TalosAddr != "" {
		t.Fatalf("after boot: %+v", st)
	}
	nodeName := "em-" + m.Name
	waitFor(t, "node Ready", nodeReady(ctx, kube, nodeName))
	n, err := kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil || n.Spec.ProviderID != providerID || n.Status.NodeInfo.OSImage != "Talos (v1.12.3)" {
		t.Fatalf("node %v %+v", err, n)
	}
	// Nothing talked to :50000, ever.
	if calls, _ := h.TalosAPICalls(m.ID); len(calls) != 0 {
		t.Fatalf("calls to the Talos API: %+v", calls)
	}
	// What answers there is apid, which wants a client certificate: an
	// attacker's insecure client gets nowhere, and the attempt is recorded.
	talosAddr := net.JoinHostPort(m.IPv4, fmt.Sprint(h.TalosPort()))
	if got := talosAPI(talosAddr); got != "configured" {
		t.Fatalf("the Talos API answers an insecure client as %q", got)
	}
	if calls, _ := h.TalosAPICalls(m.ID); len(calls) == 0 || calls[0].Method != "tls-handshake" {
		t.Fatalf("the insecure attempt was not recorded: %+v", calls)
	}
	// Talos stored the config in STATE: the next boot does not need metal-iso.
	h.PowerOff(m.ID)
	if err := h.Boot(ctx, m, scwsim.BootNormal, nil); err != nil {
		t.Fatal(err)
	}
	if st, _ = h.Status(m.ID); st.Phase != PhaseRunning || st.ConfigSource != ConfigFromState {
		t.Fatalf("reboot: %+v", st)
	}
	got := events.of("")
	if got != "rescue,poweroff,config-from-disk,kubelet,poweroff,kubelet" {
		t.Fatalf("events: %s", got)
	}
}

// Without a usable config on the disk, Talos booted with
// talos.config=metal-iso stays down: no maintenance API, no Node.
func TestMetalISOFailsClosed(t *testing.T) {
	ctx := context.Background()
	kube := startKube(t)
	var events eventLog
	h := newHosts(t, Options{Kube: kube, DiskSizeDivisor: 20000, OnEvent: events.record})
	noInstall := func(t *testing.T, name string) []byte {
		b := workerConfig(t, name, "scaleway-em://fr-par-2/x")
		out := bytes.Replace(b, []byte("disk: /dev/nvme0n1"), []byte(`disk: ""`), 1)
		if bytes.Equal(out, b) {
			t.Fatal("no install disk to remove")
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		config func(t *testing.T, name string) []byte // nil: no write-config
		event  string
		reason string
	}{
		{"no metal-iso partition", nil, "config-missing", "no metal-iso volume"},
		{"config not YAML", func(*testing.T, string) []byte { return []byte("{{{") }, "config-invalid", "failed to load config"},
		{"config without install disk", noInstall, "config-invalid", "failed to validate config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t, "EM-A610R-NVME")
			if err := h.Boot(ctx, m, scwsim.BootNormal, nil); err != nil {
				t.Fatal(err)
			}
			tree, err := h.Hardware(m.ID)
			if err != nil {
				t.Fatal(err)
			}
			h.PowerOff(m.ID)
			disk := tree.DevicePath("nvme0n1")
			imageOnDisk(t, disk, diskimage.WithKernelArgs(diskimage.MetalISOKernelArgs))
			if tc.config != nil {
				if _, err := configpart.Write(ctx, disk, tc.config(t, "em-"+m.Name), configpart.Options{}); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.Boot(ctx, m, scwsim.BootNormal, nil); err != nil {
				t.Fatal(err)
			}
			st, _ := h.Status(m.ID)
			if st.Phase != PhaseBootFailed || !strings.Contains(st.BootError, tc.reason) || st.NodeName != "" {
				t.Fatalf("status %+v", st)
			}
			if addr := net.JoinHostPort(m.IPv4, fmt.Sprint(h.TalosPort())); !dialFails(addr) {
				t.Fatal("something listens on :50000 of a Talos without config")
			}
			if _, err := kube.CoreV1().Nodes().Get(ctx, "em-"+m.Name, metav1.GetOptions{}); err == nil {
				t.Fatal("a node registered")
			}
			if got := events.of(m.ID); got != "boot-empty,poweroff,"+tc.event {
				t.Fatalf("events %s", got)
			}
		})
	}
}
