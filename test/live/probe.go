package live

import (
	"context"
	"fmt"
	"os"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"golang.org/x/crypto/ssh"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// RescueServerEnv names the server smoke-live probes in rescue, as
// <zone>/<server-id>; RescueKeyEnv the private key (OpenSSH format) whose
// public half the server's rescue boot was given (default
// ~/.ssh/id_ed25519); RescueImagerEnv the em-imager binary it uploads
// (default bin/em-imager, which make build writes).
const (
	RescueServerEnv = "SMOKE_RESCUE_SERVER"
	RescueKeyEnv    = "SMOKE_RESCUE_SSH_KEY"
	RescueImagerEnv = "SMOKE_RESCUE_EM_IMAGER"
)

// ProbeRescue logs into srv's rescue system as the API shows its login (the
// controller's way: the API's user, sudo -n or the password on stdin),
// uploads em-imager over SFTP, runs `em-imager inspect` (nothing written)
// and reports whether kexec is possible there and, if not, why. A server
// that is not in rescue, or a probe that cannot run, is a failure: the
// operator asked for it.
func ProbeRescue(ctx context.Context, d *rescue.Dialer, srv *baremetal.Server, binary []byte, r *Report) {
	where := string(srv.Zone)
	if srv.BootType != baremetal.ServerBootTypeRescue {
		r.add(Fail, where, "server %s is not in rescue (boot type %s): boot it into rescue with your SSH key first", srv.ID, srv.BootType)
		return
	}
	ip := scaleway.IPv4Of(srv)
	if ip == "" {
		r.add(Fail, where, "server %s has no IPv4 to reach its rescue system", srv.ID)
		return
	}
	s, err := d.DialAs(ctx, ip, d.LoginFor(srv))
	if err != nil {
		r.add(Fail, where, "server %s: SSH to its rescue system: %v", srv.ID, err)
		return
	}
	defer func() { _ = s.Close() }()
	rep, err := rescue.RunProbe(ctx, s, binary)
	if rep == nil || rep.Kexec == nil {
		r.add(Fail, where, "server %s: em-imager inspect in rescue gave no kexec verdict: %v", srv.ID, err)
		return
	}
	if k := rep.Kexec; k.Possible {
		r.add(OK, where, "server %s: kexec is possible in its rescue system (%s): installs can jump into Talos without a firmware reboot", srv.ID, k.Reason)
	} else {
		r.add(Warn, where, "server %s: kexec is not possible in its rescue system: %s: %s (the controller reboots through the API instead)", srv.ID, k.Code, k.Reason)
	}
}

// RescueSigner reads the private key of RescueKeyEnv (or
// ~/.ssh/id_ed25519).
func RescueSigner() (ssh.Signer, error) {
	path := os.Getenv(RescueKeyEnv)
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, err
		}
		path = home + "/.ssh/id_ed25519"
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", RescueKeyEnv, err)
	}
	return ssh.ParsePrivateKey(data)
}
