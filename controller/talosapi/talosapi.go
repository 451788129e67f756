// Package talosapi applies a machine config to a Talos node in maintenance
// mode, with Talos's own API types: the legacy config delivery
// (configDelivery: MaintenanceAPI), for images booted without
// talos.config=metal-iso.
//
// Maintenance mode serves the API with a self-signed certificate and no
// client authentication, first writer wins: whoever reaches the node's :50000
// first can own it. Nothing can prove who answers, so this package only
// narrows the window and never sends the config to an API that shows it is
// not the one seen in maintenance mode:
//
//   - only an answer that proves maintenance mode counts as ready: Version
//     refused with codes.Unimplemented "API is not implemented in maintenance
//     mode", over TLS without a client certificate request. A configured node
//     (apid asks for a client certificate), a Version that answers, and
//     Unauthenticated/PermissionDenied are ErrNotMaintenance, never ready;
//   - WaitMaintenance returns the Peer: the SPKI fingerprint of the key the
//     API served with at first contact (Talos's --cert-fingerprint format).
//     ApplyTo connects only to that key (any other fails the TLS handshake,
//     before a byte of config is sent), checks maintenance mode again on that
//     connection, then applies;
//   - every failure after the API was seen answering says the server may
//     have been taken (Release reports true): the caller gives it back.
//
// What this cannot catch: an attacker who answers before the first contact
// with a perfect imitation, or whose apply lands in the instant before ours
// (Talos then answers ours OK and ignores it; the node never registers with
// our providerID). Disk delivery (talos.config=metal-iso) has no such window.
package talosapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	cryptox509 "github.com/siderolabs/crypto/x509"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// MsgNotInMaintenance is how Talos 1.12's maintenance service refuses
// Version (and the other admin APIs) to clients that are not SideroLink
// peers (internal/app/maintenance, assertAdminRole), with codes.Unimplemented.
const MsgNotInMaintenance = "API is not implemented in maintenance mode"

// Errors, matched with errors.Is.
var (
	// ErrNotUp: nothing answers yet (refused, timeout): keep waiting.
	ErrNotUp = errors.New("the Talos API does not answer")
	// ErrNotMaintenance: something answers, but not as Talos in
	// maintenance mode does: a configured node, or not Talos.
	ErrNotMaintenance = errors.New("the Talos API is not in maintenance mode")
	// ErrPeerChanged: the API now serves another key than at first contact.
	ErrPeerChanged = errors.New("the Talos API's certificate changed since it was first seen")
	// ErrGone: the API answered in maintenance mode, then stopped answering
	// before the config was applied (it may have taken another one).
	ErrGone = errors.New("the Talos API stopped answering")
	// ErrApply: ApplyConfiguration failed.
	ErrApply = errors.New("applying the machine config failed")
)

// Release reports whether err leaves a server that may have been taken or
// cannot take our config: anything but a transient "not up yet" or the
// caller's own cancellation.
func Release(err error) bool {
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, ErrNotMaintenance), errors.Is(err, ErrPeerChanged), errors.Is(err, ErrGone), errors.Is(err, ErrApply):
		return true
	}
	return false
}

// Peer is a Talos API seen in maintenance mode.
type Peer struct {
	Endpoint string
	// Fingerprint is the base64 SHA-256 of the served certificate's public
	// key (SPKI), as Talos prints it for talosctl --cert-fingerprint.
	Fingerprint string
	SeenAt      time.Time
}

// Applier talks to Talos APIs on Port (50000 on real nodes).
type Applier struct {
	Port int
	// CallTimeout bounds each call (10s when 0).
	CallTimeout time.Duration
}

func (a Applier) endpoint(host string) string {
	return net.JoinHostPort(host, strconv.Itoa(a.Port))
}

func (a Applier) callTimeout() time.Duration {
	if a.CallTimeout > 0 {
		return a.CallTimeout
	}
	return 10 * time.Second
}

// conn is one gRPC connection to a Talos API that records what its TLS
// handshakes saw: a client certificate request (a configured apid), the
// first key served, and whether a later one differed from the pin.
type conn struct {
	*grpc.ClientConn
	mu          sync.Mutex
	pin         cryptox509.Fingerprint // nil: pin the first key seen
	askedCert   bool
	keyMismatch bool
}

func (a Applier) dial(endpoint string, pin cryptox509.Fingerprint) (*conn, error) {
	c := &conn{pin: pin}
	cfg := &tls.Config{
		// Maintenance mode's certificate chains to nothing we know: identity
		// is the key, pinned below.
		InsecureSkipVerify: true, //nolint:gosec // see the package doc
		MinVersion:         tls.VersionTLS12,
		NextProtos:         []string{"h2"},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c.mu.Lock()
			c.askedCert = true
			c.mu.Unlock()
			return nil, errors.New("the server asks for a client certificate: not maintenance mode")
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no server certificate")
			}
			fp := cryptox509.SPKIFingerprint(cs.PeerCertificates[0])
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.pin == nil {
				c.pin = fp
				return nil
			}
			if !c.pin.Equal(fp) {
				c.keyMismatch = true
				return fmt.Errorf("server key %s, expected %s", fp, c.pin)
			}
			return nil
		},
	}
	cc, err := grpc.NewClient("passthrough:///"+endpoint, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		return nil, err
	}
	c.ClientConn = cc
	return c, nil
}

// classify turns a call's error into this package's errors, using what the
// TLS handshakes saw rather than error strings.
func (c *conn) classify(err error, seen bool) error {
	c.mu.Lock()
	asked, mismatch := c.askedCert, c.keyMismatch
	c.mu.Unlock()
	switch {
	case err == nil:
		return nil
	case mismatch:
		return fmt.Errorf("%w: %v", ErrPeerChanged, err)
	case asked:
		return fmt.Errorf("%w: it asks for a client certificate (a configured node)", ErrNotMaintenance)
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		if seen {
			return fmt.Errorf("%w: %v", ErrGone, err)
		}
		return fmt.Errorf("%w: %v", ErrNotUp, err)
	}
	return fmt.Errorf("%w: %v", ErrNotMaintenance, err)
}

// proveMaintenance calls Version on c: only Talos's maintenance-mode refusal
// proves maintenance mode.
func (a Applier) proveMaintenance(ctx context.Context, c *conn, seen bool) error {
	cctx, cancel := context.WithTimeout(ctx, a.callTimeout())
	defer cancel()
	_, err := machineapi.NewMachineServiceClient(c).Version(cctx, &emptypb.Empty{})
	switch {
	case err == nil:
		return fmt.Errorf("%w: Version answered (a configured node, or not Talos)", ErrNotMaintenance)
	case status.Code(err) == codes.Unimplemented && strings.Contains(status.Convert(err).Message(), MsgNotInMaintenance):
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return c.classify(err, seen)
}

// Probe contacts the API once and returns its Peer if, and only if, it
// answers as Talos in maintenance mode.
func (a Applier) Probe(ctx context.Context, host string) (Peer, error) {
	ep := a.endpoint(host)
	c, err := a.dial(ep, nil)
	if err != nil {
		return Peer{}, err
	}
	defer c.Close()
	if err := a.proveMaintenance(ctx, c, false); err != nil {
		return Peer{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return Peer{Endpoint: ep, Fingerprint: c.pin.String(), SeenAt: time.Now()}, nil
}

// WaitMaintenance probes host every interval until its API proves
// maintenance mode, and returns that Peer. An answer that is not
// maintenance mode (ErrNotMaintenance) ends the wait at once: after a
// reboot into a freshly written image it means someone configured the node.
func (a Applier) WaitMaintenance(ctx context.Context, host string, interval time.Duration) (Peer, error) {
	for {
		p, err := a.Probe(ctx, host)
		if err == nil || !errors.Is(err, ErrNotUp) {
			return p, err
		}
		select {
		case <-ctx.Done():
			return Peer{}, fmt.Errorf("the Talos API on %s never came up in maintenance mode: %w (last: %v)", a.endpoint(host), ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}

// ApplyTo sends cfg (mode auto) to the API seen as peer: over a connection
// that accepts only peer's key, after proving maintenance mode again on it.
// Any failure is one Release reports true for, but the caller's cancellation.
func (a Applier) ApplyTo(ctx context.Context, peer Peer, cfg []byte) error {
	pin, err := cryptox509.ParseFingerprint(peer.Fingerprint)
	if err != nil || len(pin) == 0 {
		return fmt.Errorf("%w: peer %s has no usable fingerprint", ErrApply, peer.Endpoint)
	}
	c, err := a.dial(peer.Endpoint, pin)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrApply, err)
	}
	defer c.Close()
	if err := a.proveMaintenance(ctx, c, true); err != nil {
		return fmt.Errorf("talos apply-config on %s: %w", peer.Endpoint, err)
	}
	cctx, cancel := context.WithTimeout(ctx, a.callTimeout())
	defer cancel()
	_, err = machineapi.NewMachineServiceClient(c).ApplyConfiguration(cctx, &machineapi.ApplyConfigurationRequest{
		Data: cfg,
		Mode: machineapi.ApplyConfigurationRequest_AUTO,
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The config may or may not have reached the peer: either way the
		// server cannot be trusted to boot with ours.
		return fmt.Errorf("talos apply-config on %s: %w: %w", peer.Endpoint, ErrApply, c.classify(err, true)) //nolint:errorlint // both are classes callers test: ErrApply and the transport class
	}
	return nil
}
