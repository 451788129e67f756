package nodeclass

import (
	"context"
	"strings"
	"testing"

	"github.com/scaleway/scaleway-sdk-go/scw"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/imagesource"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/joinsecret"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/manifest"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/talosgen"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

// Collaborators of the status controller that this test does not exercise.
type okImages struct{}

func (okImages) Resolve(context.Context, imagesource.Settings) (*imagesource.Image, error) {
	return &imagesource.Image{Arch: "amd64", Format: "zstd", RawSHA256: strings.Repeat("a", 64), RawSize: 1 << 30,
		Manifest: &manifest.Manifest{Boot: &manifest.Boot{KernelArgs: "talos.config=metal-iso", Source: manifest.BootSourceFlag, MetalISO: true}}}, nil
}

type okCredentials struct{}

func (okCredentials) CheckCredentials(context.Context, []scw.Zone) error { return nil }

// The controller runs as a ServiceAccount that, as with the chart's default
// RBAC, may get Secrets in its own namespace only. A NodeClass naming a
// Secret elsewhere (another tenant's join material) or the controller's own
// key is refused with JoinSecretNotAllowed before any read; a namespace
// allowed by the setting but not by RBAC shows as JoinSecretForbidden.
func TestJoinSecretOutsideTheAllowedNamespacesIsRefused(t *testing.T) {
	k := testenv.StartKube(t, testenv.KubeOptions{CRDs: apis.CRDs})
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{"karpenter", "team-b"} {
		must(k.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	join := map[string][]byte{talosgen.KeyKubernetesCA: k.Config.CAData, talosgen.KeyToken: []byte("abcdef.0123456789abcdef"),
		talosgen.KeyEndpoint: []byte(k.Config.Host)}
	for _, s := range []types.NamespacedName{{Namespace: "karpenter", Name: "cluster-join"}, {Namespace: "team-b", Name: "cluster-join"}} {
		must(k.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}, Data: join}))
	}
	must(k.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "karpenter", Name: "rescue-ssh"},
		Data: map[string][]byte{"ssh-privatekey": []byte("-----BEGIN OPENSSH PRIVATE KEY-----")}}))

	// The controller's identity: get on Secrets in karpenter only.
	must(k.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "karpenter", Name: "controller"}}))
	must(k.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "karpenter", Name: "join-secrets"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}}))
	must(k.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "karpenter", Name: "join-secrets"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "join-secrets"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "karpenter", Name: "controller"}}}))
	cfg := rest.CopyConfig(k.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:karpenter:controller"}
	asController, err := client.New(cfg, client.Options{Scheme: k.Scheme})
	must(err)

	scope := joinsecret.Scope{Namespaces: []string{"karpenter"}, Reserved: []types.NamespacedName{{Namespace: "karpenter", Name: "rescue-ssh"}}}
	wide := joinsecret.Scope{Namespaces: []string{"karpenter", "team-b"}}
	for i, tc := range []struct {
		name    string
		scope   joinsecret.Scope
		secret  types.NamespacedName
		reason  string // "" = Ready
		message string
	}{
		{"allowed namespace", scope, types.NamespacedName{Namespace: "karpenter", Name: "cluster-join"}, "", ""},
		{"another tenant's Secret", scope, types.NamespacedName{Namespace: "team-b", Name: "cluster-join"}, ReasonJoinSecretNotAllowed, "rbac.joinSecretNamespaces"},
		{"the controller's own key", scope, types.NamespacedName{Namespace: "karpenter", Name: "rescue-ssh"}, ReasonJoinSecretNotAllowed, "controller's own"},
		{"setting wider than RBAC", wide, types.NamespacedName{Namespace: "team-b", Name: "cluster-join"}, ReasonJoinSecretForbidden, "forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := &v1alpha1.ScalewayElasticMetalNodeClass{
				ObjectMeta: metav1.ObjectMeta{Name: "nc-" + string(rune('a'+i))},
				Spec: v1alpha1.ScalewayElasticMetalNodeClassSpec{
					Image: v1alpha1.ImageSpec{ManifestURL: "https://garage.example/m.json"},
					Talos: v1alpha1.TalosSpec{JoinSecretRef: v1alpha1.SecretReference{Namespace: tc.secret.Namespace, Name: tc.secret.Name}},
				},
			}
			must(k.Client.Create(ctx, nc))
			c := &StatusController{Kube: k.Client, Secrets: joinsecret.Reader{Reader: asController, Scope: tc.scope},
				Images: okImages{}, Credentials: okCredentials{}, DefaultZone: "fr-par-2"}
			if _, err := c.Reconcile(ctx, nc); err != nil {
				t.Fatal(err)
			}
			got := &v1alpha1.ScalewayElasticMetalNodeClass{}
			must(k.Client.Get(ctx, client.ObjectKeyFromObject(nc), got))
			cond := got.StatusConditions().Get(v1alpha1.ConditionTypeJoinConfigReady)
			if tc.reason == "" {
				if !cond.IsTrue() || !got.StatusConditions().Root().IsTrue() {
					t.Fatalf("JoinConfigReady %+v, Ready %+v", cond, got.StatusConditions().Root())
				}
				return
			}
			if !cond.IsFalse() || cond.Reason != tc.reason || !strings.Contains(cond.Message, tc.message) {
				t.Fatalf("JoinConfigReady = %s/%s %q, want False/%s mentioning %q", cond.Status, cond.Reason, cond.Message, tc.reason, tc.message)
			}
			if got.StatusConditions().Root().IsTrue() {
				t.Fatal("Ready although the join Secret is refused")
			}
		})
	}

	// The reader never lists Secrets, whatever the caller asks.
	r := joinsecret.Reader{Reader: k.Client, Scope: scope}
	if err := r.List(ctx, &corev1.SecretList{}, client.InNamespace("karpenter")); err == nil {
		t.Error("the join Secret reader listed Secrets")
	}
	if err := r.List(ctx, &corev1.NamespaceList{}); err != nil {
		t.Errorf("listing something else: %v", err)
	}
}
