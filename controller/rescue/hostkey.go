package rescue

import (
	"encoding/base64"
	"fmt"
	"net"
	"strings"

	"golang.org/x/crypto/ssh"
)

// HostKeyPin is the fingerprint of the host key one rescue boot presented
// first, in OpenSSH's form "SHA256:<unpadded base64>" (what `ssh-keygen -lf`
// prints), so an operator can compare it with the rescue console. The empty
// pin means nothing is pinned yet.
type HostKeyPin string

const pinPrefix = "SHA256:"

// PinOf is the pin of a host key.
func PinOf(key ssh.PublicKey) HostKeyPin { return HostKeyPin(ssh.FingerprintSHA256(key)) }

// ParseHostKeyPin checks a stored pin (e.g. read back from a server tag).
// The empty string is the empty pin.
func ParseHostKeyPin(s string) (HostKeyPin, error) {
	if s == "" {
		return "", nil
	}
	b64, ok := strings.CutPrefix(s, pinPrefix)
	if !ok {
		return "", fmt.Errorf("host key pin %q: want %s<base64 of 32 bytes>", s, pinPrefix)
	}
	sum, err := base64.RawStdEncoding.DecodeString(b64)
	if err != nil || len(sum) != 32 {
		return "", fmt.Errorf("host key pin %q: want %s<base64 of 32 bytes>", s, pinPrefix)
	}
	return HostKeyPin(s), nil
}

// HostKeyChangedError says a rescue host presented another host key than the
// one pinned for its current boot: someone else answers on its address, or
// the server rebooted behind the controller's back. Retrying does not help;
// the install should fail with RescueHostKeyChanged and release the server.
type HostKeyChangedError struct {
	Host      string
	Pinned    HostKeyPin
	Presented HostKeyPin
}

func (e *HostKeyChangedError) Error() string {
	return fmt.Sprintf("rescue host %s presented host key %s, but %s is pinned for this boot", e.Host, e.Presented, e.Pinned)
}

// Pin loads the pin of host's current boot (after a restart); the empty pin
// forgets it, as Forget does.
func (d *Dialer) Pin(host string, pin HostKeyPin) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if pin == "" {
		delete(d.hostKeys, host)
		return
	}
	if d.hostKeys == nil {
		d.hostKeys = map[string]HostKeyPin{}
	}
	d.hostKeys[host] = pin
}

// Pinned returns host's pin for the current boot, "" when none.
func (d *Dialer) Pinned(host string) HostKeyPin {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hostKeys[host]
}

// Forget drops the pinned host key of host: call it when the server reboots.
func (d *Dialer) Forget(host string) { d.Pin(host, "") }

// hostKeyCallback pins the first key host presents and refuses any other;
// seen receives the presented key's pin.
func (d *Dialer) hostKeyCallback(host string, seen *HostKeyPin) ssh.HostKeyCallback {
	return func(_ string, _ net.Addr, key ssh.PublicKey) error {
		got := PinOf(key)
		*seen = got
		d.mu.Lock()
		defer d.mu.Unlock()
		if pinned, ok := d.hostKeys[host]; ok {
			if pinned != got {
				return &HostKeyChangedError{Host: host, Pinned: pinned, Presented: got}
			}
			return nil
		}
		if d.hostKeys == nil {
			d.hostKeys = map[string]HostKeyPin{}
		}
		d.hostKeys[host] = got
		return nil
	}
}
