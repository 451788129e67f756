package talosapi

import (
	"bytes"
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Talos 1.12 takes one config in maintenance mode. Until machined tears the
// service down, the service's loop still reads configs: a second apply is
// answered OK and ignored. Once the graceful stop began, new calls are
// refused (GOAWAY, then nothing listens). Either way the second config is
// never used.
func TestSecondApplyNeverWins(t *testing.T) {
	ctx := context.Background()
	bundle, err := secrets.NewBundle(secrets.NewClock(), config.TalosVersion1_12)
	if err != nil {
		t.Fatal(err)
	}
	attackerCfg := workerConfig(t, bundle, nodePatch("owned", "scaleway-em://fr-par-2/x"))
	ourCfg := workerConfig(t, bundle, nodePatch("ours", "scaleway-em://fr-par-2/x"))
	for _, tc := range []struct {
		name       string
		leaveDelay time.Duration
		code       codes.Code
	}{
		{"while machined reacts", time.Hour, codes.OK},
		{"once the service stops", NoLeaveDelay, codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu      sync.Mutex
				applied [][]byte
			)
			m, err := StartMaintenance(MaintenanceOptions{
				Addr:            "127.0.0.1:0",
				LeaveDelay:      tc.leaveDelay,
				ShutdownTimeout: 500 * time.Millisecond,
				OnApply: func(_ context.Context, _ config.Provider, raw []byte) error {
					mu.Lock()
					applied = append(applied, raw)
					mu.Unlock()
					return nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()

			// Our client saw maintenance mode before the attacker applied.
			ours := talosClient(t, m.Addr())
			if _, err := ours.Version(ctx); status.Code(err) != codes.Unimplemented {
				t.Fatalf("version: %v", err)
			}
			if _, err := talosClient(t, m.Addr()).ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: attackerCfg}); err != nil {
				t.Fatalf("first apply: %v", err)
			}
			if tc.code != codes.OK {
				<-m.Done()
			}
			_, err = ours.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: ourCfg})
			if status.Code(err) != tc.code {
				t.Fatalf("second apply: %v, want %s", err, tc.code)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(applied) != 1 || !bytes.Equal(applied[0], attackerCfg) {
				t.Fatalf("%d configs applied, want the first one only", len(applied))
			}
			m.Close()
			var methods []string
			for _, c := range m.Calls() {
				methods = append(methods, c.Method[strings.LastIndex(c.Method, "/")+1:]+"="+c.Code.String())
			}
			want := "Version=Unimplemented,ApplyConfiguration=OK"
			if tc.code == codes.OK {
				want += ",ApplyConfiguration=OK" // answered, ignored
			}
			if got := strings.Join(methods, ","); got != want {
				t.Fatalf("calls %s, want %s", got, want)
			}
		})
	}
}

// The codes an insecure (non-SideroLink) caller gets in maintenance mode.
func TestMaintenanceCodesForInsecureCallers(t *testing.T) {
	ctx := context.Background()
	m, err := StartMaintenance(MaintenanceOptions{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := talosClient(t, m.Addr())
	for name, call := range map[string]func() error{
		"Version":   func() error { _, err := c.Version(ctx); return err },
		"Upgrade":   func() error { _, err := c.MachineClient.Upgrade(ctx, &machine.UpgradeRequest{}); return err }, //nolint:staticcheck // SA1019: deprecated, still served; the test checks it is refused
		"Reset":     func() error { _, err := c.MachineClient.Reset(ctx, &machine.ResetRequest{}); return err },
		"MetaWrite": func() error { _, err := c.MachineClient.MetaWrite(ctx, &machine.MetaWriteRequest{}); return err },
	} {
		if err := call(); status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), MsgNotInMaintenance) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := c.MachineClient.ServiceList(ctx, &emptypb.Empty{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("ServiceList: %v", err)
	}
	if _, err := c.MachineClient.GenerateClientConfiguration(ctx, &machine.GenerateClientConfigurationRequest{}); status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "maintenance mode") {
		t.Errorf("GenerateClientConfiguration: %v", err)
	}
}

// A configured node's API (apid) wants a client certificate from the
// machine's CA: an insecure client fails the TLS handshake, an
// authenticated one gets an answer. Both attempts are recorded.
func TestConfiguredAPIRequiresClientCertificate(t *testing.T) {
	ctx := context.Background()
	bundle, err := secrets.NewBundle(secrets.NewClock(), config.TalosVersion1_12)
	if err != nil {
		t.Fatal(err)
	}
	cfg := loadConfig(t, workerConfig(t, bundle, nodePatch("n1", "scaleway-em://fr-par-2/x")))
	a, err := StartAPI(APIOptions{Addr: "127.0.0.1:0", Config: cfg, TalosVersion: "v1.12.3"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	asked := false
	insecure, err := talosclient.New(ctx, talosclient.WithEndpoints(a.Addr()), talosclient.WithTLSConfig(&tls.Config{
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			asked = true
			return &tls.Certificate{}, nil
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer insecure.Close()
	if _, err := insecure.Version(ctx); status.Code(err) != codes.Unavailable || !asked {
		t.Fatalf("insecure client: %v (asked for a certificate: %v)", err, asked)
	}

	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(bundle.Certs.OS)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := x509.NewKeyPair(ca, x509.CommonName("admin"), x509.Organization("os:admin"),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(kp.CrtPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := talosclient.New(ctx, talosclient.WithEndpoints(a.Addr()), talosclient.WithTLSConfig(&tls.Config{
		InsecureSkipVerify: true, Certificates: []tls.Certificate{cert},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	v, err := admin.Version(ctx)
	if err != nil || v.Messages[0].Version.Tag != "v1.12.3" {
		t.Fatalf("authenticated client: %v %v", v, err)
	}
	var handshakes, versions int
	for _, c := range a.Calls() {
		switch {
		case c.Method == "tls-handshake":
			handshakes++
		case strings.HasSuffix(c.Method, "/Version") && c.Code == codes.OK:
			versions++
		}
	}
	if handshakes < 2 || versions != 1 {
		t.Fatalf("calls %+v", a.Calls())
	}
}
