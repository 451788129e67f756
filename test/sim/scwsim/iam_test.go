package scwsim

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	iam "github.com/scaleway/scaleway-sdk-go/api/iam/v1alpha1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"golang.org/x/crypto/ssh"
)

func authorizedKey(t *testing.T, comment string) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))) + " " + comment
}

func newSSHKey(t *testing.T, e *env, name string) *iam.SSHKey {
	t.Helper()
	k, err := iam.NewAPI(e.cli).CreateSSHKey(&iam.CreateSSHKeyRequest{Name: name, PublicKey: authorizedKey(t, name),
		ProjectID: zeroID})
	if err != nil {
		t.Fatalf("CreateSSHKey: %v", err)
	}
	return k
}

func TestIAMSSHKeys(t *testing.T) {
	e := newEnv(t, nil)
	api := iam.NewAPI(e.cli)
	line := authorizedKey(t, "ops@example")
	k, err := api.CreateSSHKey(&iam.CreateSSHKeyRequest{Name: "ops", PublicKey: line, ProjectID: zeroID})
	if err != nil {
		t.Fatal(err)
	}
	if k.PublicKey != line || k.ProjectID != zeroID || k.OrganizationID != zeroID || k.Disabled ||
		!strings.Contains(k.Fingerprint, "SHA256:") || k.CreatedAt == nil {
		t.Fatalf("created key: %+v", k)
	}
	got, err := api.GetSSHKey(&iam.GetSSHKeyRequest{SSHKeyID: k.ID})
	if err != nil || got.PublicKey != line {
		t.Fatalf("GetSSHKey: %v %+v", err, got)
	}
	for i := 0; i < 4; i++ {
		newSSHKey(t, e, "k")
	}
	size := uint32(2)
	page1, err := api.ListSSHKeys(&iam.ListSSHKeysRequest{PageSize: &size})
	if err != nil || page1.TotalCount != 5 || len(page1.SSHKeys) != 2 || page1.SSHKeys[0].ID != k.ID {
		t.Fatalf("ListSSHKeys page 1: %v %+v", err, page1)
	}
	all, err := api.ListSSHKeys(&iam.ListSSHKeysRequest{PageSize: &size}, scw.WithAllPages())
	if err != nil || len(all.SSHKeys) != 5 {
		t.Fatalf("ListSSHKeys all pages: %v %d", err, len(all.SSHKeys))
	}
	name := "ops"
	byName, err := api.ListSSHKeys(&iam.ListSSHKeysRequest{Name: &name})
	if err != nil || byName.TotalCount != 1 {
		t.Fatalf("ListSSHKeys by name: %v %+v", err, byName)
	}
	disabled := true
	upd, err := api.UpdateSSHKey(&iam.UpdateSSHKeyRequest{SSHKeyID: k.ID, Disabled: &disabled})
	if err != nil || !upd.Disabled {
		t.Fatalf("UpdateSSHKey: %v %+v", err, upd)
	}
	if err := api.DeleteSSHKey(&iam.DeleteSSHKeyRequest{SSHKeyID: k.ID}); err != nil {
		t.Fatal(err)
	}
	_, err = api.GetSSHKey(&iam.GetSSHKeyRequest{SSHKeyID: k.ID})
	if nf := mustAs[*scw.ResourceNotFoundError](t, err); nf.ResourceID != k.ID {
		t.Fatalf("deleted key: %+v", nf)
	}

	for _, bad := range []string{"", "not a key", line + "\n" + line} {
		_, err = api.CreateSSHKey(&iam.CreateSSHKeyRequest{Name: "bad", PublicKey: bad, ProjectID: zeroID})
		if ia := mustAs[*scw.InvalidArgumentsError](t, err); ia.Details[0].ArgumentName != "public_key" {
			t.Fatalf("bad key %q: %+v", bad, ia)
		}
	}
}

func TestIAMForeignProjectDenied(t *testing.T) {
	other := "11111111-2222-4333-8444-555555555555"
	e := newEnv(t, func(o *Options) { o.AllowedProjects = []string{other} })
	_, err := iam.NewAPI(e.cli).CreateSSHKey(&iam.CreateSSHKeyRequest{Name: "x", PublicKey: authorizedKey(t, "x"), ProjectID: zeroID})
	if pd := mustAs[*scw.PermissionsDeniedError](t, err); pd.Details[0].Action != "write" {
		t.Fatalf("permission: %+v", pd)
	}
}
