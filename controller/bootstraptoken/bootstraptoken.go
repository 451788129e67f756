// Package bootstraptoken gives each NodeClaim its own short-lived Kubernetes
// bootstrap token (NodeClass spec.talos.bootstrapToken: PerNodeClaim), so a
// leaked machine config joins at most one node for a short while, and deletes
// it once the node has registered or its NodeClaim is gone.
//
// Tokens are bootstrap.kubernetes.io/token Secrets in kube-system with an
// expiration (the token cleaner of kube-controller-manager removes expired
// ones even if this controller is gone), in the group kubeadm-style clusters
// (kubeadm, Kamaji, Talos) already allow to bootstrap kubelets.
//
// The controller never lists kube-system Secrets: a token's ID is derived
// from its NodeClaim's name (TokenID), so its Secret is created, read and
// deleted by name (RBAC: create, get, delete). The sweep finds the tokens to
// delete from the NodeClaims themselves: those registered or being deleted,
// and those seen pending by this process that have since disappeared. A
// NodeClaim that vanished while no controller ran leaves its token to expire.
package bootstraptoken

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// LabelNodeClaim marks a token Secret with the NodeClaim it was made for.
const LabelNodeClaim = "karpenter-scaleway-em.io/nodeclaim"

// Group the token authenticates in, besides system:bootstrappers.
const Group = "system:bootstrappers:kubeadm:default-node-token"

// Manager creates and sweeps tokens.
type Manager struct {
	Kube      client.Client // uncached: only this controller's token Secrets are read, by name
	Namespace string        // kube-system
	TTL       time.Duration // lifetime of a token; covers ordering to registration
	Now       func() time.Time

	mu      sync.Mutex
	pending map[string]struct{} // claims that may have a token to delete later
	done    map[string]struct{} // claims whose token was deleted
}

func (m *Manager) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// TokenID is the bootstrap token ID ([a-z0-9]{6}) of a NodeClaim. It is not
// secret (the token's secret half is random); deriving it from the name lets
// the controller find the Secret without listing.
func TokenID(claim string) string {
	sum := sha256.Sum256([]byte("karpenter-scaleway-em bootstrap token\x00" + claim))
	id := make([]byte, 6)
	for i := range id {
		id[i] = alphabet[int(sum[i])%len(alphabet)]
	}
	return string(id)
}

// SecretName is the name of a NodeClaim's token Secret.
func SecretName(claim string) string { return "bootstrap-token-" + TokenID(claim) }

// CollisionError says the Secret named for a NodeClaim's token holds another
// token (one made by someone else, or for another NodeClaim whose name
// derives the same ID). The NodeClaim's install fails and Karpenter retries
// with a new NodeClaim, hence a new ID; the other token is left alone.
type CollisionError struct {
	Claim  string
	Secret string
}

func (e *CollisionError) Error() string {
	return fmt.Sprintf("bootstrap token of %s: Secret %s already holds a token that is not this NodeClaim's", e.Claim, e.Secret)
}

// Ensure returns the NodeClaim's token ("id.secret"), reusing one with at
// least a quarter of its lifetime left (a retried Create renders the same
// token), else making a new one.
func (m *Manager) Ensure(ctx context.Context, claim string) (string, error) {
	m.track(claim)
	name := SecretName(claim)
	for attempt := 0; ; attempt++ {
		secret, err := random(16)
		if err != nil {
			return "", err
		}
		s := m.tokenSecret(claim, secret)
		err = m.Kube.Create(ctx, s)
		if err == nil {
			return TokenID(claim) + "." + secret, nil
		}
		if !apierrors.IsAlreadyExists(err) || attempt > 0 {
			return "", fmt.Errorf("creating the bootstrap token of %s: %w", claim, err)
		}
		existing := &corev1.Secret{}
		if err := m.Kube.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: name}, existing); err != nil {
			return "", fmt.Errorf("reading the bootstrap token of %s: %w", claim, err)
		}
		if !ours(existing, claim) {
			return "", &CollisionError{Claim: claim, Secret: m.Namespace + "/" + name}
		}
		exp, err := time.Parse(time.RFC3339, string(existing.Data["expiration"]))
		if err == nil && exp.Sub(m.now()) > m.TTL/4 {
			return string(existing.Data["token-id"]) + "." + string(existing.Data["token-secret"]), nil
		}
		// Ours but (nearly) expired: replace it, unless it changed meanwhile.
		if err := m.deleteExact(ctx, existing); err != nil {
			return "", fmt.Errorf("replacing the expired bootstrap token of %s: %w", claim, err)
		}
	}
}

func (m *Manager) tokenSecret(claim, secret string) *corev1.Secret {
	id := TokenID(claim)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: "bootstrap-token-" + id,
			Labels: map[string]string{LabelNodeClaim: claim}},
		Type: corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"description":                    "karpenter-scaleway-em: node " + claim,
			"token-id":                       id,
			"token-secret":                   secret,
			"expiration":                     m.now().Add(m.TTL).UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
			"auth-extra-groups":              Group,
		},
	}
}

func ours(s *corev1.Secret, claim string) bool {
	return s.Type == corev1.SecretTypeBootstrapToken && s.Labels[LabelNodeClaim] == claim
}

// deleteExact deletes s only if it is still the object read (UID and
// resourceVersion preconditions).
func (m *Manager) deleteExact(ctx context.Context, s *corev1.Secret) error {
	err := m.Kube.Delete(ctx, s, client.Preconditions{UID: &s.UID, ResourceVersion: &s.ResourceVersion})
	return client.IgnoreNotFound(err)
}

// Delete removes the NodeClaim's token, if there is one and it is the
// NodeClaim's (a colliding token of someone else is left alone).
func (m *Manager) Delete(ctx context.Context, claim string) error {
	name := SecretName(claim)
	s := &corev1.Secret{}
	if err := m.Kube.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: name}, s); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !ours(s, claim) {
		return nil
	}
	if err := m.deleteExact(ctx, s); err != nil {
		return fmt.Errorf("deleting bootstrap token %s: %w", name, err)
	}
	return nil
}

func (m *Manager) track(claim string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending == nil {
		m.pending = map[string]struct{}{}
	}
	m.pending[claim] = struct{}{}
	delete(m.done, claim)
}

// Sweep deletes, once each, the tokens of the NodeClaims (all of the
// cluster's, by name) that registered or are being deleted, among those that
// use per-NodeClaim tokens (perNode: their NodeClass says so) or got a token
// from this process; and the tokens of NodeClaims this process saw pending
// that are gone. A token it could not delete is tried again next sweep.
func (m *Manager) Sweep(ctx context.Context, claims map[string]*karpv1.NodeClaim, perNode func(*karpv1.NodeClaim) bool) error {
	del := m.toDelete(claims, perNode)
	var errs []error
	for _, name := range del {
		if err := m.Delete(ctx, name); err != nil {
			errs = append(errs, err)
			continue
		}
		m.deleted(name, claims[name] != nil)
	}
	return errors.Join(errs...)
}

// toDelete picks the claims whose token the sweep deletes and remembers the
// pending ones.
func (m *Manager) toDelete(claims map[string]*karpv1.NodeClaim, perNode func(*karpv1.NodeClaim) bool) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending == nil {
		m.pending = map[string]struct{}{}
	}
	if m.done == nil {
		m.done = map[string]struct{}{}
	}
	var del []string
	for name, c := range claims {
		if _, ok := m.done[name]; ok {
			continue
		}
		if _, ok := m.pending[name]; !ok && !perNode(c) {
			continue
		}
		if c.DeletionTimestamp != nil || c.StatusConditions().Get(karpv1.ConditionTypeRegistered).IsTrue() {
			del = append(del, name)
		} else {
			m.pending[name] = struct{}{}
		}
	}
	for name := range m.pending {
		if _, ok := claims[name]; !ok {
			del = append(del, name)
		}
	}
	for name := range m.done {
		if _, ok := claims[name]; !ok {
			delete(m.done, name) // the claim is gone: forget it
		}
	}
	return del
}

func (m *Manager) deleted(claim string, exists bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.pending, claim)
	if exists {
		m.done[claim] = struct{}{}
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
