// Package bootstraptoken gives each NodeClaim its own short-lived Kubernetes
// bootstrap token (NodeClass spec.talos.bootstrapToken: PerNodeClaim), so a
// leaked machine config joins at most one node, and only until the token's
// expiration.
//
// Tokens are bootstrap.kubernetes.io/token Secrets in kube-system, in the
// group kubeadm-style clusters (kubeadm, Kamaji, Talos) already allow to
// bootstrap kubelets, usable for authentication only.
//
// The controller only ever creates them: it never reads, lists, watches or
// deletes a kube-system Secret, so RBAC grants it create there and nothing
// else (a get could not be limited to the bootstrap-token- names and would
// reach every Secret of kube-system by name). What ends a token is its
// expiration, sized to the install window (install.Timeouts.TokenTTL): the
// API server refuses an expired token, and kube-controller-manager's token
// cleaner deletes its Secret where the cluster runs that controller
// (docs/security.md says which do, and how to clean up where not).
package bootstraptoken

import (
	"context"
	"crypto/rand"
	"fmt"
	"math/big"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LabelNodeClaim marks a token Secret with the NodeClaim it was made for
// (for people: kubectl -l finds a node's tokens).
const LabelNodeClaim = "karpenter-scaleway-em.io/nodeclaim"

// Group the token authenticates in, besides system:bootstrappers.
const Group = "system:bootstrappers:kubeadm:default-node-token"

// Creator is all the Manager may do with the API server: create. A Manager
// built on it cannot read or delete a Secret, whatever its client could.
type Creator interface {
	Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error
}

// Manager creates tokens.
type Manager struct {
	Kube      Creator
	Namespace string        // kube-system
	TTL       time.Duration // lifetime of a token: from the render of a config to the end of the install
	Now       func() time.Time

	ids func() (string, error) // token IDs; nil: random (tests force a clash)
}

func (m *Manager) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

func (m *Manager) newID() (string, error) {
	if m.ids != nil {
		return m.ids()
	}
	return random(6)
}

const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// idAttempts bounds the fresh IDs tried when a Secret of that name exists:
// with 36^6 IDs, a second clash in a row means something else is wrong.
const idAttempts = 3

// Ensure creates a new token for the NodeClaim and returns it ("id.secret").
// Each call makes a new one with a random ID: a config rendered again (an
// install retried) carries a new token, and the earlier one, never read
// again, ends at its expiration. An existing Secret of the same name is
// never touched: another ID is drawn.
func (m *Manager) Ensure(ctx context.Context, claim string) (string, error) {
	for attempt := 1; ; attempt++ {
		id, err := m.newID()
		if err != nil {
			return "", err
		}
		secret, err := random(16)
		if err != nil {
			return "", err
		}
		err = m.Kube.Create(ctx, m.tokenSecret(claim, id, secret))
		if err == nil {
			return id + "." + secret, nil
		}
		if !apierrors.IsAlreadyExists(err) || attempt == idAttempts {
			return "", fmt.Errorf("creating the bootstrap token of %s: %w", claim, err)
		}
	}
}

func (m *Manager) tokenSecret(claim, id, secret string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: "bootstrap-token-" + id,
			Labels: map[string]string{LabelNodeClaim: claim}},
		Type: corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"description":  "karpenter-scaleway-em: node " + claim,
			"token-id":     id,
			"token-secret": secret,
			// The API server refuses the token after this instant; the
			// token cleaner deletes the Secret where it runs.
			"expiration": m.now().Add(m.TTL).UTC().Format(time.RFC3339),
			// A kubelet join only authenticates with the token (to send its
			// CSR); signing the cluster-info ConfigMap is not needed.
			"usage-bootstrap-authentication": "true",
			"auth-extra-groups":              Group,
		},
	}
}

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
