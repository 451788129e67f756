// Package rescuekey owns the SSH key the controller uses to log into rescue
// systems: an ed25519 key kept in a Secret (created on first use, shared by
// all replicas) and registered with Scaleway IAM, whose ID is passed to every
// rescue reboot. The private key never leaves the Secret and the process.
//
// An IAM SSH key is project-wide: Scaleway may also install it on the
// project's Instances and offers it to every rescue boot. So the key can be
// registered only while an install needs it: Acquire before each reboot into
// rescue (it registers the key if needed and returns the IDs for
// ssh_key_ids), Release once that rescue system let the key in (a rescue
// boot keeps the keys it booted with) or the install ended, and
// UnregisterUnused (after a Release and periodically) removes the key from
// IAM when no holder is left and no server is still waiting for a rescue
// boot. KeyIDs registers the key for good (the behaviour before on-demand
// registration).
package rescuekey

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"sync"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SecretKey is the data key of the private key (OpenSSH PEM).
const SecretKey = "ssh-privatekey"

// IAM registers, finds and removes public keys in the project's IAM
// (*scaleway.Client).
type IAM interface {
	// EnsureSSHKey returns the ID of the key holding publicKey, registering it under name if none does.
	EnsureSSHKey(ctx context.Context, name, publicKey string) (string, error)
	// FindSSHKey returns the ID and name of the key holding publicKey, "" when none does.
	FindSSHKey(ctx context.Context, name, publicKey string) (id, keyName string, err error)
	// DeleteSSHKey removes a key; one already gone is not an error.
	DeleteSSHKey(ctx context.Context, id string) error
}

// Store loads or creates the key and registers it in IAM.
type Store struct {
	Kube      client.Client
	Namespace string
	Name      string // the Secret's name
	KeyName   string // the IAM key's name, e.g. karpenter-scaleway-em-<cluster>
	IAM       IAM

	mu      sync.Mutex
	signer  ssh.Signer
	id      string              // KeyIDs' cached registration
	holders map[string]struct{} // Acquire'd and not Released
}

// Signer returns the private key, creating the Secret on first use.
func (s *Store) Signer(ctx context.Context) (ssh.Signer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.signerLocked(ctx)
}

func (s *Store) signerLocked(ctx context.Context) (ssh.Signer, error) {
	if s.signer != nil {
		return s.signer, nil
	}
	sec := &corev1.Secret{}
	err := s.Kube.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, sec)
	if apierrors.IsNotFound(err) {
		sec, err = s.create(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("rescue SSH key secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	signer, err := ssh.ParsePrivateKey(sec.Data[SecretKey])
	if err != nil {
		return nil, fmt.Errorf("rescue SSH key secret %s/%s: key %q is not an SSH private key", s.Namespace, s.Name, SecretKey)
	}
	s.signer = signer
	return signer, nil
}

func (s *Store) create(ctx context.Context) (*corev1.Secret, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, "karpenter-scaleway-em rescue")
	if err != nil {
		return nil, err
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "karpenter-scaleway-em"}},
		Type: corev1.SecretTypeSSHAuth,
		Data: map[string][]byte{SecretKey: pem.EncodeToMemory(block)},
	}
	if err := s.Kube.Create(ctx, sec); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
		// Another replica won the race: use its key.
		got := &corev1.Secret{}
		if err := s.Kube.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, got); err != nil {
			return nil, err
		}
		return got, nil
	}
	return sec, nil
}

// KeyIDs registers the public key with IAM (once per process, for good) and
// returns its ID.
func (s *Store) KeyIDs(ctx context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id != "" {
		return []string{s.id}, nil
	}
	pub, err := s.publicKeyLocked(ctx)
	if err != nil {
		return nil, err
	}
	id, err := s.IAM.EnsureSSHKey(ctx, s.KeyName, pub)
	if err != nil {
		return nil, fmt.Errorf("registering the rescue SSH key with IAM: %w", err)
	}
	s.id = id
	return []string{id}, nil
}

// Acquire registers the key in IAM unless it is already, records that holder
// (e.g. a server ID) needs it until Release, and returns the IDs to pass as
// the rescue reboot's ssh_key_ids. Call it right before every reboot into
// rescue: the key may have been removed since the last one.
func (s *Store) Acquire(ctx context.Context, holder string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pub, err := s.publicKeyLocked(ctx)
	if err != nil {
		return nil, err
	}
	// Taken before registering, so that an UnregisterUnused racing with a
	// failed registration still sees the hold.
	if s.holders == nil {
		s.holders = map[string]struct{}{}
	}
	s.holders[holder] = struct{}{}
	id, err := s.IAM.EnsureSSHKey(ctx, s.KeyName, pub)
	if err != nil {
		delete(s.holders, holder)
		return nil, fmt.Errorf("registering the rescue SSH key with IAM: %w", err)
	}
	return []string{id}, nil
}

// Release drops holder's hold: its rescue system accepted the key, or its
// install ended. It does not touch IAM; UnregisterUnused does.
func (s *Store) Release(holder string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.holders, holder)
}

// Holders is the number of holds taken with Acquire and not released.
func (s *Store) Holders() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.holders)
}

// UnregisterUnused removes the key from IAM when no holder of this process
// holds it and inUse reports that no server waits for a rescue boot (the
// installs' persisted phases: it covers the holds of a previous leader). It
// removes only a key registered under KeyName, never the same public key
// registered by someone else under another name, and reports whether it
// removed one. An error of inUse leaves the key in place.
func (s *Store) UnregisterUnused(ctx context.Context, inUse func(context.Context) (bool, error)) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.holders) > 0 {
		return false, nil
	}
	busy, err := inUse(ctx)
	if err != nil {
		return false, fmt.Errorf("finding the servers that need the rescue SSH key: %w", err)
	}
	if busy {
		return false, nil
	}
	pub, err := s.publicKeyLocked(ctx)
	if err != nil {
		return false, err
	}
	id, name, err := s.IAM.FindSSHKey(ctx, s.KeyName, pub)
	if err != nil {
		return false, fmt.Errorf("finding the rescue SSH key in IAM: %w", err)
	}
	if id == "" || name != s.KeyName {
		return false, nil
	}
	if err := s.IAM.DeleteSSHKey(ctx, id); err != nil {
		return false, fmt.Errorf("removing the rescue SSH key from IAM: %w", err)
	}
	s.id = ""
	return true, nil
}

func (s *Store) publicKeyLocked(ctx context.Context) (string, error) {
	signer, err := s.signerLocked(ctx)
	if err != nil {
		return "", err
	}
	return string(ssh.MarshalAuthorizedKey(signer.PublicKey())), nil
}
