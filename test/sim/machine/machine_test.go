package machine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/diskimage"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/hardware"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/talosapi"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
	"github.com/pkg/sftp"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"golang.org/x/crypto/ssh"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// emImager returns the real em-imager: $TEST_ASSET_EM_IMAGER (make test
// builds it first), else a fresh build of ./imager/cmd/em-imager.
func emImager(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TEST_ASSET_EM_IMAGER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("TEST_ASSET_EM_IMAGER=%s: %v (run `make build`)", p, err)
		}
		return p
	}
	out := filepath.Join(t.TempDir(), "em-imager")
	cmd := exec.Command("go", "build", "-o", out, "./imager/cmd/em-imager")
	cmd.Dir = "../../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build em-imager: %v\n%s", err, b)
	}
	return out
}

func recordedOffer(t *testing.T, name string) *baremetal.Offer {
	t.Helper()
	o, err := hardware.RecordedOffer(name)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

var ipCounter atomic.Uint32

// newMachine returns a machine on its own loopback address.
func newMachine(t *testing.T, offer string) scwsim.Machine {
	t.Helper()
	n := ipCounter.Add(1)
	id := fmt.Sprintf("5f3c1a2b-0000-4000-8000-%012d", n)
	return scwsim.Machine{
		ID: id, Zone: "fr-par-2", Name: "node-" + fmt.Sprint(n), ProjectID: "p",
		Offer:       recordedOffer(t, offer),
		IPv4:        fmt.Sprintf("127.%d.%d.%d", 100+os.Getpid()%100, n/250, 1+n%250),
		IPv6:        fmt.Sprintf("2001:bc8:710::%x", n),
		IPv6Gateway: "2001:bc8:710::1",
		MACs:        []string{fmt.Sprintf("00:08:a2:0c:%02x:01", n), fmt.Sprintf("00:08:a2:0c:%02x:02", n)},
	}
}

func newKey(t *testing.T) (ssh.Signer, string) {
	t.Helper()
	s, err := rescue.NewHostKey()
	if err != nil {
		t.Fatal(err)
	}
	return s, string(ssh.MarshalAuthorizedKey(s.PublicKey()))
}

func startKube(t *testing.T) kubernetes.Interface {
	t.Helper()
	k := testenv.StartKube(t, testenv.KubeOptions{NoKarpenterCRDs: true})
	c, err := kubernetes.NewForConfig(k.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newHosts(t *testing.T, opts Options) *Hosts {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = 200 * time.Millisecond
	}
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func sshClient(t *testing.T, h *Hosts, m scwsim.Machine, key ssh.Signer) (*ssh.Client, error) {
	t.Helper()
	hk, err := h.HostKey(m.ID)
	if err != nil {
		t.Fatal(err)
	}
	return ssh.Dial("tcp", net.JoinHostPort(m.IPv4, fmt.Sprint(h.SSHPort())), &ssh.ClientConfig{
		User: rescue.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(key)},
		HostKeyCallback: ssh.FixedHostKey(hk), Timeout: 10 * time.Second,
	})
}

// bootRescue boots m into rescue with a fresh key and returns an SSH client
// to it, closed when the test ends.
func bootRescue(t *testing.T, h *Hosts, m scwsim.Machine) *ssh.Client {
	t.Helper()
	key, authorized := newKey(t)
	if err := h.Boot(context.Background(), m, scwsim.BootRescue, []string{authorized}); err != nil {
		t.Fatal(err)
	}
	c, err := sshClient(t, h, m, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func upload(t *testing.T, c *ssh.Client, local, remote string) {
	t.Helper()
	sc, err := sftp.NewClient(c)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	src, err := os.Open(local)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := sc.Create(remote)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dst.ReadFrom(src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sc.Chmod(remote, 0o755); err != nil {
		t.Fatal(err)
	}
}

// runReport runs an em-imager command and parses its report.
func runReport(t *testing.T, c *ssh.Client, cmd string) (*report.Report, int, string) {
	t.Helper()
	r, code, _, stderr := runStdin(t, c, cmd, nil)
	return r, code, stderr
}

func imageServer(t *testing.T, img []byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "metal-amd64.raw", time.Unix(1700000000, 0), bytes.NewReader(img))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func talosImage(t *testing.T, size int64) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	if err := diskimage.WriteTalosLikeImage(&buf, size, diskimage.WithTalosVersion("v1.12.2")); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), hex.EncodeToString(sum[:])
}

func workerConfig(t *testing.T, hostname, providerID string) []byte {
	t.Helper()
	bundle, err := secrets.NewBundle(secrets.NewClock(), config.TalosVersion1_12)
	if err != nil {
		t.Fatal(err)
	}
	in, err := generate.NewInput("sim", "https://10.0.0.1:6443", "1.35.0",
		generate.WithSecretsBundle(bundle), generate.WithVersionContract(config.TalosVersion1_12),
		generate.WithInstallDisk("/dev/nvme0n1"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := in.Config(machinetype.TypeWorker)
	if err != nil {
		t.Fatal(err)
	}
	p, err := configpatcher.LoadPatch(fmt.Appendf(nil, `machine:
  kubelet:
    extraArgs:
      provider-id: %s
    extraConfig:
      registerWithTaints:
        - key: karpenter.sh/unregistered
          effect: NoExecute
---
apiVersion: v1alpha1
kind: HostnameConfig
auto: "off"
hostname: %s
`, providerID, hostname))
	if err != nil {
		t.Fatal(err)
	}
	out, err := configpatcher.Apply(configpatcher.WithConfig(cfg), []configpatcher.Patch{p})
	if err != nil {
		t.Fatal(err)
	}
	b, err := out.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok {
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s (last: %v)", what, last)
}

func nodeReady(ctx context.Context, kube kubernetes.Interface, name string) func() (bool, error) {
	return func() (bool, error) {
		n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, fmt.Errorf("ready=%s", c.Status)
			}
		}
		return false, errors.New("no Ready condition")
	}
}

// talosAPI says what answers an insecure (maintenance-mode) client on addr:
// "maintenance" (Version refused as in maintenance mode), "configured" (the
// TLS handshake wants a client certificate), "down" or the error.
func talosAPI(addr string) string {
	if dialFails(addr) {
		return "down"
	}
	// A server that asks for a client certificate is a configured apid:
	// maintenance mode never does (tls.ServerOnly).
	asked := false
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{
		InsecureSkipVerify: true, NextProtos: []string{"h2"},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			asked = true
			return &tls.Certificate{}, nil
		},
	})
	if err == nil {
		conn.Close()
	}
	if asked {
		return "configured"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := talosclient.New(ctx, talosclient.WithEndpoints(addr), talosclient.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}))
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	_, err = c.Version(ctx)
	switch {
	case status.Code(err) == codes.Unimplemented && strings.Contains(err.Error(), talosapi.MsgNotInMaintenance):
		return "maintenance"
	case err == nil:
		return "answered Version"
	}
	return err.Error()
}

func dialFails(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		c.Close()
		return false
	}
	return true
}

// The node's whole path on the machine side, with the real em-imager and
// the real clients: rescue SSH, SFTP upload, inspect, write, normal boot
// into the maintenance API, apply config, Node Ready, power-off, reboot
// into the installed system.
func TestRescueImageBootJoin(t *testing.T) {
	ctx := context.Background()
	imager := emImager(t)
	kube := startKube(t)
	var events eventLog
	h := newHosts(t, Options{Kube: kube, DiskSizeDivisor: 20000, OnEvent: events.record})
	m := newMachine(t, "EM-A610R-NVME")
	key, authorized := newKey(t)

	// Delivered with no OS: nothing answers.
	if err := h.Boot(ctx, m, scwsim.BootNormal, nil); err != nil {
		t.Fatal(err)
	}
	st, _ := h.Status(m.ID)
	if st.Phase != PhaseNoOS || !strings.Contains(st.BootError, "no GPT header") {
		t.Fatalf("fresh machine: %+v", st)
	}
	talosAddr := net.JoinHostPort(m.IPv4, fmt.Sprint(h.TalosPort()))
	sshAddr := net.JoinHostPort(m.IPv4, fmt.Sprint(h.SSHPort()))
	if !dialFails(talosAddr) || !dialFails(sshAddr) {
		t.Fatal("a machine with no OS answers on the network")
	}

	h.PowerOff(m.ID)
	if err := h.Boot(ctx, m, scwsim.BootRescue, []string{authorized}); err != nil {
		t.Fatal(err)
	}
	wrong, _ := newKey(t)
	if _, err := sshClient(t, h, m, wrong); err == nil {
		t.Fatal("rescue accepted a key not given at reboot")
	}
	c, err := sshClient(t, h, m, key)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	upload(t, c, imager, "em-imager")

	r, code, stderr := runReport(t, c, "sudo -n ./em-imager inspect")
	if code != 0 || !r.OK {
		t.Fatalf("inspect: exit %d %+v\n%s", code, r.Error, stderr)
	}
	tree, err := h.Hardware(m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Disk == nil || r.Disk.Path != "/dev/nvme0n1" || r.Disk.SizeBytes != tree.Spec.Disks[0].SizeBytes ||
		r.Disk.Serial != tree.Spec.Disks[0].Serial || r.Disk.Model != tree.Spec.Disks[0].Model {
		t.Fatalf("inspect disk %+v, want %+v", r.Disk, tree.Spec.Disks[0])
	}
	if len(r.NICs) != 2 {
		t.Fatalf("inspect NICs %+v", r.NICs)
	}
	for i, n := range r.NICs {
		if n.Name != fmt.Sprintf("eth%d", i) || n.HardwareMAC() != m.MACs[i] {
			t.Errorf("NIC %d: %+v, want MAC %s", i, n, m.MACs[i])
		}
	}
	if !r.NICs[0].HasDefaultRoute || !r.NICs[0].LinkUp {
		t.Errorf("uplink %+v", r.NICs[0])
	}

	// A write whose digest does not match leaves the disk unbootable.
	img, sum := talosImage(t, 16<<20)
	srv := imageServer(t, img)
	bad := strings.Repeat("0", 64)
	r, code, _ = runReport(t, c, fmt.Sprintf("sudo -n ./em-imager write --image %s/metal-amd64.raw --sha256 %s --disk auto", srv.URL, bad))
	if code == 0 || r.OK || r.Error.Code != report.CodeDigestMismatch {
		t.Fatalf("write with wrong digest: exit %d %+v", code, r.Error)
	}
	if _, err := diskimage.InspectFile(tree.DevicePath("nvme0n1")); err == nil {
		t.Fatal("disk boots after a failed write")
	}

	r, code, stderr = runReport(t, c, fmt.Sprintf("sudo -n ./em-imager write --image %s/metal-amd64.raw --sha256 %s --disk auto", srv.URL, sum))
	if code != 0 || !r.OK || r.Image == nil || !r.Image.Verified {
		t.Fatalf("write: exit %d %+v\n%s", code, r.Error, stderr)
	}
	c.Close()

	// Reboot normal: the maintenance API comes up on the machine's address.
	h.PowerOff(m.ID)
	if !dialFails(sshAddr) {
		t.Fatal("rescue SSH still up after power-off")
	}
	if err := h.Boot(ctx, m, scwsim.BootNormal, nil); err != nil {
		t.Fatal(err)
	}
	st, _ = h.Status(m.ID)
	if st.Phase != PhaseMaintenance || st.TalosAddr != talosAddr || st.BootDisk != tree.DevicePath("nvme0n1") {
		t.Fatalf("after write + normal boot: %+v", st)
	}
	tc, err := talosclient.New(ctx, talosclient.WithEndpoints(talosAddr), talosclient.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	providerID := "scaleway-em://fr-par-2/" + m.ID
	cfg := workerConfig(t, "em-"+m.Name, providerID)
	if _, err := tc.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: cfg, Mode: machine.ApplyConfigurationRequest_AUTO}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	nodeName := "em-" + m.Name
	waitFor(t, "node Ready", nodeReady(ctx, kube, nodeName))
	n, err := kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.ProviderID != providerID || n.Status.NodeInfo.OSImage != "Talos (v1.12.2)" {
		t.Fatalf("node %s %+v", n.Spec.ProviderID, n.Status.NodeInfo)
	}
	if cpu := n.Status.Capacity[corev1.ResourceCPU]; cpu.Value() != 12 {
		t.Fatalf("cpu capacity %s (offer has 12 threads)", cpu.String())
	}
	// No volume documents: EPHEMERAL fills the boot disk after Talos's partitions.
	if eph := n.Status.Capacity[corev1.ResourceEphemeralStorage]; eph.Value() != localdisks.EphemeralBytes(int64(m.Offer.Disks[0].Capacity), true) {
		t.Fatalf("ephemeral-storage %s, want %d", eph.String(), localdisks.EphemeralBytes(int64(m.Offer.Disks[0].Capacity), true))
	}
	// Talos left maintenance mode: apid, mTLS only, took the port over.
	waitFor(t, "maintenance API replaced by apid", func() (bool, error) {
		got := talosAPI(talosAddr)
		return got == "configured", errors.New(got)
	})
	st, _ = h.Status(m.ID)
	if st.Phase != PhaseRunning || st.NodeName != nodeName || st.KubeletError != "" || st.ConfigSource != ConfigFromMaintenance {
		t.Fatalf("after apply: %+v", st)
	}

	// Power-off: heartbeat stops. Reboot: the stored config boots straight
	// into the installed system, no maintenance API, same Node.
	h.PowerOff(m.ID)
	lease := func() time.Time {
		l, err := kube.CoordinationV1().Leases("kube-node-lease").Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Spec.RenewTime.Time
	}
	off := lease()
	time.Sleep(1 * time.Second)
	if !lease().Equal(off) {
		t.Fatal("lease renewed while the machine is off")
	}
	if err := h.Boot(ctx, m, scwsim.BootNormal, nil); err != nil {
		t.Fatal(err)
	}
	st, _ = h.Status(m.ID)
	if st.Phase != PhaseRunning || st.NodeName != nodeName {
		t.Fatalf("reboot with stored config: %+v", st)
	}
	if got := talosAPI(talosAddr); got != "configured" || st.ConfigSource != ConfigFromState {
		t.Fatalf("reboot with a config: the Talos API answers as %q, config from %q", got, st.ConfigSource)
	}
	waitFor(t, "lease renewed after reboot", func() (bool, error) { return lease().After(off), nil })

	// Back to rescue and a fresh image: the config is gone with the old install.
	h.PowerOff(m.ID)
	if err := h.Boot(ctx, m, scwsim.BootRescue, []string{authorized}); err != nil {
		t.Fatal(err)
	}
	c, err = sshClient(t, h, m, key)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Rescue runs from RAM: the helper uploaded before is gone.
	if _, code, _ := runReportAllowGarbage(t, c, "test -e em-imager"); code == 0 {
		t.Fatal("rescue home kept files across reboots")
	}
	upload(t, c, imager, "em-imager")
	if r, code, stderr := runReport(t, c, fmt.Sprintf("sudo -n ./em-imager write --image %s/metal-amd64.raw --sha256 %s --disk auto", srv.URL, sum)); code != 0 || !r.OK {
		t.Fatalf("rewrite: %+v\n%s", r.Error, stderr)
	}
	h.PowerOff(m.ID)
	if err := h.Boot(ctx, m, scwsim.BootNormal, nil); err != nil {
		t.Fatal(err)
	}
	if st, _ = h.Status(m.ID); st.Phase != PhaseMaintenance {
		t.Fatalf("reinstalled machine: %+v", st)
	}

	dir := tree.Dir
	h.Delete(m.ID)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("machine dir after delete: %v", err)
	}
	if !dialFails(talosAddr) {
		t.Fatal("deleted machine still answers")
	}
	if _, err := h.Status(m.ID); err == nil {
		t.Fatal("deleted machine still has a status")
	}
	want := "boot-empty,poweroff,rescue,poweroff,maintenance,applied,kubelet,poweroff,kubelet,poweroff,rescue,poweroff,maintenance,deleted"
	if got := events.of(""); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
}

// runReportAllowGarbage runs a command that prints no report.
func runReportAllowGarbage(t *testing.T, c *ssh.Client, cmd string) (string, int, error) {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.CombinedOutput(cmd)
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitStatus(), nil
	}
	return string(out), 0, err
}

// PowerOff in the middle of a command kills it and drops the connection.
func TestPowerOffDuringCommand(t *testing.T) {
	h := newHosts(t, Options{DiskSizeDivisor: 20000})
	m := newMachine(t, "EM-A116X-SSD")
	c := bootRescue(t, h, m)
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := s.StdoutPipe()
	if err := s.Start("echo started; exec sleep 300"); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 8)
	if _, err := io.ReadFull(out, line); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	h.PowerOff(m.ID)
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("command succeeded across a power-off")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("command survived power-off")
	}
	if st, _ := h.Status(m.ID); st.Phase != PhaseOff {
		t.Fatalf("status after power-off %+v", st)
	}
}

// A machine whose config cannot join never registers; one picked by
// NeverReady registers NotReady; with NotReadyAfter a powered-off node goes Unknown.
func TestJoinFailureNeverReadyAndUnknown(t *testing.T) {
	ctx := context.Background()
	kube := startKube(t)
	var never atomic.Value
	never.Store("")
	h := newHosts(t, Options{
		Kube: kube, DiskSizeDivisor: 20000,
		Join:          talosapi.JoinPolicy{Endpoint: "https://10.9.9.9:6443"},
		NotReadyAfter: 300 * time.Millisecond,
		NeverReady:    func(m scwsim.Machine) bool { return m.ID == never.Load().(string) },
	})
	img, _ := talosImage(t, 8<<20)
	install := func(m scwsim.Machine) {
		t.Helper()
		if err := h.Boot(ctx, m, scwsim.BootRescue, nil); err != nil {
			t.Fatal(err)
		}
		tree, err := h.Hardware(m.ID)
		if err != nil {
			t.Fatal(err)
		}
		// Same bytes em-imager would write (the imager path is tested above).
		f, err := os.OpenFile(tree.DevicePath(tree.Spec.Disks[0].Name), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(img, 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
		h.PowerOff(m.ID)
		if err := h.Boot(ctx, m, scwsim.BootNormal, nil); err != nil {
			t.Fatal(err)
		}
	}
	apply := func(m scwsim.Machine, cfg []byte) {
		t.Helper()
		st, _ := h.Status(m.ID)
		tc, err := talosclient.New(ctx, talosclient.WithEndpoints(st.TalosAddr), talosclient.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}))
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		if _, err := tc.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: cfg}); err != nil {
			t.Fatalf("apply: %v", err)
		}
	}

	// Join rejected: the config's endpoint is not the cluster's.
	m1 := newMachine(t, "EM-A610R-NVME")
	install(m1)
	apply(m1, workerConfig(t, "join-fail", "scaleway-em://fr-par-2/"+m1.ID))
	st, _ := h.Status(m1.ID)
	if st.Phase != PhaseRunning || !strings.Contains(st.KubeletError, "endpoint") {
		t.Fatalf("rejected join: %+v", st)
	}
	if _, err := kube.CoreV1().Nodes().Get(ctx, "join-fail", metav1.GetOptions{}); err == nil {
		t.Fatal("node registered although the config cannot join")
	}

	// NeverReady.
	h2 := newHosts(t, Options{Kube: kube, DiskSizeDivisor: 20000, NotReadyAfter: 300 * time.Millisecond,
		NeverReady: func(m scwsim.Machine) bool { return m.ID == never.Load().(string) }})
	h = h2
	m2 := newMachine(t, "EM-A610R-NVME")
	never.Store(m2.ID)
	install(m2)
	apply(m2, workerConfig(t, "never-ready", "scaleway-em://fr-par-2/"+m2.ID))
	waitFor(t, "never-ready registered NotReady", func() (bool, error) {
		ok, err := nodeReady(ctx, kube, "never-ready")()
		return !ok && err != nil && err.Error() == "ready=False", err
	})

	// A Ready node that powers off goes Unknown after NotReadyAfter.
	m3 := newMachine(t, "EM-A610R-NVME")
	install(m3)
	apply(m3, workerConfig(t, "goes-away", "scaleway-em://fr-par-2/"+m3.ID))
	waitFor(t, "goes-away Ready", nodeReady(ctx, kube, "goes-away"))
	h.PowerOff(m3.ID)
	waitFor(t, "goes-away Unknown", func() (bool, error) {
		_, err := nodeReady(ctx, kube, "goes-away")()
		return err != nil && err.Error() == "ready=Unknown", err
	})
	n, err := kube.CoreV1().Nodes().Get(ctx, "goes-away", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, tn := range n.Spec.Taints {
		keys = append(keys, tn.ToString())
	}
	if !strings.Contains(strings.Join(keys, ","), corev1.TaintNodeUnreachable+":NoExecute") {
		t.Fatalf("taints %v", keys)
	}
	// Booting it again makes it Ready and lifts the unreachable taints.
	if err := h.Boot(ctx, m3, scwsim.BootNormal, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "goes-away Ready again", nodeReady(ctx, kube, "goes-away"))
	// SetNeverReady flips a machine at its next boot.
	if err := h.SetNeverReady(m3.ID, true); err != nil {
		t.Fatal(err)
	}
	h.PowerOff(m3.ID)
	if err := h.Boot(ctx, m3, scwsim.BootNormal, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "goes-away NotReady", func() (bool, error) {
		_, err := nodeReady(ctx, kube, "goes-away")()
		return err != nil && err.Error() == "ready=False", err
	})
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	if _, err := New(Options{}); err == nil {
		t.Error("New without Dir")
	}
	if _, err := New(Options{Dir: t.TempDir(), SSHPort: 70000}); err == nil {
		t.Error("bad SSH port accepted")
	}
	if _, err := New(Options{Dir: t.TempDir(), DiskSizeDivisor: -1}); err == nil {
		t.Error("negative divisor accepted")
	}
	h := newHosts(t, Options{})
	m := newMachine(t, "EM-A610R-NVME")
	bad := m
	bad.IPv4 = "::1"
	if err := h.Boot(ctx, bad, scwsim.BootRescue, nil); err == nil || !strings.Contains(err.Error(), "IPv4") {
		t.Errorf("IPv6 as IPv4: %v", err)
	}
	noOffer := m
	noOffer.Offer = nil
	if err := h.Boot(ctx, noOffer, scwsim.BootRescue, nil); err == nil || !strings.Contains(err.Error(), "offer") {
		t.Errorf("no offer: %v", err)
	}
	if err := h.Boot(ctx, m, scwsim.BootMode("pxe"), nil); err == nil {
		t.Error("unknown boot mode accepted")
	}
	if err := h.Boot(ctx, m, scwsim.BootRescue, []string{"not a key"}); err == nil {
		t.Error("bad SSH key accepted")
	}
	// Unknown machines: PowerOff and Delete are no-ops, queries fail.
	h.PowerOff("nope")
	h.Delete("nope")
	if _, err := h.Status("nope"); err == nil {
		t.Error("status of unknown machine")
	}
	// Two machines on the same address and port: the second boot fails.
	if err := h.Boot(ctx, m, scwsim.BootRescue, nil); err != nil {
		t.Fatal(err)
	}
	twin := newMachine(t, "EM-A610R-NVME")
	twin.IPv4 = m.IPv4
	if err := h.Boot(ctx, twin, scwsim.BootRescue, nil); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("address clash: %v", err)
	}
}

// A power-off while ApplyConfiguration waits for the machine must neither
// deadlock nor store the config.
func TestPowerOffDuringApply(t *testing.T) {
	ctx := context.Background()
	h := newHosts(t, Options{DiskSizeDivisor: 20000})
	m := newMachine(t, "EM-A610R-NVME")
	if err := h.Boot(ctx, m, scwsim.BootRescue, nil); err != nil {
		t.Fatal(err)
	}
	tree, err := h.Hardware(m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := diskimage.BuildTalosLikeImage(tree.DevicePath("nvme0n1"), 8<<20); err != nil {
		t.Fatal(err)
	}
	h.PowerOff(m.ID)
	if err := h.Boot(ctx, m, scwsim.BootNormal, nil); err != nil {
		t.Fatal(err)
	}
	st, _ := h.Status(m.ID)
	tc, err := talosclient.New(ctx, talosclient.WithEndpoints(st.TalosAddr), talosclient.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()

	x, err := h.get(m.ID, false, scwsim.Machine{})
	if err != nil {
		t.Fatal(err)
	}
	x.mu.Lock() // the machine is busy: the apply handler has to wait
	applied := make(chan error, 1)
	go func() {
		_, err := tc.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: workerConfig(t, "race", "scaleway-em://fr-par-2/"+m.ID)})
		applied <- err
	}()
	time.Sleep(500 * time.Millisecond) // let the call reach the handler
	stopped := make(chan struct{})
	go func() {
		x.bootCount++
		h.stopLocked(x, true) // what PowerOff does under the lock
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("power-off deadlocked with a running ApplyConfiguration")
	}
	x.mu.Unlock()
	if err := <-applied; err == nil {
		t.Fatal("apply succeeded on a machine that powered off")
	}
	if cfg, err := diskimage.ReadState(tree.DevicePath("nvme0n1")); err != nil || cfg != nil {
		t.Fatalf("config stored by an interrupted apply: %q %v", cfg, err)
	}
}

// Hardware faults reach em-imager through the fake tree: a mounted disk is
// refused, auto-selection moves on to the next one.
func TestBusyDiskRefusedByImager(t *testing.T) {
	imager := emImager(t)
	h := newHosts(t, Options{DiskSizeDivisor: 20000, Hardware: func(m scwsim.Machine, spec *hardware.Spec) {
		spec.ExtraMounts = append(spec.ExtraMounts, hardware.Mount{Device: "/dev/nvme0n1", Point: "/mnt", FSType: "ext4", Options: "rw"})
	}})
	m := newMachine(t, "EM-A610R-NVME")
	c := bootRescue(t, h, m)
	upload(t, c, imager, "em-imager")
	r, code, stderr := runReport(t, c, "sudo ./em-imager inspect")
	if code != 0 || r.Disk == nil || r.Disk.Path != "/dev/nvme1n1" {
		t.Fatalf("inspect with nvme0n1 mounted: exit %d disk %+v\n%s", code, r.Disk, stderr)
	}
	img, sum := talosImage(t, 8<<20)
	srv := imageServer(t, img)
	r, code, _ = runReport(t, c, fmt.Sprintf("sudo ./em-imager write --image %s/i.raw --sha256 %s --disk /dev/nvme0n1", srv.URL, sum))
	if code == 0 || r.OK || r.Error.Code != report.CodeDiskBusy {
		t.Fatalf("write to a mounted disk: exit %d %+v", code, r.Error)
	}
}

// Each rescue boot has its own host key, as a rescue system generated in RAM
// does: a client that pinned the first boot's key is refused by the second.
func TestRescueHostKeyChangesPerBoot(t *testing.T) {
	h := newHosts(t, Options{})
	m := newMachine(t, "EM-A610R-NVME")
	key, authorized := newKey(t)
	if err := h.Boot(context.Background(), m, scwsim.BootRescue, []string{authorized}); err != nil {
		t.Fatal(err)
	}
	first, err := h.HostKey(m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Boot(context.Background(), m, scwsim.BootRescue, []string{authorized}); err != nil {
		t.Fatal(err)
	}
	second, err := h.HostKey(m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(first.Marshal(), second.Marshal()) {
		t.Fatal("two rescue boots showed the same host key")
	}
	_, err = ssh.Dial("tcp", net.JoinHostPort(m.IPv4, fmt.Sprint(h.SSHPort())), &ssh.ClientConfig{
		User: rescue.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(key)},
		HostKeyCallback: ssh.FixedHostKey(first), Timeout: 10 * time.Second,
	})
	if err == nil {
		t.Fatal("the second rescue boot accepted a client pinned to the first boot's key")
	}
	c, err := sshClient(t, h, m, key)
	if err != nil {
		t.Fatalf("the current key is refused: %v", err)
	}
	c.Close()
}

// eventLog records the hosts' events (Options.OnEvent), safe for their
// goroutines.
type eventLog struct {
	mu  sync.Mutex
	all []Event
}

func (l *eventLog) record(e Event) {
	l.mu.Lock()
	l.all = append(l.all, e)
	l.mu.Unlock()
}

// of joins the events of one server (every server when id is "") with commas.
func (l *eventLog) of(id string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var what []string
	for _, e := range l.all {
		if id == "" || e.ServerID == id {
			what = append(what, e.What)
		}
	}
	return strings.Join(what, ",")
}
