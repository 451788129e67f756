package live

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"golang.org/x/crypto/ssh"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/faketree"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	simrescue "github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// TestProbeRescueKexec runs smoke-live's rescue probe against the simulated
// rescue host (a real SSH and SFTP server, sudo as the boot's login has it)
// running the real em-imager on a fake machine: it reports kexec possible
// where the kernel allows it, and the refusal's code and reason where
// kexec_load_disabled or lockdown refuses, for both rescue logins.
func TestProbeRescueKexec(t *testing.T) {
	imager, err := world.FindBinary(world.BinEMImager)
	if err != nil {
		t.Fatal(err)
	}
	binary, err := os.ReadFile(imager)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		kexec    *faketree.Kexec
		password string
		level    Level
		want     string
	}{
		{"possible", &faketree.Kexec{}, "", OK, "kexec is possible"},
		{"disabled", &faketree.Kexec{Disabled: true}, "", Warn, "kexec_disabled"},
		{"lockdown, per-server user", &faketree.Kexec{Lockdown: "integrity"}, "s3cret-pass", Warn, "kexec_lockdown"},
		{"no kexec in the kernel", nil, "", Warn, "kexec_unsupported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, srv := probeHost(t, tc.kexec, tc.password)
			var r Report
			ProbeRescue(context.Background(), d, srv, binary, &r)
			if len(r.Findings) != 1 {
				t.Fatalf("findings %+v, want one", r.Findings)
			}
			f := r.Findings[0]
			if f.Level != tc.level || !strings.Contains(f.What, tc.want) {
				t.Errorf("finding %s %q, want %s naming %q", f.Level, f.What, tc.level, tc.want)
			}
			if tc.password != "" && strings.Contains(f.What, tc.password) {
				t.Errorf("the finding shows the sudo password: %q", f.What)
			}
		})
	}
	t.Run("not in rescue", func(t *testing.T) {
		d, srv := probeHost(t, &faketree.Kexec{}, "")
		srv.BootType = baremetal.ServerBootTypeNormal
		var r Report
		ProbeRescue(context.Background(), d, srv, binary, &r)
		if !r.Failed() {
			t.Errorf("a server not in rescue was probed: %+v", r.Findings)
		}
	})
}

// probeHost starts a simulated rescue host over a fake machine with the
// kexec switches k, and returns a dialer holding its key and the server as
// the API shows it in rescue (the per-server login when password is set).
func probeHost(t *testing.T, k *faketree.Kexec, password string) (*rescue.Dialer, *baremetal.Server) {
	t.Helper()
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	if err := faketree.Build(tree, faketree.Host{Kexec: k}); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	key, err := simrescue.NewHostKey()
	if err != nil {
		t.Fatal(err)
	}
	user := "rescue"
	if password != "" {
		user = "em-abcde"
	}
	host, err := simrescue.Start(simrescue.Options{Addr: "127.0.0.1:0", User: user, SudoPassword: password, Home: home,
		BinDir: filepath.Join(dir, "bin"), Env: []string{hostroot.EnvVar + "=" + tree},
		AuthorizedKeys: []string{string(ssh.MarshalAuthorizedKey(key.PublicKey()))}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.Close() })
	ip, port, err := net.SplitHostPort(host.Addr())
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	d := &rescue.Dialer{User: "rescue", Port: p, Timeout: 10 * time.Second,
		Signers: func() ([]ssh.Signer, error) { return []ssh.Signer{key}, nil }}
	srv := &baremetal.Server{ID: "11111111-2222-4333-8444-555555555555", Zone: scw.ZoneFrPar2, BootType: baremetal.ServerBootTypeRescue,
		IPs: []*baremetal.IP{{Version: baremetal.IPVersionIPv4, Address: net.ParseIP(ip)}}}
	if password != "" {
		srv.RescueServer = &baremetal.ServerRescueServer{User: user, Password: password}
	}
	return d, srv
}
