package scaleway

import (
	"context"
	"errors"
	"fmt"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

// IPv4Of returns the public IPv4 the API lists for the server, "" when it
// lists none. Recorded: a server can be "ready" with ips: [] for a while,
// and list its IPs already while "ordered"; read it from the latest state.
func IPv4Of(s *baremetal.Server) string {
	if s == nil {
		return ""
	}
	for _, ip := range s.IPs {
		if ip != nil && ip.Version == baremetal.IPVersionIPv4 && ip.Address != nil {
			return ip.Address.String()
		}
	}
	return ""
}

// NoAddressError says the server reached the awaited state, but the API listed
// no IPv4 for it during Waited (Config.SettleWait, or until the caller's
// deadline). The server is not known to be broken: it may still get its
// IPs, so this is no reason to release it.
type NoAddressError struct {
	ID     string
	Zone   scw.Zone
	Status baremetal.ServerStatus
	Waited time.Duration
	Err    error // the caller's context error, when it ended the wait
}

func (e *NoAddressError) Error() string {
	msg := fmt.Sprintf("server %s in %s is %s but the API has listed no IPv4 for it for %s", e.ID, e.Zone, e.Status, e.Waited.Round(time.Second))
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *NoAddressError) Unwrap() error { return e.Err }

// WaitIPv4 waits, on lists taken after the call, until done(server) holds
// (done nil: any state) and the API lists an IPv4 for it, and returns the
// server and that address. Once done holds without an IPv4, onMissing (if
// set) is told once, in words for an operator, and the address is waited for
// at most Config.SettleWait: then, or when ctx ends first, the error is a
// *NoAddressError. Other failures are WaitFor's; opts are WaitFor's.
func (p *Poller) WaitIPv4(ctx context.Context, zone scw.Zone, id string, done func(*baremetal.Server) (bool, error),
	onMissing func(msg string), opts ...WaitOption) (*baremetal.Server, string, error) {
	w := &ipv4Wait{p: p, done: done, onMissing: onMissing}
	srv, err := p.WaitFor(ctx, zone, id, w.check, opts...)
	if err != nil && w.missing != nil && !errors.As(err, new(*NoAddressError)) && ctx.Err() != nil {
		w.missing.Waited, w.missing.Err = p.c.clock.Now().Sub(w.since), err
		return srv, "", w.missing
	}
	if err != nil {
		return srv, "", err
	}
	return srv, IPv4Of(srv), nil
}

// ipv4Wait is WaitIPv4's condition and what it remembers between lists:
// since when the server has been done without an address.
type ipv4Wait struct {
	p         *Poller
	done      func(*baremetal.Server) (bool, error)
	onMissing func(msg string)
	since     time.Time
	missing   *NoAddressError
}

// check holds once done holds and the server has an IPv4; it fails with a
// *NoAddressError once the address has been missing for Config.SettleWait.
func (w *ipv4Wait) check(s *baremetal.Server) (bool, error) {
	if w.done != nil {
		if ok, err := w.done(s); err != nil || !ok {
			w.since, w.missing = time.Time{}, nil
			return false, err
		}
	}
	if IPv4Of(s) != "" {
		return true, nil
	}
	return false, w.noAddress(s)
}

// noAddress notes a done server without an address, tells onMissing the
// first time, and returns the error once the wait is over.
func (w *ipv4Wait) noAddress(s *baremetal.Server) error {
	now := w.p.c.clock.Now()
	if w.since.IsZero() {
		w.since = now
		if w.onMissing != nil {
			w.onMissing(fmt.Sprintf("server %s is %s but the API lists no IPv4 for it yet; waiting up to %s for it",
				s.ID, s.Status, w.p.c.cfg.SettleWait))
		}
	}
	w.missing = &NoAddressError{ID: s.ID, Zone: s.Zone, Status: s.Status, Waited: now.Sub(w.since)}
	if w.missing.Waited >= w.p.c.cfg.SettleWait {
		return w.missing
	}
	return nil
}

// IPv4 reads the server from a list started now (not from a state an
// earlier phase kept) and returns its IPv4, waiting as WaitIPv4 does while
// the API lists none.
func (p *Poller) IPv4(ctx context.Context, zone scw.Zone, id string, onMissing func(msg string)) (*baremetal.Server, string, error) {
	srv, err := p.Get(ctx, zone, id, 0)
	if err != nil {
		return nil, "", err
	}
	if ip := IPv4Of(srv); ip != "" {
		return srv, ip, nil
	}
	return p.WaitIPv4(ctx, zone, id, nil, onMissing)
}
