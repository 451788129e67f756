package talosapi

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/big"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	cryptox509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	simtalos "github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/talosapi"
)

var (
	configOnce sync.Once
	ourConfig  []byte
	theirs     []byte
)

// configs are two valid worker configs: ours and an attacker's.
func configs(t *testing.T) ([]byte, []byte) {
	t.Helper()
	configOnce.Do(func() {
		bundle, err := secrets.NewBundle(secrets.NewClock(), config.TalosVersion1_12)
		if err != nil {
			t.Fatal(err)
		}
		gen := func(name string) []byte {
			in, err := generate.NewInput(name, "https://10.0.0.1:6443", "1.35.0", generate.WithSecretsBundle(bundle),
				generate.WithVersionContract(config.TalosVersion1_12), generate.WithInstallDisk("/dev/nvme0n1"))
			if err != nil {
				t.Fatal(err)
			}
			c, err := in.Config(machinetype.TypeWorker)
			if err != nil {
				t.Fatal(err)
			}
			b, err := c.EncodeBytes()
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		ourConfig, theirs = gen("ours"), gen("attacker")
	})
	return ourConfig, theirs
}

// applies records the configs a simulated maintenance API accepted.
type applies struct {
	mu  sync.Mutex
	got [][]byte
}

func (a *applies) on(_ context.Context, _ config.Provider, raw []byte) error {
	a.mu.Lock()
	a.got = append(a.got, raw)
	a.mu.Unlock()
	return nil
}

func (a *applies) list() [][]byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([][]byte(nil), a.got...)
}

func maintenance(t *testing.T, addr string, opts simtalos.MaintenanceOptions) (*simtalos.Maintenance, *applies) {
	t.Helper()
	a := &applies{}
	opts.Addr, opts.OnApply = addr, a.on
	m, err := simtalos.StartMaintenance(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m, a
}

// seen starts a simulated maintenance API and waits for it as the
// controller does: the Applier, the host and the Peer it pinned.
func seen(t *testing.T, opts simtalos.MaintenanceOptions) (*simtalos.Maintenance, *applies, Applier, string, Peer) {
	t.Helper()
	m, got := maintenance(t, "127.0.0.1:0", opts)
	a, host := applierFor(t, m.Addr())
	peer, err := a.WaitMaintenance(context.Background(), host, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	return m, got, a, host, peer
}

func applierFor(t *testing.T, addr string) (Applier, string) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	return Applier{Port: p, CallTimeout: 5 * time.Second}, host
}

// The path that works: maintenance mode proven, its key pinned, our config
// applied over a connection to that key.
func TestWaitMaintenanceThenApply(t *testing.T) {
	ours, _ := configs(t)
	m, got, a, _, peer := seen(t, simtalos.MaintenanceOptions{})
	if want := cryptox509.SPKIFingerprint(m.Certificate()).String(); peer.Fingerprint != want || peer.Endpoint != m.Addr() {
		t.Fatalf("peer %+v, want fingerprint %s", peer, want)
	}
	if err := a.ApplyTo(context.Background(), peer, ours); err != nil {
		t.Fatal(err)
	}
	if l := got.list(); len(l) != 1 || !bytes.Equal(l[0], ours) {
		t.Fatalf("applied %d configs", len(l))
	}
}

// fakeTalos answers Version as configured and records applies: what an
// attacker's server or a configured node may answer.
type fakeTalos struct {
	machine.UnimplementedMachineServiceServer
	version func() (*machine.VersionResponse, error)
	mu      sync.Mutex
	applied int
}

func (f *fakeTalos) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	return f.version()
}

func (f *fakeTalos) ApplyConfiguration(context.Context, *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	f.mu.Lock()
	f.applied++
	f.mu.Unlock()
	return &machine.ApplyConfigurationResponse{}, nil
}

func startFake(t *testing.T, f *fakeTalos) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})))
	machine.RegisterMachineServiceServer(srv, f)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// Only Talos's maintenance-mode refusal of Version counts as ready; every
// other answer is ErrNotMaintenance at once, the server is to be released,
// and the config is never sent, even to a pinned peer.
func TestOnlyMaintenanceModeIsReady(t *testing.T) {
	ours, _ := configs(t)
	for _, tc := range []struct {
		name    string
		version func() (*machine.VersionResponse, error)
	}{
		{"Version answers", func() (*machine.VersionResponse, error) { return &machine.VersionResponse{}, nil }},
		{"Unauthenticated", func() (*machine.VersionResponse, error) { return nil, status.Error(codes.Unauthenticated, "no token") }},
		{"PermissionDenied", func() (*machine.VersionResponse, error) {
			return nil, status.Error(codes.PermissionDenied, "not authorized")
		}},
		{"another Unimplemented", func() (*machine.VersionResponse, error) {
			return nil, status.Error(codes.Unimplemented, "method Version not implemented")
		}},
		{"Internal", func() (*machine.VersionResponse, error) { return nil, status.Error(codes.Internal, "boom") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeTalos{version: tc.version}
			addr := startFake(t, f)
			a, host := applierFor(t, addr)
			_, err := a.WaitMaintenance(context.Background(), host, time.Hour) // returns at once, or the test hangs
			if !errors.Is(err, ErrNotMaintenance) || !Release(err) {
				t.Fatalf("WaitMaintenance: %v (release %v)", err, Release(err))
			}
			// Even with its key pinned, ApplyTo proves maintenance mode first.
			pin := pinOf(t, addr)
			if err := a.ApplyTo(context.Background(), Peer{Endpoint: addr, Fingerprint: pin}, ours); !errors.Is(err, ErrNotMaintenance) || !Release(err) {
				t.Fatalf("ApplyTo: %v", err)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.applied != 0 {
				t.Fatal("the config was sent")
			}
		})
	}
}

// pinOf reads a server's key fingerprint with a plain TLS handshake.
func pinOf(t *testing.T, addr string) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return cryptox509.SPKIFingerprint(c.ConnectionState().PeerCertificates[0]).String()
}

// A configured node's apid asks for a client certificate: not maintenance
// mode, never ready, and nothing but a TLS handshake reaches it.
func TestConfiguredNodeIsNotReady(t *testing.T) {
	_, attacker := configs(t)
	cfg, err := configloader.NewFromBytes(attacker)
	if err != nil {
		t.Fatal(err)
	}
	api, err := simtalos.StartAPI(simtalos.APIOptions{Addr: "127.0.0.1:0", Config: cfg, TalosVersion: "v1.12.3"})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	a, host := applierFor(t, api.Addr())
	if _, err := a.WaitMaintenance(context.Background(), host, time.Hour); !errors.Is(err, ErrNotMaintenance) || !Release(err) {
		t.Fatalf("WaitMaintenance: %v", err)
	}
	for _, c := range api.Calls() {
		if c.Method != "tls-handshake" {
			t.Fatalf("a call reached apid: %+v", c)
		}
	}
}

// The attacker's own maintenance-like server, with its own key, replaces
// the one seen first: the TLS handshake fails on the pinned key, before a
// byte of config is sent.
func TestTakeoverAfterFirstContactIsRefused(t *testing.T) {
	ours, _ := configs(t)
	m, _, a, host, peer := seen(t, simtalos.MaintenanceOptions{})
	m.Close()
	impostor, got := maintenance(t, m.Addr(), simtalos.MaintenanceOptions{})
	err := a.ApplyTo(context.Background(), peer, ours)
	if !errors.Is(err, ErrPeerChanged) || !Release(err) {
		t.Fatalf("ApplyTo: %v", err)
	}
	if len(got.list()) != 0 || len(impostor.Calls()) != 0 {
		t.Fatalf("the impostor received %d configs and %d calls", len(got.list()), len(impostor.Calls()))
	}
	// A fresh Probe would pin the impostor: the limit of an unauthenticated
	// API, and why a fingerprint from first contact matters.
	if p, err := a.Probe(context.Background(), host); err != nil || p.Fingerprint == peer.Fingerprint {
		t.Fatalf("probe of the impostor: %+v %v", p, err)
	}
}

// The attacker applies first: the real maintenance service takes their
// config and goes away; ours fails (gone), then apid comes up on the port
// and fails the pin. Every outcome releases; ours is never applied.
func TestAttackerAppliedFirst(t *testing.T) {
	ours, attacker := configs(t)
	m, got, a, _, peer := seen(t, simtalos.MaintenanceOptions{LeaveDelay: simtalos.NoLeaveDelay, ShutdownTimeout: time.Second})
	addr := m.Addr()
	tc, err := talosclient.New(context.Background(), talosclient.WithEndpoints(addr), talosclient.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.ApplyConfiguration(context.Background(), &machine.ApplyConfigurationRequest{Data: attacker}); err != nil {
		t.Fatalf("attacker's apply: %v", err)
	}
	tc.Close()
	<-m.Done()
	if err := a.ApplyTo(context.Background(), peer, ours); !errors.Is(err, ErrGone) || !Release(err) {
		t.Fatalf("ApplyTo after the service left: %v", err)
	}
	cfg, err := configloader.NewFromBytes(attacker)
	if err != nil {
		t.Fatal(err)
	}
	api, err := simtalos.StartAPI(simtalos.APIOptions{Addr: addr, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	if err := a.ApplyTo(context.Background(), peer, ours); !Release(err) || !(errors.Is(err, ErrPeerChanged) || errors.Is(err, ErrNotMaintenance)) {
		t.Fatalf("ApplyTo against the configured node: %v", err)
	}
	if l := got.list(); len(l) != 1 || !bytes.Equal(l[0], attacker) {
		t.Fatalf("the node took %d configs, want the attacker's only", len(l))
	}
}

// Nothing listening: keep waiting, no release; it comes up: ready.
func TestNotUpYet(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	a, host := applierFor(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = a.WaitMaintenance(ctx, host, 50*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) || Release(err) {
		t.Fatalf("nothing listening: %v (release %v)", err, Release(err))
	}
	if _, err := a.Probe(context.Background(), host); !errors.Is(err, ErrNotUp) || Release(err) {
		t.Fatalf("probe: %v", err)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		maintenance(t, addr, simtalos.MaintenanceOptions{})
	}()
	if _, err := a.WaitMaintenance(context.Background(), host, 50*time.Millisecond); err != nil {
		t.Fatalf("once it is up: %v", err)
	}
}

// A config the node refuses: released (nothing else will take it); the
// right one to the same peer afterwards is applied once.
func TestApplyFailuresRelease(t *testing.T) {
	ours, _ := configs(t)
	m, got, a, _, peer := seen(t, simtalos.MaintenanceOptions{})
	if err := a.ApplyTo(context.Background(), peer, []byte("{{not yaml")); !errors.Is(err, ErrApply) || !Release(err) {
		t.Fatalf("refused config: %v", err)
	}
	if err := a.ApplyTo(context.Background(), Peer{Endpoint: m.Addr(), Fingerprint: "not base64!"}, ours); !errors.Is(err, ErrApply) {
		t.Fatalf("bad fingerprint: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.ApplyTo(ctx, peer, ours); err == nil || Release(err) {
		t.Fatalf("cancelled: %v (release %v)", err, Release(err))
	}
	if err := a.ApplyTo(context.Background(), peer, ours); err != nil {
		t.Fatal(err)
	}
	if l := got.list(); len(l) != 1 || !bytes.Equal(l[0], ours) {
		t.Fatalf("applied %d configs", len(l))
	}
}
