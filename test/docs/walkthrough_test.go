package docs

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	iam "github.com/scaleway/scaleway-sdk-go/api/iam/v1alpha1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/publish"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// The walkthrough's placeholders and what TestWalkthrough puts in their
// place. Everything else in its blocks runs as written.
const (
	// walkthroughSection is the heading of imager/README.md whose shell
	// blocks are the walkthrough, run in order as one script.
	walkthroughSection = "Running it by hand in a rescue shell"
	// placeholderServer is replaced by the ID of a server the test ordered
	// (in fr-par-2, the zone the walkthrough names, which the simulator has).
	placeholderServer = "11111111-2222-4333-8444-555555555555"
	// placeholderKey is replaced by the IAM ID of the test's SSH key.
	placeholderKey = "66666666-7777-4888-9999-000000000000"
	// walkthroughSchematic and walkthroughTalos are what the walkthrough
	// presigns: the world publishes its image under them, so they stay.
	walkthroughSchematic = "d0b273850841b13d0193fbfb0597bac2ca30387b8a0797a43238ecafc72ed329"
	walkthroughTalos     = "v1.12.4"
)

// Besides the placeholders, the commands run with (walkthroughEnv):
//   - scw: this test binary, mapping each command to its SDK call against
//     the simulated API (scw_test.go);
//   - ssh: OpenSSH's client, through a wrapper that adds the simulated
//     rescue's port (not 22: each server is a 127.x.y.z address with one
//     port for all) and the test's private key; the rescue host is a real
//     SSH server (test/sim/rescue) whose sudo plays the boot's login;
//   - em-imager (bin/em-imager), talosgen-render (built from this module),
//     kubectl (the system's) on the world's kube-apiserver, curl, jq;
//   - the S3 variables publish uses, for the world's bucket (versitygw);
//   - a Secret karpenter/cluster-join, the join Secret docs/install.md
//     creates, here a copy of the world's.

// TestWalkthrough runs imager/README.md's rescue walkthrough against the
// simulated world for each rescue login Scaleway's rescue systems have:
// the key-only "rescue" user whose sudo asks for nothing, and a per-server
// user whose sudo wants the password the API shows for the boot. Each time
// the commands, as written, must leave a Ready Node whose providerID names
// the server, with Talos read its config from the disk.
func TestWalkthrough(t *testing.T) {
	t.Parallel() // beside TestDocs: both mostly wait
	script := walkthroughScript(t)
	render := filepath.Join(t.TempDir(), "talosgen-render")
	build := exec.Command("go", "build", "-o", render, "./talosgen/cmd/talosgen-render")
	build.Dir = root(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build talosgen-render: %v\n%s", err, out)
	}
	for _, login := range []world.RescueLogin{world.RescueLoginKey, world.RescueLoginPassword} {
		t.Run(string(login), func(t *testing.T) {
			// Each world mostly waits (boots, kubelet): the two overlap.
			t.Parallel()
			runWalkthrough(t, script, login, render)
		})
	}
}

// walkthroughScript is the walkthrough's shell blocks, in order, as one
// script that stops at the first failing command.
func walkthroughScript(t *testing.T) string {
	t.Helper()
	var parts []string
	for _, b := range blocks(t, "imager/README.md") {
		if b.Heading == walkthroughSection && isShell(b) {
			parts = append(parts, "# "+b.where()+"\n"+b.Text)
		}
	}
	if len(parts) < 3 {
		t.Fatalf("imager/README.md: %d shell blocks under %q, want the walkthrough's 3 or more", len(parts), walkthroughSection)
	}
	script := strings.Join(parts, "\n")
	for _, p := range []string{placeholderServer, placeholderKey, walkthroughSchematic, walkthroughTalos} {
		if !strings.Contains(script, p) {
			t.Fatalf("the walkthrough no longer names %s: update the placeholders in walkthrough_test.go", p)
		}
	}
	return "set -euo pipefail\n" + script
}

func runWalkthrough(t *testing.T, script string, login world.RescueLogin, render string) {
	w := world.Start(t, world.Options{TalosVersion: walkthroughTalos, SchematicID: walkthroughSchematic, RescueLogin: login})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	imager, err := world.FindBinary(world.BinEMImager)
	if err != nil {
		t.Fatal(err)
	}
	uploadImager(ctx, t, w, imager)
	copyJoinSecret(ctx, t, w)

	work := t.TempDir()
	keyFile, authorized := newSSHKey(t, work)
	client, err := w.SDKClient()
	if err != nil {
		t.Fatal(err)
	}
	key, err := iam.NewAPI(client).CreateSSHKey(&iam.CreateSSHKeyRequest{Name: "walkthrough", PublicKey: authorized, ProjectID: w.Sim.Options().ProjectID})
	if err != nil {
		t.Fatal(err)
	}
	server := orderServer(t, w, client)

	bin := filepath.Join(work, "bin")
	env := walkthroughEnv(t, w, bin, keyFile, imager, render)
	script = strings.NewReplacer(placeholderServer, server, placeholderKey, key.ID).Replace(script)
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir, cmd.Env = work, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("the walkthrough failed: %v\n%s", err, out.String())
	}
	t.Logf("walkthrough output:\n%s", out.String())

	node, err := w.Clientset.CoreV1().Nodes().Get(ctx, "em-by-hand-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the walkthrough's node: %v", err)
	}
	if want := "scaleway-em://fr-par-2/" + server; node.Spec.ProviderID != want {
		t.Errorf("node providerID %q, want %q", node.Spec.ProviderID, want)
	}
	for _, taint := range node.Spec.Taints {
		if taint.Key == "karpenter.sh/unregistered" {
			t.Errorf("the node keeps %v", taint)
		}
	}
	for _, f := range []string{"join-secret.yaml", "config.yaml"} {
		if _, err := os.Stat(filepath.Join(work, f)); err == nil {
			t.Errorf("%s is left on the workstation", f)
		}
	}
}

// uploadImager puts em-imager into the bucket as `em-imager publish` does
// (the world publishes its images with the library, without the tool).
func uploadImager(ctx context.Context, t *testing.T, w *world.World, imager string) {
	t.Helper()
	data, err := os.ReadFile(imager)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	key := publish.ToolKey(w.Prefix, "amd64")
	sumFile := hex.EncodeToString(sum[:]) + "  " + filepath.Base(key) + "\n"
	mc, err := w.S3.Client()
	if err != nil {
		t.Fatal(err)
	}
	for k, b := range map[string][]byte{key: data, key + ".sha256": []byte(sumFile)} {
		if _, err := mc.PutObject(ctx, w.Bucket, k, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// copyJoinSecret makes karpenter/cluster-join, the Secret docs/install.md
// creates, from the world's join Secret.
func copyJoinSecret(ctx context.Context, t *testing.T, w *world.World) {
	t.Helper()
	s, err := w.Clientset.CoreV1().Secrets(w.JoinSecret.Namespace).Get(ctx, w.JoinSecret.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cp := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "karpenter", Name: "cluster-join"}, Data: s.Data}
	if _, err := w.Clientset.CoreV1().Secrets("karpenter").Create(ctx, cp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// newSSHKey writes an ed25519 private key for OpenSSH and returns its path
// and authorized_keys line.
func newSSHKey(t *testing.T, dir string) (string, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := ssh.MarshalPrivateKey(priv, "walkthrough")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(path, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return path, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
}

// orderServer orders a server without an OS, as the walkthrough assumes,
// and waits until it is delivered.
func orderServer(t *testing.T, w *world.World, client *scw.Client) string {
	t.Helper()
	offerID, ok := w.Sim.OfferID("fr-par-2", "EM-A610R-NVME", "hourly")
	if !ok {
		t.Fatal("offer EM-A610R-NVME not in the simulator")
	}
	api := baremetal.NewAPI(client)
	srv, err := api.CreateServer(&baremetal.CreateServerRequest{Zone: scw.ZoneFrPar2, OfferID: offerID, Name: "by-hand"})
	if err != nil {
		t.Fatal(err)
	}
	timeout := 2 * time.Minute
	if srv, err = api.WaitForServer(&baremetal.WaitForServerRequest{Zone: scw.ZoneFrPar2, ServerID: srv.ID, Timeout: &timeout}); err != nil || srv.Status != baremetal.ServerStatusReady {
		t.Fatalf("the order: %v, status %v", err, srv)
	}
	return srv.ID
}

// walkthroughEnv is the workstation of the walkthrough: PATH with scw, ssh,
// em-imager and talosgen-render in bin, the S3 variables of publish, the
// SDK's and kubectl's.
func walkthroughEnv(t *testing.T, w *world.World, bin, keyFile, imager, render string) []string {
	t.Helper()
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	standInOnPath(t, bin, "scw")
	if err := os.Symlink(imager, filepath.Join(bin, "em-imager")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(render, filepath.Join(bin, "talosgen-render")); err != nil {
		t.Fatal(err)
	}
	wrapOnPath(t, bin, "ssh", "#!/bin/sh\nexec %s -p %d -i %s -o IdentitiesOnly=yes -o BatchMode=yes -o LogLevel=ERROR \"$@\"\n",
		w.Machines.SSHPort(), keyFile)
	sim := w.Sim.Options()
	return []string{
		"PATH=" + bin + ":" + os.Getenv("PATH"),
		"HOME=" + filepath.Dir(bin),
		"KUBECONFIG=" + w.Kube.KubeconfigPath,
		"SCW_API_URL=" + w.SimURL, "SCW_ACCESS_KEY=SCWSIMULATED00000000", "SCW_SECRET_KEY=" + w.Sim.SecretKey(),
		"SCW_DEFAULT_PROJECT_ID=" + sim.ProjectID, "SCW_DEFAULT_ORGANIZATION_ID=" + sim.OrganizationID,
		"S3_ENDPOINT=" + w.S3.Endpoint, "S3_BUCKET=" + w.Bucket, "S3_REGION=" + w.S3.Region,
		"AWS_ACCESS_KEY_ID=" + w.S3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + w.S3.SecretKey,
		"GOTOOLCHAIN=local",
	}
}
