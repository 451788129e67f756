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
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// MetalMode is Talos's "metal" runtime mode, the one a config is validated
// for on bare metal: install instructions are required.
type MetalMode struct{}

// String names the mode as Talos does.
func (MetalMode) String() string { return "metal" }

// RequiresInstall is true: a metal config must say where to install.
func (MetalMode) RequiresInstall() bool { return true }

// InContainer is false: bare metal.
func (MetalMode) InContainer() bool { return false }

// InstalledMode validates a config read back from STATE at boot, as
// Talos's acquire controller does (validationModeDiskConfig): install
// instructions are no longer required.
type InstalledMode struct{}

// String names the mode as Talos does.
func (InstalledMode) String() string { return "diskConfig" }

// RequiresInstall is false: the node is installed already.
func (InstalledMode) RequiresInstall() bool { return false }

// InContainer is false: bare metal.
func (InstalledMode) InContainer() bool { return false }

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
	// LeaveDelay is how long the service keeps serving after it took a
	// config, before it stops (DefaultLeaveDelay when 0, NoLeaveDelay for
	// none): machined's controllers need that long to react.
	LeaveDelay time.Duration
	// ShutdownTimeout bounds the graceful stop (DefaultShutdownTimeout,
	// Talos's, when 0): calls still running then lose their connection.
	ShutdownTimeout time.Duration
	Logger          *slog.Logger
}

// DefaultShutdownTimeout is how long Talos 1.12's maintenance service waits
// for running calls when it stops (controllers/runtime/maintenance_service.go).
const DefaultShutdownTimeout = 5 * time.Second

// DefaultLeaveDelay: the acquire controller takes the config, then tears
// the maintenance service down; until then the service's loop keeps
// reading configs, answers OK and the acquire controller ignores them.
const DefaultLeaveDelay = 100 * time.Millisecond

// NoLeaveDelay makes the service stop as soon as it took a config.
const NoLeaveDelay = time.Duration(-1)

// MsgNotInMaintenance is what Talos 1.12's maintenance service answers,
// with codes.Unimplemented, to the admin-only APIs (Version, Upgrade,
// Reset, MetaWrite, MetaDelete) for clients that are not SideroLink peers.
const MsgNotInMaintenance = "API is not implemented in maintenance mode"

// Call is one request a simulated Talos API received, for assertions
// ("no call to :50000 happened").
type Call struct {
	At     time.Time
	Method string // full gRPC method, or "tls-handshake"
	Peer   string // client address
	Code   codes.Code
}

// callLog records calls; safe for concurrent use.
type callLog struct {
	mu    sync.Mutex
	calls []Call
}

func (l *callLog) add(c Call) {
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
}

// Calls returns what was received so far.
func (l *callLog) Calls() []Call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Call(nil), l.calls...)
}

// interceptor records every unary call with the code it returned.
func (l *callLog) interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	c := Call{At: time.Now(), Method: info.FullMethod, Code: status.Code(err)}
	if p, ok := peer.FromContext(ctx); ok {
		c.Peer = p.Addr.String()
	}
	l.add(c)
	return resp, err
}

// Maintenance is a running maintenance-mode Talos API: gRPC over TLS with a
// self-signed certificate, MachineService from Talos's own API types.
type Maintenance struct {
	machine.UnimplementedMachineServiceServer
	callLog

	opts MaintenanceOptions
	ln   net.Listener
	srv  *grpc.Server
	log  *slog.Logger
	cert *x509.Certificate

	mu        sync.Mutex
	applied   bool // a config was taken
	stopping  bool // the graceful stop began
	done      chan struct{}
	stopped   sync.Once
	closing   chan struct{} // Close: cut a leave short
	closeOnce sync.Once
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
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	switch {
	case opts.LeaveDelay == 0:
		opts.LeaveDelay = DefaultLeaveDelay
	case opts.LeaveDelay < 0:
		opts.LeaveDelay = 0
	}
	m := &Maintenance{
		opts: opts, ln: ln, log: log.With("addr", opts.Addr), cert: parsed, done: make(chan struct{}), closing: make(chan struct{}),
	}
	m.srv = grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"},
	})), grpc.UnaryInterceptor(m.interceptor))
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
	m.closeOnce.Do(func() { close(m.closing) })
	m.stopped.Do(func() {
		m.srv.Stop()
		close(m.done)
	})
	<-m.done
}

// leave stops the server as Talos leaves maintenance mode once it has a
// config: after LeaveDelay, gracefully (new calls are refused with GOAWAY),
// and calls still running after ShutdownTimeout lose their connection
// (factory.ServerGracefulStop with a 5 s context).
func (m *Maintenance) leave() {
	go m.stopped.Do(func() {
		defer close(m.done)
		select {
		case <-time.After(m.opts.LeaveDelay):
		case <-m.closing:
		}
		m.mu.Lock()
		m.stopping = true
		m.mu.Unlock()
		graceful := make(chan struct{})
		go func() {
			m.srv.GracefulStop()
			close(graceful)
		}()
		select {
		case <-graceful:
		case <-time.After(m.opts.ShutdownTimeout):
			m.srv.Stop()
			<-graceful
		case <-m.closing:
			m.srv.Stop()
			<-graceful
		}
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
	switch {
	case m.applied && m.stopping:
		// Talos 1.12 hands the config to machined over an unbuffered channel
		// that nobody reads while the service shuts down: the call hangs
		// until the shutdown timeout drops the connection.
		m.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-m.done:
		}
		m.mu.Lock()
		return nil, status.Error(codes.Unavailable, "maintenance service stopped")
	case m.applied:
		// The service's loop still reads configs until machined tears it
		// down: the call succeeds, but the acquire controller already
		// moved on with the first config. This one is never used.
		m.log.Warn("a second config was answered OK and ignored")
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
// clients get the admin role it needs (maintenance.Server.assertAdminRole).
func (m *Maintenance) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	return nil, status.Error(codes.Unimplemented, MsgNotInMaintenance)
}

// Upgrade checks the admin role first, as Version does; insecure callers
// never get further. So do Reset, MetaWrite and MetaDelete.
func (m *Maintenance) Upgrade(context.Context, *machine.UpgradeRequest) (*machine.UpgradeResponse, error) {
	return nil, status.Error(codes.Unimplemented, MsgNotInMaintenance)
}

// Reset is refused like Upgrade.
func (m *Maintenance) Reset(context.Context, *machine.ResetRequest) (*machine.ResetResponse, error) {
	return nil, status.Error(codes.Unimplemented, MsgNotInMaintenance)
}

// MetaWrite is refused like Upgrade.
func (m *Maintenance) MetaWrite(context.Context, *machine.MetaWriteRequest) (*machine.MetaWriteResponse, error) {
	return nil, status.Error(codes.Unimplemented, MsgNotInMaintenance)
}

// MetaDelete is refused like Upgrade.
func (m *Maintenance) MetaDelete(context.Context, *machine.MetaDeleteRequest) (*machine.MetaDeleteResponse, error) {
	return nil, status.Error(codes.Unimplemented, MsgNotInMaintenance)
}

// GenerateClientConfiguration is refused with the message real maintenance mode gives.
func (m *Maintenance) GenerateClientConfiguration(context.Context, *machine.GenerateClientConfigurationRequest) (*machine.GenerateClientConfigurationResponse, error) {
	return nil, status.Error(codes.Unimplemented, "client configuration (talosconfig) can't be generated in the maintenance mode")
}
