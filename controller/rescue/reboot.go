package rescue

import (
	"context"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

// Rebooter is the API call that boots a server into rescue (*scaleway.Client).
type Rebooter interface {
	RebootServer(ctx context.Context, zone scw.Zone, id string, bootType baremetal.ServerBootType, sshKeyIDs []string) (*baremetal.Server, error)
}

// RebootIntoRescue reboots srv into rescue with the given IAM keys. It is the
// only way the provider boots rescue (install, imaging fallback, spares), so
// the host key trusted for the previous boot is always forgotten: the new
// rescue system comes with a new one. The pins are dropped before the
// request and again on the next call to ForgetServer (when the caller saw the
// new boot ready), since the old system may still answer until it stops.
func (d *Dialer) RebootIntoRescue(ctx context.Context, api Rebooter, srv *baremetal.Server, sshKeyIDs []string) (*baremetal.Server, error) {
	d.ForgetServer(srv)
	return api.RebootServer(ctx, srv.Zone, srv.ID, baremetal.ServerBootTypeRescue, sshKeyIDs)
}

// ForgetServer drops the host keys pinned for every address of srv. A server
// shown without addresses (the API sometimes omits them) cannot be matched
// to its pins: every pin is dropped then, which only means trusting the next
// key each rescue shows on first use again.
func (d *Dialer) ForgetServer(srv *baremetal.Server) {
	known := false
	for _, ip := range srv.IPs {
		if ip != nil && ip.Address != nil {
			d.Forget(ip.Address.String())
			known = true
		}
	}
	if !known {
		d.mu.Lock()
		d.hostKeys = nil
		d.mu.Unlock()
	}
}
