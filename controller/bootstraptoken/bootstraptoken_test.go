package bootstraptoken

import (
	"context"
	"errors"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

func TestTokenIDIsABootstrapTokenID(t *testing.T) {
	re := regexp.MustCompile(`^[a-z0-9]{6}$`)
	seen := map[string]string{}
	for _, c := range []string{"general-purpose-abcde", "general-purpose-abcdf", "gpu-x1y2z", ""} {
		id := TokenID(c)
		if !re.MatchString(id) || TokenID(c) != id {
			t.Errorf("TokenID(%q) = %q", c, id)
		}
		if other, dup := seen[id]; dup {
			t.Errorf("%q and %q share %s", c, other, id)
		}
		seen[id] = c
	}
}

type tokenEnv struct {
	admin   client.Client
	counted client.Client
	m       *Manager
	gets    atomic.Int32
	now     time.Time
}

// startTokens runs the Manager as a ServiceAccount that may only create, get
// and delete Secrets in kube-system (the chart's token Role): any list would
// be refused by the real API server.
func startTokens(t *testing.T) *tokenEnv {
	t.Helper()
	k := testenv.StartKube(t, testenv.KubeOptions{NoKarpenterCRDs: true})
	ctx := t.Context()
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "karpenter"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "karpenter", Name: "controller"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "tokens"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "get", "delete"}}}},
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
	e := &tokenEnv{admin: k.Client, now: time.Now()}
	counted := interceptor.NewClient(sa, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			e.gets.Add(1)
			return c.Get(ctx, key, obj, opts...)
		},
	})
	e.counted = counted
	e.m = &Manager{Kube: counted, Namespace: "kube-system", TTL: time.Hour, Now: func() time.Time { return e.now }}
	// The identity really cannot list: the tests below can fail on a list.
	if err := sa.List(ctx, &corev1.SecretList{}, client.InNamespace("kube-system")); !apierrors.IsForbidden(err) {
		t.Fatalf("the token ServiceAccount can list kube-system Secrets: %v", err)
	}
	return e
}

func (e *tokenEnv) secret(t *testing.T, claim string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	err := e.admin.Get(t.Context(), types.NamespacedName{Namespace: "kube-system", Name: SecretName(claim)}, s)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func claim(name string, registered, deleting bool) *karpv1.NodeClaim {
	c := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if registered {
		c.StatusConditions().SetTrue(karpv1.ConditionTypeRegistered)
	}
	if deleting {
		now := metav1.Now()
		c.DeletionTimestamp = &now
	}
	return c
}

func all(*karpv1.NodeClaim) bool { return true }

// One API server for the Manager's tests; each gets a fresh Manager (a new
// controller process) and its own NodeClaim names.
func TestManager(t *testing.T) {
	e := startTokens(t)
	for name, f := range map[string]func(*testing.T, *tokenEnv){
		"ensure creates, reuses and renews by name": testEnsure,
		"collision leaves the other token alone":    testCollision,
		"sweep deletes by name from the NodeClaims": testSweep,
	} {
		e.now = time.Now()
		e.m = &Manager{Kube: e.counted, Namespace: "kube-system", TTL: time.Hour, Now: func() time.Time { return e.now }}
		t.Run(name, func(t *testing.T) { f(t, e) })
	}
}

func testEnsure(t *testing.T, e *tokenEnv) {
	ctx := t.Context()
	tok, err := e.m.Ensure(ctx, "pool-a1b2c")
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	s := e.secret(t, "pool-a1b2c")
	if s == nil || s.Type != corev1.SecretTypeBootstrapToken || s.Labels[LabelNodeClaim] != "pool-a1b2c" ||
		tok != string(s.Data["token-id"])+"."+string(s.Data["token-secret"]) || string(s.Data["token-id"]) != TokenID("pool-a1b2c") ||
		string(s.Data["auth-extra-groups"]) != Group {
		t.Fatalf("token %q, Secret %+v", tok, s)
	}
	// A kubelet join authenticates with the token; signing the cluster-info
	// ConfigMap is a usage it does not need, so the token cannot do it.
	if string(s.Data["usage-bootstrap-authentication"]) != "true" || s.Data["usage-bootstrap-signing"] != nil {
		t.Errorf("token usages: authentication %q, signing %q; want authentication only",
			s.Data["usage-bootstrap-authentication"], s.Data["usage-bootstrap-signing"])
	}
	if again, err := e.m.Ensure(ctx, "pool-a1b2c"); err != nil || again != tok {
		t.Fatalf("retried Ensure = %q, %v; want the same token", again, err)
	}
	// Late in its life: replaced under the same name with a new secret.
	e.now = e.now.Add(50 * time.Minute)
	renewed, err := e.m.Ensure(ctx, "pool-a1b2c")
	if err != nil || renewed == tok || renewed[:6] != tok[:6] {
		t.Fatalf("Ensure of a nearly expired token = %q, %v (was %q)", renewed, err, tok)
	}
	exp, _ := time.Parse(time.RFC3339, string(e.secret(t, "pool-a1b2c").Data["expiration"]))
	if !exp.After(e.now.Add(50 * time.Minute)) {
		t.Errorf("renewed token expires at %s", exp)
	}
}

// A Secret of someone else under the derived name is neither reused nor
// deleted: Ensure fails with a CollisionError, Delete leaves it.
func testCollision(t *testing.T, e *tokenEnv) {
	ctx := t.Context()
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: SecretName("pool-zzzzz")},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{"token-id": TokenID("pool-zzzzz"), "token-secret": "0123456789abcdef"}}
	if err := e.admin.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	_, err := e.m.Ensure(ctx, "pool-zzzzz")
	var coll *CollisionError
	if !errors.As(err, &coll) || coll.Claim != "pool-zzzzz" {
		t.Fatalf("Ensure over a foreign token = %v, want a CollisionError", err)
	}
	if err := e.m.Sweep(ctx, map[string]*karpv1.NodeClaim{"pool-zzzzz": claim("pool-zzzzz", true, false)}, all); err != nil {
		t.Fatal(err)
	}
	if s := e.secret(t, "pool-zzzzz"); s == nil || string(s.Data["token-secret"]) != "0123456789abcdef" {
		t.Fatalf("the foreign token was changed or deleted: %+v", s)
	}
}

func testSweep(t *testing.T, e *tokenEnv) {
	ctx := t.Context()
	for _, c := range []string{"registered", "pending", "deleting", "vanishing", "gone"} {
		if _, err := e.m.Ensure(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	// A token made by a previous controller process for a claim of a
	// per-NodeClaim class (this Manager never saw it).
	before := &Manager{Kube: e.admin, Namespace: "kube-system", TTL: time.Hour}
	if _, err := before.Ensure(ctx, "restarted"); err != nil {
		t.Fatal(err)
	}
	claims := map[string]*karpv1.NodeClaim{
		"registered": claim("registered", true, false),
		"pending":    claim("pending", false, false),
		"deleting":   claim("deleting", false, true),
		"vanishing":  claim("vanishing", false, false),
		"restarted":  claim("restarted", true, false),
	}
	if err := e.m.Sweep(ctx, claims, all); err != nil {
		t.Fatal(err)
	}
	// "gone" is not among the claims: this process gave it a token and it
	// was deleted since.
	for c, want := range map[string]bool{"registered": false, "pending": true, "deleting": false, "vanishing": true, "restarted": false,
		"gone": false} {
		if got := e.secret(t, c) != nil; got != want {
			t.Errorf("token of %s exists = %v, want %v", c, got, want)
		}
	}

	// The claim "vanishing" disappears (deleted while the sweep was not looking).
	delete(claims, "vanishing")
	e.gets.Store(0)
	if err := e.m.Sweep(ctx, claims, all); err != nil {
		t.Fatal(err)
	}
	if e.secret(t, "vanishing") != nil || e.secret(t, "pending") == nil {
		t.Error("vanished claim's token kept, or pending claim's token deleted")
	}
	// Tokens already deleted are not looked up again: one Get, for "vanishing".
	if n := e.gets.Load(); n != 1 {
		t.Errorf("%d Gets in the second sweep, want 1", n)
	}

	// Claims of classes with shared tokens are never looked up.
	e.gets.Store(0)
	none := func(*karpv1.NodeClaim) bool { return false }
	other := &Manager{Kube: e.counted, Namespace: "kube-system", TTL: time.Hour}
	if err := other.Sweep(ctx, map[string]*karpv1.NodeClaim{"x": claim("x", true, false)}, none); err != nil || e.gets.Load() != 0 {
		t.Fatalf("sweep of shared-token claims: %v, %d Gets", err, e.gets.Load())
	}
}
