package machine

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	iam "github.com/scaleway/scaleway-sdk-go/api/iam/v1alpha1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"golang.org/x/crypto/ssh"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const projectID = "00000000-0000-0000-0000-000000000000"

// simAPI starts the EM API simulator (test profile, edited by tune when not
// nil) driving the machines of h, and returns it with the SDK's bare-metal
// API, the controller's SSH key and that key registered in IAM.
func simAPI(t *testing.T, h *Hosts, tune func(*scwsim.Options)) (*scwsim.Sim, *baremetal.API, ssh.Signer, *iam.SSHKey) {
	t.Helper()
	opts, err := scwsim.Profile(scwsim.ProfileTest)
	if err != nil {
		t.Fatal(err)
	}
	opts.Host = h
	if tune != nil {
		tune(&opts)
	}
	sim := scwsim.New(opts)
	ts := httptest.NewServer(sim.Handler())
	t.Cleanup(sim.Close)
	t.Cleanup(ts.Close)
	cli, err := scw.NewClient(scw.WithAPIURL(ts.URL), scw.WithAuth("SCWXXXXXXXXXXXXXXXXX", sim.SecretKey()),
		scw.WithDefaultZone(scw.ZoneFrPar2), scw.WithDefaultProjectID(projectID))
	if err != nil {
		t.Fatal(err)
	}
	key, authorized := newKey(t)
	iamKey, err := iam.NewAPI(cli).CreateSSHKey(&iam.CreateSSHKeyRequest{Name: "controller", PublicKey: strings.TrimSpace(authorized), ProjectID: projectID})
	if err != nil {
		t.Fatal(err)
	}
	return sim, baremetal.NewAPI(cli), key, iamKey
}

// The machines driven by the EM API simulator through the real Scaleway SDK,
// as the provider drives them: order, rescue reboot with an IAM key, SSH +
// em-imager, normal reboot, Talos apply, Node; delete.
func TestDrivenByEMAPISimulator(t *testing.T) {
	ctx := context.Background()
	imager := emImager(t)
	kube := startKube(t)
	h := newHosts(t, Options{Kube: kube, DiskSizeDivisor: 20000})
	sim, bm, key, iamKey := simAPI(t, h, nil)
	offerID, ok := sim.OfferID("fr-par-2", "EM-A610R-NVME", "hourly")
	if !ok {
		t.Fatal("offer EM-A610R-NVME not in the simulator")
	}
	srv, err := bm.CreateServer(&baremetal.CreateServerRequest{OfferID: offerID, Name: "world-1"})
	if err != nil {
		t.Fatal(err)
	}
	waitPhase := func(want Phase) Status {
		t.Helper()
		var st Status
		waitFor(t, "phase "+string(want), func() (bool, error) {
			s, err := h.Status(srv.ID)
			st = s
			return err == nil && s.Phase == want, fmt.Errorf("phase %s, err %w", s.Phase, err)
		})
		return st
	}
	waitReady := func() *baremetal.Server {
		t.Helper()
		var s *baremetal.Server
		waitFor(t, "server ready", func() (bool, error) {
			var err error
			s, err = bm.GetServer(&baremetal.GetServerRequest{ServerID: srv.ID})
			return err == nil && s.Status == baremetal.ServerStatusReady, err
		})
		return s
	}
	srv = waitReady()
	waitPhase(PhaseNoOS) // delivered with install: null

	var ipv4 string
	for _, ip := range srv.IPs {
		if ip.Version == baremetal.IPVersionIPv4 {
			ipv4 = ip.Address.String()
		}
	}
	if ipv4 == "" {
		t.Fatalf("server has no IPv4: %+v", srv.IPs)
	}
	if _, err := bm.RebootServer(&baremetal.RebootServerRequest{ServerID: srv.ID, BootType: baremetal.ServerBootTypeRescue, SSHKeyIDs: []string{iamKey.ID}}); err != nil {
		t.Fatal(err)
	}
	waitReady()
	waitPhase(PhaseRescue)
	hk, err := h.HostKey(srv.ID)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ssh.Dial("tcp", net.JoinHostPort(ipv4, fmt.Sprint(h.SSHPort())), &ssh.ClientConfig{
		User: "rescue", Auth: []ssh.AuthMethod{ssh.PublicKeys(key)}, HostKeyCallback: ssh.FixedHostKey(hk), Timeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatalf("ssh rescue@%s: %v", ipv4, err)
	}
	defer c.Close()
	upload(t, c, imager, "em-imager")
	img, sum := talosImage(t, 8<<20)
	imgSrv := imageServer(t, img)
	r, code, stderr := runReport(t, c, fmt.Sprintf("sudo -n ./em-imager write --image %s/metal-amd64.raw --sha256 %s", imgSrv.URL, sum))
	if code != 0 || !r.OK {
		t.Fatalf("write: %+v\n%s", r.Error, stderr)
	}
	// The report's NICs are the server's: the uplink MAC selects the Talos link.
	var macs []string
	for _, n := range r.NICs {
		macs = append(macs, n.HardwareMAC())
	}
	tree, err := h.Hardware(srv.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(macs) == 0 || macs[0] != tree.Spec.NICs[0].MAC {
		t.Fatalf("report MACs %v, machine NICs %+v", macs, tree.Spec.NICs)
	}

	if _, err := bm.RebootServer(&baremetal.RebootServerRequest{ServerID: srv.ID, BootType: baremetal.ServerBootTypeNormal}); err != nil {
		t.Fatal(err)
	}
	waitReady()
	st := waitPhase(PhaseMaintenance)
	if st.TalosAddr != net.JoinHostPort(ipv4, fmt.Sprint(h.TalosPort())) {
		t.Fatalf("Talos API at %s, server IPv4 %s", st.TalosAddr, ipv4)
	}
	tc, err := talosclient.New(ctx, talosclient.WithEndpoints(st.TalosAddr), talosclient.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	providerID := "scaleway-em://fr-par-2/" + srv.ID
	if _, err := tc.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: workerConfig(t, "world-1", providerID)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node world-1 Ready", nodeReady(ctx, kube, "world-1"))
	n, err := kube.CoreV1().Nodes().Get(ctx, "world-1", metav1.GetOptions{})
	if err != nil || n.Spec.ProviderID != providerID {
		t.Fatalf("node: %v %v", n, err)
	}

	if _, err := bm.DeleteServer(&baremetal.DeleteServerRequest{ServerID: srv.ID}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "machine released", func() (bool, error) {
		_, err := h.Status(srv.ID)
		return err != nil, nil
	})
	if _, err := os.Stat(tree.Dir); !os.IsNotExist(err) {
		t.Fatalf("disks of a deleted server remain: %v", err)
	}
}
