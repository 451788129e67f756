package bootstraptoken

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

type tokenEnv struct {
	k     *testenv.Kube
	admin client.Client
	sa    client.WithWatch // the ServiceAccount, every call recorded in calls

	mu    sync.Mutex
	calls []string
}

func (e *tokenEnv) record(verb string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = append(e.calls, verb)
}

func (e *tokenEnv) recorded() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.calls...)
}

// startTokens runs a kube-apiserver that accepts bootstrap tokens, and a
// ServiceAccount that may only create Secrets in kube-system (the chart's
// token Role). Every call made through e.sa is recorded.
func startTokens(t *testing.T) *tokenEnv {
	t.Helper()
	k := testenv.StartKube(t, testenv.KubeOptions{NoKarpenterCRDs: true,
		APIServerFlags: map[string][]string{"enable-bootstrap-token-auth": {"true"}}})
	ctx := t.Context()
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "karpenter"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "karpenter", Name: "controller"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "tokens"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "tokens"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tokens"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "karpenter", Name: "controller"}}},
	} {
		if err := k.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(k.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:karpenter:controller"}
	sa, err := client.NewWithWatch(cfg, client.Options{Scheme: k.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	// The identity really cannot read: a get or list would fail the tests.
	if err := sa.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "x"}, &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the token ServiceAccount can get kube-system Secrets: %v", err)
	}
	e := &tokenEnv{k: k, admin: k.Client}
	e.sa = interceptor.NewClient(sa, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			e.record("get")
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			e.record("list")
			return c.List(ctx, list, opts...)
		},
		Watch: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
			e.record("watch")
			return c.Watch(ctx, list, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			e.record("create")
			return c.Create(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			e.record("delete")
			return c.Delete(ctx, obj, opts...)
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			e.record("deletecollection")
			return c.DeleteAllOf(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			e.record("update")
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			e.record("patch")
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	return e
}

// tokens reads, as the admin, the token Secrets made for claim.
func (e *tokenEnv) tokens(t *testing.T, claim string) map[string]*corev1.Secret {
	t.Helper()
	list := &corev1.SecretList{}
	if err := e.admin.List(t.Context(), list, client.InNamespace("kube-system"), client.MatchingLabels{LabelNodeClaim: claim}); err != nil {
		t.Fatal(err)
	}
	out := map[string]*corev1.Secret{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

// whoAmI is the identity the API server gives a bearer token (nil: refused).
func (e *tokenEnv) whoAmI(t *testing.T, token string) *authenticationv1.UserInfo {
	t.Helper()
	cfg := &rest.Config{Host: e.k.Config.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: e.k.Config.CAData}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if apierrors.IsUnauthorized(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return &r.Status.UserInfo
}

// TestManagerCreatesOnly: as an identity that may only create kube-system
// Secrets, each Ensure creates a new token Secret that carries an
// expiration and the authentication usage only, and nothing but create is
// ever attempted. The API server authenticates the token, and refuses it
// once expired.
func TestManagerCreatesOnly(t *testing.T) {
	e := startTokens(t)
	ctx := t.Context()
	now := time.Now().Truncate(time.Second)
	m := &Manager{Kube: e.sa, Namespace: "kube-system", TTL: 40 * time.Minute, Now: func() time.Time { return now }}

	tok, err := m.Ensure(ctx, "pool-a1b2c")
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if !regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`).MatchString(tok) {
		t.Fatalf("token %q is not a bootstrap token", tok)
	}
	// A config rendered again carries a new token; the first is not read
	// back (that would need get on every kube-system Secret).
	again, err := m.Ensure(ctx, "pool-a1b2c")
	if err != nil || again == tok {
		t.Fatalf("second Ensure = %q, %v; want a new token (first %q)", again, err, tok)
	}
	secrets := e.tokens(t, "pool-a1b2c")
	if len(secrets) != 2 {
		t.Fatalf("%d token Secrets for the claim, want 2", len(secrets))
	}
	for _, tk := range []string{tok, again} {
		id, secret, _ := strings.Cut(tk, ".")
		s := secrets["bootstrap-token-"+id]
		if s == nil || s.Type != corev1.SecretTypeBootstrapToken || string(s.Data["token-id"]) != id || string(s.Data["token-secret"]) != secret ||
			string(s.Data["auth-extra-groups"]) != Group {
			t.Fatalf("token %q: Secret %+v", tk, s)
		}
		if exp := string(s.Data["expiration"]); exp != now.Add(40*time.Minute).UTC().Format(time.RFC3339) {
			t.Errorf("token %s expires at %q, want the render time plus the TTL", id, exp)
		}
		// A kubelet join only authenticates with the token: no other usage
		// (usage-bootstrap-signing would let it sign cluster-info).
		for k, v := range s.Data {
			if strings.HasPrefix(k, "usage-") && (k != "usage-bootstrap-authentication" || string(v) != "true") {
				t.Errorf("token %s has usage %s=%q; want usage-bootstrap-authentication only", id, k, v)
			}
		}
		if string(s.Data["usage-bootstrap-authentication"]) != "true" {
			t.Errorf("token %s cannot authenticate", id)
		}
	}
	if calls := e.recorded(); strings.Join(calls, ",") != "create,create" {
		t.Errorf("calls to the API server: %v, want two creates and nothing else", calls)
	}

	// The real API server takes the token as a bootstrapper of the group
	// kubelets are allowed to bootstrap in. Its authenticator reads token
	// Secrets through an informer: wait for it to see the new one.
	id, _, _ := strings.Cut(tok, ".")
	var who *authenticationv1.UserInfo
	for deadline := time.Now().Add(30 * time.Second); who == nil && time.Now().Before(deadline); {
		if who = e.whoAmI(t, tok); who == nil {
			time.Sleep(200 * time.Millisecond)
		}
	}
	if who == nil || who.Username != "system:bootstrap:"+id || !contains(who.Groups, "system:bootstrappers") || !contains(who.Groups, Group) {
		t.Fatalf("the token authenticates as %+v", who)
	}

	// A token whose expiration has passed is refused: that, not a delete by
	// this controller, is what ends it.
	past := now.Add(-time.Hour)
	old := &Manager{Kube: e.sa, Namespace: "kube-system", TTL: 40 * time.Minute, Now: func() time.Time { return past }}
	expired, err := old.Ensure(ctx, "pool-old")
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the authenticator has seen a token created after it, so
	// the expired one is refused for its expiration, not for being unseen.
	fresh, err := m.Ensure(ctx, "pool-fresh")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); e.whoAmI(t, fresh) == nil; {
		if time.Now().After(deadline) {
			t.Fatal("a fresh token is never accepted")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if who := e.whoAmI(t, expired); who != nil {
		t.Errorf("an expired token authenticates as %+v", who)
	}
}

// An existing Secret under a drawn name is never touched: another ID is
// drawn and the other token stays as it was.
func TestManagerLeavesAClashingSecretAlone(t *testing.T) {
	e := startTokens(t)
	ctx := t.Context()
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap-token-aaaaaa"},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{"token-id": "aaaaaa", "token-secret": "0123456789abcdef"}}
	if err := e.admin.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	ids := []string{"aaaaaa", "bbbbbb"}
	m := &Manager{Kube: e.sa, Namespace: "kube-system", TTL: time.Hour,
		ids: func() (string, error) { id := ids[0]; ids = ids[1:]; return id, nil }}
	tok, err := m.Ensure(ctx, "pool-zzzzz")
	if err != nil || !strings.HasPrefix(tok, "bbbbbb.") {
		t.Fatalf("Ensure over a clashing name = %q, %v; want a token under the next ID", tok, err)
	}
	s := &corev1.Secret{}
	if err := e.admin.Get(ctx, client.ObjectKeyFromObject(foreign), s); err != nil || string(s.Data["token-secret"]) != "0123456789abcdef" ||
		s.Labels[LabelNodeClaim] != "" {
		t.Fatalf("the other token was changed: %+v, %v", s, err)
	}
	if calls := e.recorded(); strings.Join(calls, ",") != "create,create" {
		t.Errorf("calls to the API server: %v, want two creates and nothing else", calls)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// The cleanup command docs/security.md gives for clusters without the token
// cleaner deletes this controller's expired token Secrets and nothing else.
// It runs the line from the doc with the kubectl on PATH.
func TestDocumentedCleanupDeletesOnlyExpiredTokens(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("no kubectl on PATH: run `make deps` (Debian's kubernetes-client)")
	}
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	var cmd string
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "kubectl -n kube-system get secrets -l "+LabelNodeClaim) {
			cmd = line
		}
	}
	if cmd == "" {
		t.Fatal("docs/security.md has no cleanup command")
	}
	e := startTokens(t)
	ctx := t.Context()
	old := &Manager{Kube: e.admin, Namespace: "kube-system", TTL: 40 * time.Minute, Now: func() time.Time { return time.Now().Add(-2 * time.Hour) }}
	expired, err := old.Ensure(ctx, "pool-old")
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := (&Manager{Kube: e.admin, Namespace: "kube-system", TTL: 40 * time.Minute}).Ensure(ctx, "pool-new")
	if err != nil {
		t.Fatal(err)
	}
	// Someone else's expired token: not this controller's to clean.
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap-token-ffffff"},
		Type: corev1.SecretTypeBootstrapToken, StringData: map[string]string{"token-id": "ffffff", "token-secret": "0123456789abcdef",
			"expiration": "2020-01-01T00:00:00Z"}}
	if err := e.admin.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	sh := exec.CommandContext(ctx, "sh", "-c", cmd)
	sh.Env = append(os.Environ(), "KUBECONFIG="+e.k.KubeconfigPath, "PATH="+filepath.Dir(kubectl)+":"+os.Getenv("PATH"))
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	exists := func(name string) bool {
		err := e.admin.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: name}, &corev1.Secret{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	for name, want := range map[string]bool{
		"bootstrap-token-" + strings.Split(expired, ".")[0]: false,
		"bootstrap-token-" + strings.Split(fresh, ".")[0]:   true,
		foreign.Name: true,
	} {
		if got := exists(name); got != want {
			t.Errorf("%s exists after the cleanup: %v, want %v", name, got, want)
		}
	}
}
