package world

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/diskimage"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	iam "github.com/scaleway/scaleway-sdk-go/api/iam/v1alpha1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"golang.org/x/crypto/ssh"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/talosgen"
)

// TestWorldServesTheWholePath drives a world by hand with the real clients,
// the way the controller does: the join Secret parses, a server ordered
// through the SDK is delivered, reboots into rescue with an IAM key, accepts
// SSH/SFTP, runs the uploaded em-imager against its disk with the published
// image, and then boots into the Talos maintenance API.
func TestWorldServesTheWholePath(t *testing.T) {
	// The test applies the config by hand over the maintenance API: an image
	// without talos.config=metal-iso (the world's default has it).
	w := Start(t, Options{ImageKernelArgs: diskimage.DefaultKernelArgs})
	ctx := context.Background()
	sec, err := w.Clientset.CoreV1().Secrets(w.JoinSecret.Namespace).Get(ctx, w.JoinSecret.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	join, err := talosgen.ParseJoinSecret(w.JoinSecret.String(), sec.Data)
	if err != nil {
		t.Fatalf("join Secret does not parse: %v", err)
	}
	if join.Form() != talosgen.FormKubernetes || join.Endpoint() != strings.TrimSuffix(w.Kube.Config.Host, "/") || !join.HasTalosSecrets() {
		t.Errorf("join material %v: want the kubernetes form with Talos secrets and endpoint %s", join, w.Kube.Config.Host)
	}
	img := w.Images[DefaultTalosVersion]
	if len(img.RawSHA256) != 64 || img.RawSize != DefaultImageSize {
		t.Fatalf("published image %+v", img)
	}

	driveServerByHand(t, w)
}

// driveServerByHand orders a server with the SDK and takes it through
// rescue, em-imager and a normal boot into the Talos maintenance API.
func driveServerByHand(t *testing.T, w *World) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	img := w.Images[w.Opts.TalosVersion]
	client, err := w.SDKClient()
	if err != nil {
		t.Fatal(err)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := ssh.NewSignerFromKey(priv)
	sshPub, _ := ssh.NewPublicKey(pub)
	key, err := iam.NewAPI(client).CreateSSHKey(&iam.CreateSSHKeyRequest{Name: "world-test", PublicKey: string(ssh.MarshalAuthorizedKey(sshPub))})
	if err != nil {
		t.Fatal(err)
	}
	offerID, _ := w.Sim.OfferID("fr-par-2", "EM-A116X-SSD", "hourly")
	bm := baremetal.NewAPI(client)
	srv, err := bm.CreateServer(&baremetal.CreateServerRequest{Zone: scw.ZoneFrPar2, OfferID: offerID, Name: "by-hand", Description: "world test"})
	if err != nil {
		t.Fatal(err)
	}
	wait := func(what string, ok func(*baremetal.Server) bool) *baremetal.Server {
		t.Helper()
		for ctx.Err() == nil {
			s, err := bm.GetServer(&baremetal.GetServerRequest{Zone: scw.ZoneFrPar2, ServerID: srv.ID})
			if err == nil && ok(s) {
				return s
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("server never %s", what)
		return nil
	}
	srv = wait("delivered", func(s *baremetal.Server) bool { return s.Status == baremetal.ServerStatusReady })
	ipv4 := srv.IPs[0].Address.String()
	if _, err := bm.RebootServer(&baremetal.RebootServerRequest{Zone: scw.ZoneFrPar2, ServerID: srv.ID,
		BootType: baremetal.ServerBootTypeRescue, SSHKeyIDs: []string{key.ID}}); err != nil {
		t.Fatal(err)
	}
	wait("back in rescue", func(s *baremetal.Server) bool {
		return s.Status == baremetal.ServerStatusReady && s.BootType == baremetal.ServerBootTypeRescue
	})

	addr := net.JoinHostPort(ipv4, strconv.Itoa(w.Machines.SSHPort()))
	var conn *ssh.Client
	for ctx.Err() == nil {
		conn, err = ssh.Dial("tcp", addr, &ssh.ClientConfig{User: "rescue", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
			HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 5 * time.Second})
		if err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if conn == nil {
		t.Fatalf("rescue SSH at %s: %v", addr, err)
	}
	defer conn.Close()
	fc, err := sftp.NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := FindBinary(BinEMImager)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	f, err := fc.Create("em-imager")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	f.Chmod(0o755)
	f.Close()
	fc.Close()

	s3c, err := w.S3.Client()
	if err != nil {
		t.Fatal(err)
	}
	u, err := s3c.PresignedGetObject(ctx, w.Bucket, w.Prefix+"/"+w.Opts.SchematicID+"/"+w.Opts.TalosVersion+"/metal-amd64.raw.zst", time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := conn.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	sess.Stdout, sess.Stderr = &stdout, &stderr
	runErr := sess.Run("sudo ./em-imager write --image '" + u.String() + "' --sha256 " + img.RawSHA256 + " --disk auto")
	var rep report.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("em-imager report: %v (run: %v)\nstdout: %s\nstderr: %s", err, runErr, stdout.String(), stderr.String())
	}
	if runErr != nil || !rep.OK {
		t.Fatalf("em-imager write failed: %v\n%s\n%s", runErr, stdout.String(), stderr.String())
	}

	if _, err := bm.RebootServer(&baremetal.RebootServerRequest{Zone: scw.ZoneFrPar2, ServerID: srv.ID, BootType: baremetal.ServerBootTypeNormal}); err != nil {
		t.Fatal(err)
	}
	talos := net.JoinHostPort(ipv4, strconv.Itoa(w.Machines.TalosAPIPort()))
	for {
		c, err := net.DialTimeout("tcp", talos, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("Talos API at %s never came up: %v; machine events %+v", talos, err, w.Machines.Events())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Delete: the machine releases its disks.
	if _, err := bm.DeleteServer(&baremetal.DeleteServerRequest{Zone: scw.ZoneFrPar2, ServerID: srv.ID}); err != nil {
		t.Fatal(err)
	}
	for len(w.Machines.Alive()) > 0 {
		if ctx.Err() != nil {
			t.Fatalf("machine %v not released after delete", w.Machines.Alive())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A missing binary fails with the make target that builds it.
func TestFindBinaryNamesMakeTarget(t *testing.T) {
	t.Setenv("TEST_ASSET_KARPENTER_SCALEWAY_EM", "/nonexistent/karpenter-scaleway-em")
	_, err := FindBinary(BinController)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte(`make build`)) {
		t.Fatalf("FindBinary error %v: want one naming \"make build\"", err)
	}
}

// A binary older than a source it is built from fails with "make build";
// test sources and test/ do not count.
func TestCheckFreshRejectsStaleBinary(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(root, "bin", "karpenter-scaleway-em")
	for _, f := range []string{bin, filepath.Join(root, "go.mod"), filepath.Join(root, "controller", "a.go"),
		filepath.Join(root, "controller", "a_test.go"), filepath.Join(root, "test", "b.go")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old, built, later := time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour), time.Now()
	touch := func(f string, at time.Time) {
		if err := os.Chtimes(f, at, at); err != nil {
			t.Fatal(err)
		}
	}
	touch(bin, built)
	touch(filepath.Join(root, "go.mod"), old)
	touch(filepath.Join(root, "controller", "a.go"), old)
	touch(filepath.Join(root, "controller", "a_test.go"), later)
	touch(filepath.Join(root, "test", "b.go"), later)
	if err := checkFresh(bin, root, []string{root}); err != nil {
		t.Fatalf("fresh binary: %v", err)
	}
	touch(filepath.Join(root, "controller", "a.go"), later)
	err := checkFresh(bin, root, []string{root})
	if err == nil || !strings.Contains(err.Error(), "controller/a.go") || !strings.Contains(err.Error(), `make build`) {
		t.Fatalf("stale binary: error %v, want one naming controller/a.go and \"make build\"", err)
	}
}

func TestNewRejectsUnknownProfile(t *testing.T) {
	_, err := New(context.Background(), Options{Profile: "nope"})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("Options.Profile")) {
		t.Fatalf("New with a bad profile: %v, want an error naming Options.Profile", err)
	}
}
