package world

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.yaml.in/yaml/v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/talosgen"
)

// Join is the cluster's join material as the simulated kubelets check it:
// a node joins only with the world's CA, endpoint and bootstrap token.
type Join struct {
	CA       []byte // PEM of the kube-apiserver's CA
	Endpoint string // kube-apiserver URL
	Token    string // bootstrap token id.secret
}

// createJoinSecret writes the join Secret the NodeClass names, in the form a
// hosted (non-Talos) control plane uses — the Kubernetes CA, a bootstrap
// token and the endpoint — plus a Talos secrets bundle generated with
// machinery for the Talos-side secrets; and the bootstrap-token Secret
// kube-system must hold for that token to be valid.
func (w *World) createJoinSecret(ctx context.Context) (Join, error) {
	ca := w.Kube.Config.CAData
	if len(ca) == 0 {
		return Join{}, fmt.Errorf("kube-apiserver config has no CA data")
	}
	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), coreconfig.TalosVersion1_12)
	if err != nil {
		return Join{}, fmt.Errorf("generate Talos secrets bundle: %w", err)
	}
	bundleYAML, err := yaml.Marshal(bundle)
	if err != nil {
		return Join{}, err
	}
	id, secret := randomToken(6), randomToken(16)
	j := Join{CA: ca, Endpoint: strings.TrimSuffix(w.Kube.Config.Host, "/"), Token: id + "." + secret}

	_, err = w.Clientset.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: "kube-system"},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id": id, "token-secret": secret,
			"usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
			"auth-extra-groups": "system:bootstrappers:talos",
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return Join{}, fmt.Errorf("bootstrap token Secret: %w", err)
	}
	_, err = w.Clientset.CoreV1().Secrets(w.JoinSecret.Namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: w.JoinSecret.Name, Namespace: w.JoinSecret.Namespace},
		Data: map[string][]byte{
			talosgen.KeyKubernetesCA:  ca,
			talosgen.KeyToken:         []byte(j.Token),
			talosgen.KeyEndpoint:      []byte(j.Endpoint),
			talosgen.KeyClusterName:   []byte(w.ClusterName),
			talosgen.KeySecretsBundle: bundleYAML,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return Join{}, fmt.Errorf("join Secret %s: %w", w.JoinSecret, err)
	}
	return j, nil
}

// randomToken returns n characters of [a-z0-9], the bootstrap token alphabet.
func randomToken(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
