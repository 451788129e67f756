// Package talosapi applies a machine config to a Talos node in maintenance
// mode, with Talos's own client.
//
// Maintenance mode serves the API with a self-signed certificate and no
// client authentication (that is how Talos bootstraps), so the server cannot
// be verified here; the window is short (the server was just rebooted from a
// verified image by this controller) and the node leaves maintenance mode as
// soon as the config is applied.
package talosapi

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Applier applies configs on Port (50000 on real nodes).
type Applier struct {
	Port int
}

func (a Applier) endpoint(host string) string {
	return net.JoinHostPort(host, strconv.Itoa(a.Port))
}

func (a Applier) connect(ctx context.Context, host string) (*client.Client, error) {
	return client.New(ctx,
		client.WithEndpoints(a.endpoint(host)),
		//nolint:gosec // maintenance mode has no certificate to verify, see package doc.
		client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}),
	)
}

// WaitReady blocks until the Talos API on host answers a Version call.
func (a Applier) WaitReady(ctx context.Context, host string, interval time.Duration) error {
	var last error
	for {
		c, err := a.connect(ctx, host)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err = c.Version(cctx)
			cancel()
			_ = c.Close()
			// Maintenance mode may refuse Version (Unimplemented/PermissionDenied)
			// while accepting ApplyConfiguration: an answer is an answer.
			if err == nil || isAnswer(err) {
				return nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("talos API on %s never came up: %w (last error: %v)", a.endpoint(host), ctx.Err(), last)
		case <-time.After(interval):
		}
	}
}

func isAnswer(err error) bool {
	switch status.Code(err) {
	case codes.Unimplemented, codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return false
}

// Apply sends cfg with mode auto (the node installs/reboots as it needs).
func (a Applier) Apply(ctx context.Context, host string, cfg []byte) error {
	c, err := a.connect(ctx, host)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{
		Data: cfg,
		Mode: machineapi.ApplyConfigurationRequest_AUTO,
	})
	if err != nil {
		return fmt.Errorf("talos apply-config on %s: %w", a.endpoint(host), err)
	}
	return nil
}
