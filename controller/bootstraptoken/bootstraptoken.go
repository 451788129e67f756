// Package bootstraptoken gives each NodeClaim its own short-lived Kubernetes
// bootstrap token (NodeClass spec.talos.bootstrapToken: PerNodeClaim), so a
// leaked machine config joins at most one node for a short while, and deletes
// it once the node has registered.
//
// Tokens are bootstrap.kubernetes.io/token Secrets in kube-system with an
// expiration (the token cleaner of kube-controller-manager removes expired
// ones even if this controller is gone), in the group kubeadm-style clusters
// (kubeadm, Kamaji, Talos) already allow to bootstrap kubelets.
package bootstraptoken

import (
	"context"
	"crypto/rand"
	"fmt"
	"math/big"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// LabelNodeClaim marks a token Secret with the NodeClaim it was made for.
const LabelNodeClaim = "karpenter-scaleway-em.io/nodeclaim"

// Group the token authenticates in, besides system:bootstrappers.
const Group = "system:bootstrappers:kubeadm:default-node-token"

// Manager creates and sweeps tokens.
type Manager struct {
	Kube      client.Client // uncached: only this controller's token Secrets are read
	Namespace string        // kube-system
	TTL       time.Duration // lifetime of a token; covers ordering to registration
	Now       func() time.Time
}

func (m *Manager) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// Ensure returns the NodeClaim's token ("id.secret"), reusing one with at
// least a quarter of its lifetime left (a retried Create renders the same
// token), else creating a new one.
func (m *Manager) Ensure(ctx context.Context, claim string) (string, error) {
	list := &corev1.SecretList{}
	if err := m.Kube.List(ctx, list, client.InNamespace(m.Namespace), client.MatchingLabels{LabelNodeClaim: claim}); err != nil {
		return "", fmt.Errorf("listing bootstrap tokens of %s: %w", claim, err)
	}
	for _, s := range list.Items {
		exp, err := time.Parse(time.RFC3339, string(s.Data["expiration"]))
		if err == nil && exp.Sub(m.now()) > m.TTL/4 {
			return string(s.Data["token-id"]) + "." + string(s.Data["token-secret"]), nil
		}
	}
	id, err := random(6)
	if err != nil {
		return "", err
	}
	secret, err := random(16)
	if err != nil {
		return "", err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: "bootstrap-token-" + id,
			Labels: map[string]string{LabelNodeClaim: claim}},
		Type: corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"description":                    "karpenter-scaleway-em: node " + claim,
			"token-id":                       id,
			"token-secret":                   secret,
			"expiration":                     m.now().Add(m.TTL).UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
			"usage-bootstrap-signing":        "true",
			"auth-extra-groups":              Group,
		},
	}
	if err := m.Kube.Create(ctx, s); err != nil {
		return "", fmt.Errorf("creating the bootstrap token of %s: %w", claim, err)
	}
	return id + "." + secret, nil
}

// Sweep deletes the tokens of NodeClaims that registered or no longer exist.
func (m *Manager) Sweep(ctx context.Context, claims map[string]*karpv1.NodeClaim) error {
	list := &corev1.SecretList{}
	if err := m.Kube.List(ctx, list, client.InNamespace(m.Namespace), client.HasLabels{LabelNodeClaim}); err != nil {
		return fmt.Errorf("listing bootstrap tokens: %w", err)
	}
	for i := range list.Items {
		s := &list.Items[i]
		claim, ok := claims[s.Labels[LabelNodeClaim]]
		if ok && !claim.StatusConditions().Get(karpv1.ConditionTypeRegistered).IsTrue() {
			continue
		}
		if err := client.IgnoreNotFound(m.Kube.Delete(ctx, s)); err != nil {
			return fmt.Errorf("deleting bootstrap token %s: %w", s.Name, err)
		}
	}
	return nil
}

const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// random is n characters of [a-z0-9], the bootstrap token alphabet.
func random(n int) (string, error) {
	b := make([]byte, n)
	for i := range b {
		k, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			return "", err
		}
		b[i] = alphabet[k.Int64()]
	}
	return string(b), nil
}
