package talosapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// MetalMode is Talos's "metal" runtime mode, the one a config is validated
// for on bare metal: install instructions are required.
type MetalMode struct{}

func (MetalMode) String() string        { return "metal" }
func (MetalMode) RequiresInstall() bool { return true }
func (MetalMode) InContainer() bool     { return false }

// ApplyFunc receives a config the maintenance API accepted (validated for
// metal) and its raw bytes. An error is returned to the client as is.
type ApplyFunc func(ctx context.Context, cfg config.Provider, raw []byte) error

// MaintenanceOptions configure a maintenance-mode Talos API.
type MaintenanceOptions struct {
	// Addr to listen on, host:port (the machine's IPv4 and port 50000).
	Addr string
	// OnApply is called once per accepted, non-dry-run config; then the
	// server leaves maintenance mode (stops listening).
	OnApply ApplyFunc
	Logger  *slog.Logger
}

// Maintenance is a running maintenance-mode Talos API: gRPC over TLS with a
// self-signed certificate, MachineService from Talos's own API types.
type Maintenance struct {
	machine.UnimplementedMachineServiceServer

	opts MaintenanceOptions
	ln   net.Listener
	srv  *grpc.Server
	log  *slog.Logger
	cert *x509.Certificate

	mu      sync.Mutex
	applied bool
	done    chan struct{}
	stopped sync.Once
}

// StartMaintenance listens on opts.Addr and serves in the background.
func StartMaintenance(opts MaintenanceOptions) (*Maintenance, error) {
	if opts.Addr == "" {
		return nil, errors.New("talosapi: Addr is empty")
	}
	host, _, err := net.SplitHostPort(opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("talosapi: Addr %q: %w", opts.Addr, err)
	}
	cert, parsed, err := selfSigned(host)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("talosapi: listen %s: %w", opts.Addr, err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Maintenance{
		opts: opts, ln: ln, log: log.With("addr", opts.Addr), cert: parsed, done: make(chan struct{}),
		srv: grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
			Certificates: []tls.Certificate{cert},
			MinVersion:   tls.VersionTLS12,
			NextProtos:   []string{"h2"},
		}))),
	}
	machine.RegisterMachineServiceServer(m.srv, m)
	go func() {
		_ = m.srv.Serve(ln)
	}()
	return m, nil
}

// selfSigned makes the kind of certificate Talos serves in maintenance mode:
// self-signed, for the node's address, so clients connect with --insecure.
func selfSigned(host string) (tls.Certificate, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "maintenance-service.talos.dev"},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"maintenance-service.talos.dev"},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, parsed, nil
}

// Addr is the address the API listens on.
func (m *Maintenance) Addr() string { return m.ln.Addr().String() }

// Certificate is the self-signed serving certificate.
func (m *Maintenance) Certificate() *x509.Certificate { return m.cert }

// Done is closed once the server has stopped (config applied, or Close).
func (m *Maintenance) Done() <-chan struct{} { return m.done }

// Close stops the server at once, dropping connections (a power-off).
func (m *Maintenance) Close() {
	m.stopped.Do(func() {
		m.srv.Stop()
		close(m.done)
	})
}

// leave stops the server after in-flight calls finish: Talos leaving
// maintenance mode once it has a config.
func (m *Maintenance) leave() {
	go m.stopped.Do(func() {
		m.srv.GracefulStop()
		close(m.done)
	})
}

// ApplyConfiguration mirrors Talos's maintenance service: only the reboot,
// auto and try modes are accepted, the config is loaded with configloader
// and validated for metal mode, and the same errors are returned.
func (m *Maintenance) ApplyConfiguration(ctx context.Context, in *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	switch in.Mode {
	case machine.ApplyConfigurationRequest_TRY, machine.ApplyConfigurationRequest_REBOOT, machine.ApplyConfigurationRequest_AUTO:
	default:
		return nil, status.Errorf(codes.Unimplemented, "apply configuration --mode='%s' is not supported in maintenance mode",
			strings.ReplaceAll(strings.ToLower(in.Mode.String()), "_", "-"))
	}
	cfg, err := configloader.NewFromBytes(in.GetData())
	if err != nil {
		return nil, fmt.Errorf("failed to parse config: %w", err)
	}
	warnings, err := cfg.Validate(MetalMode{})
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "configuration validation failed: %s", err)
	}
	reply := &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{Warnings: warnings}}}
	if in.DryRun {
		reply.Messages[0].ModeDetails = "Dry run summary:\nNode is running in maintenance mode and does not have a config yet."
		return reply, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.applied {
		// Real Talos consumes one config and leaves; a second call racing
		// the shutdown is answered like the first.
		return reply, nil
	}
	if m.opts.OnApply != nil {
		if err := m.opts.OnApply(ctx, cfg, in.GetData()); err != nil {
			return nil, err
		}
	}
	m.applied = true
	m.log.Info("config applied, leaving maintenance mode")
	m.leave()
	return reply, nil
}

// Version is refused as in real maintenance mode, where only SideroLink
// clients get the admin role it needs.
func (m *Maintenance) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	return nil, status.Error(codes.Unimplemented, "API is not implemented in maintenance mode")
}
