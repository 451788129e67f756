// Package rescuekey owns the SSH key the controller uses to log into rescue
// systems: an ed25519 key kept in a Secret (created on first use, shared by
// all replicas) and registered with Scaleway IAM, whose ID is passed to every
// rescue reboot. The private key never leaves the Secret and the process.
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

// Registrar registers a public key with IAM and returns its ID (scaleway.Client.EnsureSSHKey).
type Registrar interface {
	EnsureSSHKey(ctx context.Context, name, publicKey string) (string, error)
}

// Store loads or creates the key and registers it once per process.
type Store struct {
	Kube      client.Client
	Namespace string
	Name      string // the Secret's name
	KeyName   string // the IAM key's name, e.g. karpenter-scaleway-em-<cluster>
	IAM       Registrar

	mu     sync.Mutex
	signer ssh.Signer
	id     string
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

// KeyIDs registers the public key with IAM (once) and returns its ID.
func (s *Store) KeyIDs(ctx context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id != "" {
		return []string{s.id}, nil
	}
	signer, err := s.signerLocked(ctx)
	if err != nil {
		return nil, err
	}
	pub := string(ssh.MarshalAuthorizedKey(signer.PublicKey()))
	id, err := s.IAM.EnsureSSHKey(ctx, s.KeyName, pub)
	if err != nil {
		return nil, fmt.Errorf("registering the rescue SSH key with IAM: %w", err)
	}
	s.id = id
	return []string{id}, nil
}
