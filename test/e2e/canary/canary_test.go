package canary

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	iam "github.com/scaleway/scaleway-sdk-go/api/iam/v1alpha1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.yaml.in/yaml/v4"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescuekey"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/talosgen"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/e2e/harness"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// scwCanary is the Scaleway secret key the simulated API accepts in this
// test: recognisable, and a UUID as the SDK requires.
const scwCanary = "ca7a7ca7-5ec7-4e7c-8a7a-ca7a7ca75ec7"

// observer keeps, while the test runs, what is gone by its end: every
// NodeClaim and NodeClass version and the per-NodeClaim bootstrap tokens.
type observer struct {
	mu       sync.Mutex
	objects  map[string][]byte // kind/name@resourceVersion -> JSON
	tokens   map[string]string // Secret name -> token secret
	stop     chan struct{}
	stopped  chan struct{}
	kubeErrs int
}

func observe(e *harness.Env) *observer {
	o := &observer{objects: map[string][]byte{}, tokens: map[string]string{}, stop: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(o.stopped)
		for {
			o.look(e)
			select {
			case <-o.stop:
				o.look(e)
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return o
}

func (o *observer) look(e *harness.Env) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var claims karpv1.NodeClaimList
	var classes v1alpha1.ScalewayElasticMetalNodeClassList
	secs, err := e.W.Clientset.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(corev1.SecretTypeBootstrapToken)})
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil || e.W.Kube.Client.List(ctx, &claims) != nil || e.W.Kube.Client.List(ctx, &classes) != nil {
		o.kubeErrs++
		return
	}
	for _, s := range secs.Items {
		o.tokens[s.Name] = string(s.Data["token-secret"])
	}
	for i := range claims.Items {
		c := &claims.Items[i]
		o.objects["nodeclaim/"+c.Name+"@"+c.ResourceVersion], _ = json.Marshal(c)
	}
	for i := range classes.Items {
		c := &classes.Items[i]
		o.objects["nodeclass/"+c.Name+"@"+c.ResourceVersion], _ = json.Marshal(c)
	}
}

func (o *observer) done() {
	close(o.stop)
	<-o.stopped
}

// TestSecretCanary runs a node's whole life (ordered, imaged, joined,
// consolidated away) and installs that fail (the image no longer matches
// its digest), then looks for every secret the controller handled in all it
// showed: none may appear. The same scan over the same artefacts with one
// secret written into the log must find it. Once no install is left, the
// rescue SSH key is gone from IAM. The rescue systems are the per-server
// kind whose sudo wants the API's rescue password, so that it is among the
// secrets handled.
func TestSecretCanary(t *testing.T) {
	// The per-server rescue login: the controller hands sudo the API's
	// rescue password of each boot, which must show nowhere either.
	e := harness.Start(t, harness.Setup{World: world.Options{RescueLogin: world.RescueLoginPassword,
		Sim: func(o *scwsim.Options) { o.SecretKey = scwCanary }}})
	obs := observe(e)
	var metrics []string
	scrape := func() {
		ctx, cancel := context.WithTimeout(e.Ctx, 10*time.Second)
		defer cancel()
		m, err := e.C.Metrics(ctx)
		if err != nil {
			t.Fatalf("metrics: %v", err)
		}
		metrics = append(metrics, m)
	}

	// A whole life.
	life := e.Run("canary", 1, "3", "1Gi", false)
	e.WaitBound("canary", 1, harness.WaitLong)
	scrape()
	life.ScaleTo(0)
	e.WaitServersGone(harness.WaitLong)

	// Installs that fail in imaging: em-imager reports the digest mismatch.
	if err := e.W.CorruptImages(e.Ctx); err != nil {
		t.Fatal(err)
	}
	failing := e.Run("failing", 1, "3", "1Gi", false)
	e.Eventually("an install failed", harness.WaitLong, func() (bool, string) {
		return len(installFailed(t, e)) > 0, e.Summary()
	})
	scrape()
	failing.ScaleTo(0)
	e.WaitServersGone(harness.WaitLong)
	scrape()
	obs.done()
	// No install left: the garbage collection's sweep removes the rescue key from IAM.
	iamAPI := iam.NewAPI(sdk(t, e))
	e.Eventually("the rescue SSH key removed from IAM", harness.WaitLong, func() (bool, string) {
		keys, err := iamAPI.ListSSHKeys(&iam.ListSSHKeysRequest{}, scw.WithAllPages(), scw.WithContext(e.Ctx))
		if err != nil {
			return false, err.Error()
		}
		return len(keys.SSHKeys) == 0, fmt.Sprintf("%d IAM SSH keys", len(keys.SSHKeys))
	})

	secrets := knownSecrets(t, e, obs)
	artefacts := capture(t, e, obs, metrics)
	hits, err := Scan(secrets, artefacts)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hits {
		t.Errorf("secret leaked: %s", h)
	}
	t.Logf("%d secrets looked for in %d artefacts (%d observations lost to API errors)", len(secrets), len(artefacts), obs.kubeErrs)

	// The scan can fail: the same artefacts, with one secret logged.
	for _, s := range secrets {
		planted := append([]Artefact(nil), artefacts...)
		planted[0] = Artefact{Name: planted[0].Name, Data: append(append([]byte(nil), planted[0].Data...),
			[]byte(`{"level":"info","msg":"oops","value":"`+s.Value+`"}`)...)}
		hits, err := Scan(secrets, planted)
		if err != nil {
			t.Fatal(err)
		}
		if !found(hits, s.Name, planted[0].Name) {
			t.Errorf("%s written into %s was not found: %v", s.Name, planted[0].Name, hits)
		}
	}
}

// sdk is a Scaleway client for the simulated API, as the controller's.
func sdk(t *testing.T, e *harness.Env) *scw.Client {
	t.Helper()
	c, err := scw.NewClient(scw.WithAuth("SCWSIMULATED00000000", scwCanary), scw.WithAPIURL(e.W.SimURL),
		scw.WithDefaultProjectID(e.W.Sim.Options().ProjectID))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func found(hits []Hit, secret, artefact string) bool {
	for _, h := range hits {
		if h.Secret == secret && h.Artefact == artefact {
			return true
		}
	}
	return false
}

func installFailed(t *testing.T, e *harness.Env) []corev1.Event {
	t.Helper()
	l, err := e.W.Clientset.CoreV1().Events("").List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	var out []corev1.Event
	for _, ev := range l.Items {
		if ev.Reason == "InstallFailed" {
			out = append(out, ev)
		}
	}
	return out
}

// knownSecrets is every secret the controller handled in this run.
func knownSecrets(t *testing.T, e *harness.Env, obs *observer) []Secret {
	t.Helper()
	out := []Secret{
		{"Scaleway secret key", scwCanary},
		{"S3 access key ID", e.W.S3.AccessKey},
		{"S3 secret key", e.W.S3.SecretKey},
	}
	// The join Secret: the shared bootstrap token and the Talos bundle.
	join, err := e.W.Clientset.CoreV1().Secrets(e.W.JoinSecret.Namespace).Get(e.Ctx, e.W.JoinSecret.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := string(join.Data[talosgen.KeyToken])
	_, tokenSecret, _ := strings.Cut(token, ".")
	out = append(out, Secret{"join bootstrap token", token}, Secret{"join bootstrap token secret", tokenSecret})
	var b secrets.Bundle
	if err := yaml.Unmarshal(join.Data[talosgen.KeySecretsBundle], &b); err != nil {
		t.Fatal(err)
	}
	out = append(out,
		Secret{"Talos machine token", b.TrustdInfo.Token},
		Secret{"Talos cluster secret", b.Cluster.Secret},
		Secret{"Talos bootstrap token", b.Secrets.BootstrapToken},
		Secret{"Talos secretbox key", b.Secrets.SecretboxEncryptionSecret},
	)
	out = append(out, pemSecrets("Kubernetes CA key", b.Certs.K8s.Key)...)
	out = append(out, pemSecrets("Talos OS CA key", b.Certs.OS.Key)...)
	out = append(out, pemSecrets("etcd CA key", b.Certs.Etcd.Key)...)
	out = append(out, pemSecrets("service account key", b.Certs.K8sServiceAccount.Key)...)
	// The per-NodeClaim bootstrap tokens the controller created.
	obs.mu.Lock()
	n := 0
	for name, v := range obs.tokens {
		if name != "bootstrap-token-"+strings.Split(token, ".")[0] {
			out = append(out, Secret{"per-NodeClaim bootstrap token " + name, v})
			n++
		}
	}
	obs.mu.Unlock()
	if n == 0 {
		t.Error("no per-NodeClaim bootstrap token was seen: the canary misses them")
	}
	// The rescue SSH private key.
	key, err := e.W.Clientset.CoreV1().Secrets(e.W.SystemNamespace).Get(e.Ctx, "karpenter-scaleway-em-rescue-ssh", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := ssh.ParseRawPrivateKey(key.Data[rescuekey.SecretKey])
	if err != nil {
		t.Fatal(err)
	}
	priv, ok := raw.(*ed25519.PrivateKey)
	if !ok {
		t.Fatalf("rescue key is %T", raw)
	}
	seed := priv.Seed()
	out = append(out, Secret{"rescue SSH key seed (hex)", hex.EncodeToString(seed)}, Secret{"rescue SSH key seed (base64)", base64.StdEncoding.EncodeToString(seed)})
	out = append(out, pemSecrets("rescue SSH private key", key.Data[rescuekey.SecretKey])...)
	// The rescue passwords the API showed for each rescue boot.
	passwords := e.W.Sim.RescuePasswords()
	if len(passwords) == 0 {
		t.Error("the simulated API showed no rescue password: the canary misses them")
	}
	for i, pw := range passwords {
		out = append(out, Secret{fmt.Sprintf("rescue password %d", i), pw})
	}
	// The presigned URLs' signatures, from the commands the rescue hosts ran.
	log, err := os.ReadFile(filepath.Join(e.W.Dir, "machines", "machines.log"))
	if err != nil {
		t.Fatal(err)
	}
	sigs := map[string]bool{}
	for _, m := range regexp.MustCompile(`X-Amz-Signature=([0-9a-f]{64})`).FindAllStringSubmatch(string(log), -1) {
		sigs[m[1]] = true
	}
	if len(sigs) == 0 {
		t.Error("no presigned URL signature on the rescue hosts' command lines: the canary misses them")
	}
	for s := range sigs {
		out = append(out, Secret{"presigned URL signature", s})
	}
	return out
}

// pemSecrets is a PEM key whole, and each line of its body but the first
// (OpenSSH keys share their first line).
func pemSecrets(name string, data []byte) []Secret {
	out := []Secret{{name + " (PEM)", string(data)}}
	block, _ := pem.Decode(data)
	if block == nil {
		return out
	}
	body := base64.StdEncoding.EncodeToString(block.Bytes)
	for i := 64; i < len(body); i += 64 {
		line := body[i:min(i+64, len(body))]
		if len(line) >= MinLen {
			out = append(out, Secret{fmt.Sprintf("%s (PEM line %d)", name, i/64+1), line})
		}
	}
	if len(body) <= 64 {
		out = append(out, Secret{name + " (PEM body)", body})
	}
	return out
}

// em-imager's report (indented JSON), successful or not.
var reportOK, reportFailed = regexp.MustCompile(`"ok":\s*true`), regexp.MustCompile(`"ok":\s*false`)

// capture is everything the controller showed: its log, the Events, the
// NodeClaim and NodeClass versions seen, /metrics, em-imager's output.
func capture(t *testing.T, e *harness.Env, obs *observer, metrics []string) []Artefact {
	t.Helper()
	log, err := os.ReadFile(e.C.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	out := []Artefact{{"controller log", log}}
	evs, err := e.W.Clientset.CoreV1().Events("").List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	evJSON, _ := json.Marshal(evs)
	out = append(out, Artefact{"events", evJSON})
	if len(installFailed(t, e)) == 0 {
		t.Error("no InstallFailed event to scan")
	}
	obs.mu.Lock()
	var claims, classes []byte
	for k, v := range obs.objects {
		if strings.HasPrefix(k, "nodeclaim/") {
			claims = append(claims, v...)
		} else {
			classes = append(classes, v...)
		}
	}
	obs.mu.Unlock()
	if len(claims) == 0 || len(classes) == 0 {
		t.Error("no NodeClaim or NodeClass observed")
	}
	out = append(out, Artefact{"nodeclaims", claims}, Artefact{"nodeclasses", classes}, Artefact{"metrics", []byte(strings.Join(metrics, "\n"))})
	files, err := filepath.Glob(filepath.Join(e.W.Dir, "machines", "transcripts", "*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var ok, failed bool
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ok = ok || reportOK.Match(data)
		failed = failed || reportFailed.Match(data)
		out = append(out, Artefact{"em-imager output " + filepath.Base(filepath.Dir(f)) + "/" + filepath.Base(f), data})
	}
	if !ok || !failed {
		t.Errorf("em-imager output of %d commands has no successful (%v) or no failed (%v) report", len(files), ok, failed)
	}
	return out
}
