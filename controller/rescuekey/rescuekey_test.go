package rescuekey

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

type iam struct {
	calls atomic.Int32
	keys  []string
	err   error
}

func (i *iam) EnsureSSHKey(_ context.Context, _, pub string) (string, error) {
	i.calls.Add(1)
	i.keys = append(i.keys, pub)
	return "key-id", i.err
}

func (i *iam) FindSSHKey(context.Context, string, string) (string, string, error) {
	return "", "", errors.New("not used")
}

func (i *iam) DeleteSSHKey(context.Context, string) error { return errors.New("not used") }

func TestKeyIsCreatedOnceSharedAndRegisteredOnce(t *testing.T) {
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()
	reg := &iam{}
	a := &Store{Kube: kube, Namespace: "karpenter", Name: "rescue", KeyName: "k", IAM: reg}
	ids, err := a.KeyIDs(context.Background())
	if err != nil || len(ids) != 1 || ids[0] != "key-id" {
		t.Fatalf("KeyIDs = %v, %v", ids, err)
	}
	if _, err := a.KeyIDs(context.Background()); err != nil || reg.calls.Load() != 1 {
		t.Fatalf("registered %d times", reg.calls.Load())
	}
	// A second replica reads the same key from the Secret.
	b := &Store{Kube: kube, Namespace: "karpenter", Name: "rescue", KeyName: "k", IAM: reg}
	sa, _ := a.Signer(context.Background())
	sb, err := b.Signer(context.Background())
	if err != nil || string(sa.PublicKey().Marshal()) != string(sb.PublicKey().Marshal()) {
		t.Fatalf("replicas use different keys: %v", err)
	}
	if !strings.HasPrefix(reg.keys[0], "ssh-ed25519 ") {
		t.Errorf("registered %q, want an authorized_keys line", reg.keys[0])
	}
	sec := &corev1.Secret{}
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: "karpenter", Name: "rescue"}, sec); err != nil {
		t.Fatal(err)
	}
	if _, err := ssh.ParsePrivateKey(sec.Data[SecretKey]); err != nil {
		t.Fatalf("secret holds no private key: %v", err)
	}
}

func TestBadSecretAndIAMFailureAreErrorsWithoutKeyMaterial(t *testing.T) {
	bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "karpenter", Name: "rescue"},
		Data: map[string][]byte{SecretKey: []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nnot a key\n")}}
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(bad).Build()
	s := &Store{Kube: kube, Namespace: "karpenter", Name: "rescue", IAM: &iam{}}
	_, err := s.Signer(context.Background())
	if err == nil || strings.Contains(err.Error(), "not a key") {
		t.Fatalf("Signer = %v: want an error that does not quote the Secret", err)
	}
	good := &Store{Kube: fake.NewClientBuilder().WithScheme(scheme.Scheme).Build(), Namespace: "karpenter", Name: "rescue",
		IAM: &iam{err: errors.New("permission denied")}}
	if _, err := good.KeyIDs(context.Background()); err == nil || !strings.Contains(err.Error(), "IAM") {
		t.Fatalf("KeyIDs with IAM failing = %v", err)
	}
}
