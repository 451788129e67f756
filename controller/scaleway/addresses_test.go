package scaleway

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	baremetalv3 "github.com/scaleway/scaleway-sdk-go/api/baremetal/v3"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

func TestIPv4Of(t *testing.T) {
	s := &baremetal.Server{IPs: []*baremetal.IP{
		{Version: baremetal.IPVersionIPv6, Address: net.ParseIP("2001:bc8:1201:1::1")},
		{Version: baremetal.IPVersionIPv4, Address: net.ParseIP("51.159.1.2")},
	}}
	if got := IPv4Of(s); got != "51.159.1.2" {
		t.Fatalf("IPv4Of = %q", got)
	}
	if got := IPv4Of(&baremetal.Server{ID: "x", Status: baremetal.ServerStatusReady}); got != "" {
		t.Fatalf("a server without IPs has address %q", got)
	}
}

// messages collects onMissing calls.
type messages struct {
	mu  sync.Mutex
	all []string
}

func (m *messages) add(s string) { m.mu.Lock(); m.all = append(m.all, s); m.mu.Unlock() }
func (m *messages) get() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.all...)
}

// Recorded: "ready" with ips: []. The wait goes on until the IPv4 is
// listed, says so once, and gives up after SettleWait with a
// *NoAddressError that is no reason to release the server.
func TestWaitIPv4(t *testing.T) {
	ready := StatusIs(baremetal.ServerStatusReady)
	t.Run("listed late", func(t *testing.T) {
		env := startSim(t, 1, func(o *scwsim.Options) {
			o.ReadyIPs, o.Delays.IPsAfterReady = scwsim.ReadyIPsLate, 300*time.Millisecond
		}, nil)
		env.clock.sleep.Store(true)
		srv, _, err := env.client.CreateServer(context.Background(), env.createReq("ip-late"))
		if err != nil {
			t.Fatal(err)
		}
		poller := env.client.NewPoller(Tag(TagManagedBy, cluster))
		defer poller.Close()
		msgs := &messages{}
		got, ip, err := poller.WaitIPv4(context.Background(), zone, srv.ID, ready, msgs.add)
		if err != nil || got.Status != baremetal.ServerStatusReady || ip == "" || ip != IPv4Of(got) {
			t.Fatalf("WaitIPv4: %v, %q", err, ip)
		}
		if m := msgs.get(); len(m) != 1 || !strings.Contains(m[0], "lists no IPv4") {
			t.Fatalf("messages %q, want one that says the IPv4 is missing", m)
		}
		// Later phases read it from the latest state.
		if _, again, err := poller.IPv4(context.Background(), zone, srv.ID, nil); err != nil || again != ip {
			t.Fatalf("IPv4: %q, %v", again, err)
		}
	})
	t.Run("never listed", func(t *testing.T) {
		env := startSim(t, 1, func(o *scwsim.Options) { o.ReadyIPs = scwsim.ReadyIPsNever },
			func(c *Config) { c.SettleWait = 200 * time.Millisecond })
		env.clock.sleep.Store(true)
		srv, _, err := env.client.CreateServer(context.Background(), env.createReq("ip-never"))
		if err != nil {
			t.Fatal(err)
		}
		poller := env.client.NewPoller(Tag(TagManagedBy, cluster))
		defer poller.Close()
		_, _, err = poller.WaitIPv4(context.Background(), zone, srv.ID, ready, nil)
		var na *NoAddressError
		if !errors.As(err, &na) || na.Status != baremetal.ServerStatusReady || na.Waited < 200*time.Millisecond ||
			IsRetryable(err) || Classify(err) != ClassTransient {
			t.Fatalf("want a NoAddressError after SettleWait, got %v (class %s)", err, Classify(err))
		}
		// The caller's deadline ends it too, still as a NoAddressError.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		env.client.cfg.SettleWait = time.Hour
		_, _, err = poller.IPv4(ctx, zone, srv.ID, nil)
		if !errors.As(err, &na) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("deadline while waiting for the address: %v", err)
		}
	})
}

// An API whose lists keep failing ends the wait after maxPollFailures
// rounds, with the API's error.
func TestPollerGivesUpOnALastingOutage(t *testing.T) {
	env := startSim(t, 1, nil, func(c *Config) { c.PollInterval = 20 * time.Millisecond; c.Retry.MaxAttempts = 2 })
	env.clock.sleep.Store(true)
	srv, _, err := env.client.CreateServer(context.Background(), env.createReq("outage"))
	if err != nil {
		t.Fatal(err)
	}
	poller := env.client.NewPoller(Tag(TagManagedBy, cluster))
	defer poller.Close()
	down := env.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Method: "GET", Path: `/servers$`, Status: 502})
	_, err = poller.WaitFor(context.Background(), zone, srv.ID, StatusIs(baremetal.ServerStatusStopped))
	if Classify(err) != ClassServerError || !strings.Contains(err.Error(), "consecutive polls failed") {
		t.Fatalf("want the API's 502 after consecutive failed polls, got %v", err)
	}
	if hits := env.sim.FaultHits(down); hits != maxPollFailures*2 {
		t.Fatalf("%d failed requests, want %d polls x 2 attempts", hits, maxPollFailures)
	}
}

// Recorded: attach accepted while the option enables. A stricter API's 412
// is retried while the option enables, within SettleWait.
func TestAttachPrivateNetworks(t *testing.T) {
	const pn = "5a1b5a5e-1111-4111-8111-aaaaaaaaaaaa"
	for _, c := range []struct {
		mode    scwsim.AttachMode
		enable  time.Duration
		settle  time.Duration
		wantErr string
	}{
		{scwsim.AttachWhileEnabling, time.Hour, time.Minute, ""},
		{scwsim.AttachOnceEnabled, 300 * time.Millisecond, time.Minute, ""},
		{scwsim.AttachOnceEnabled, time.Hour, 200 * time.Millisecond, "still refused"},
	} {
		t.Run(string(c.mode)+"/"+c.enable.String(), func(t *testing.T) {
			env := startSim(t, 1, func(o *scwsim.Options) { o.PrivateNetworkAttach, o.Delays.OptionEnable = c.mode, c.enable },
				func(cfg *Config) { cfg.SettleWait = c.settle; cfg.PollInterval = 20 * time.Millisecond })
			env.clock.sleep.Store(true)
			srv, _, err := env.client.CreateServer(context.Background(), env.createReq("pn"))
			if err != nil {
				t.Fatal(err)
			}
			poller := env.client.NewPoller(Tag(TagManagedBy, cluster))
			defer poller.Close()
			if _, err := poller.WaitFor(context.Background(), zone, srv.ID, StatusIs(baremetal.ServerStatusReady)); err != nil {
				t.Fatal(err)
			}
			err = env.client.AttachPrivateNetworks(context.Background(), zone, srv.ID, []string{pn})
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !IsPrecondition(err) {
					t.Fatalf("want %q, got %v", c.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			list, err := env.client.ListServerPrivateNetworks(context.Background(), zone, srv.ID)
			if err != nil || len(list) != 1 || list[0].PrivateNetworkID != pn || list[0].Status == baremetalv3.ServerPrivateNetworkStatusError {
				t.Fatalf("attachments: %v %+v", err, list)
			}
			// Idempotent: again attaches nothing more.
			if err := env.client.AttachPrivateNetworks(context.Background(), zone, srv.ID, []string{pn}); err != nil {
				t.Fatal(err)
			}
			if n := env.count(t, "POST", `/private-networks$`); n < 1 || c.mode == scwsim.AttachWhileEnabling && n != 1 {
				t.Fatalf("%d attach requests", n)
			}
		})
	}
}
