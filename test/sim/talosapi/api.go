package talosapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/emptypb"
)

// APIOptions configure the Talos API of a configured node.
type APIOptions struct {
	// Addr to listen on, host:port (the machine's IPv4 and port 50000).
	Addr string
	// Config is the node's machine config: its machine CA (machine.ca)
	// decides which client certificates are accepted.
	Config config.Provider
	// TalosVersion is what Version answers.
	TalosVersion string
	Logger       *slog.Logger
}

// API is apid of a configured node: the Talos API on :50000 with mutual
// TLS. Only clients holding a certificate issued by the machine's CA get
// past the handshake; anyone else — a maintenance-mode client, an attacker
// with --insecure — fails it ("tls: certificate required"), as on a real
// node. Every handshake attempt and call is recorded.
type API struct {
	machine.UnimplementedMachineServiceServer
	callLog

	opts APIOptions
	ln   net.Listener
	srv  *grpc.Server
	once sync.Once
}

// StartAPI listens on opts.Addr and serves in the background.
func StartAPI(opts APIOptions) (*API, error) {
	if opts.Addr == "" || opts.Config == nil {
		return nil, errors.New("talosapi: StartAPI needs Addr and Config")
	}
	host, _, err := net.SplitHostPort(opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("talosapi: Addr %q: %w", opts.Addr, err)
	}
	cert, _, err := selfSigned(host)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if sec := opts.Config.Machine().Security(); sec != nil && sec.IssuingCA() != nil {
		pool.AppendCertsFromPEM(sec.IssuingCA().Crt)
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("talosapi: listen %s: %w", opts.Addr, err)
	}
	a := &API{opts: opts, ln: ln}
	tlsConfig := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			a.add(Call{At: time.Now(), Method: "tls-handshake", Peer: hello.Conn.RemoteAddr().String()})
			return nil, nil
		},
	}
	a.srv = grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsConfig)), grpc.UnaryInterceptor(a.interceptor))
	machine.RegisterMachineServiceServer(a.srv, a)
	go func() {
		_ = a.srv.Serve(ln)
	}()
	return a, nil
}

// Addr is the address the API listens on.
func (a *API) Addr() string { return a.ln.Addr().String() }

// Close stops the API (a power-off).
func (a *API) Close() { a.once.Do(a.srv.Stop) }

// Version answers authenticated clients.
func (a *API) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	return &machine.VersionResponse{Messages: []*machine.Version{{
		Metadata: &common.Metadata{},
		Version:  &machine.VersionInfo{Tag: a.opts.TalosVersion},
		Platform: &machine.PlatformInfo{Name: "metal", Mode: "metal"},
	}}}, nil
}
