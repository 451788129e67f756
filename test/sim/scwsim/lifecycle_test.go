package scwsim

import (
	"context"
	"errors"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

// The recorded sequence of action-basic.cassette.yaml, with install: null as
// the provider orders: delivering -> ready, stop, start, reboot, delete -> 404.
func TestServerLifecycleFollowsRecordedSequence(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.ReadyIPs = ReadyIPsAtReady })
	srv := e.create(t, offerB112, "karpenter.sh/nodeclaim=a")
	if srv.Status != baremetal.ServerStatusDelivering || srv.Install != nil || len(srv.IPs) != 0 || srv.Domain != "" {
		t.Fatalf("create answer: status %s install %v ips %v domain %q; want delivering, no install, no ips, no domain",
			srv.Status, srv.Install, srv.IPs, srv.Domain)
	}
	if srv.BootType != baremetal.ServerBootTypeNormal || srv.PingStatus != baremetal.ServerPingStatusPingStatusUnknown {
		t.Fatalf("create answer: boot %s ping %s", srv.BootType, srv.PingStatus)
	}
	ready := e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
	if len(ready.IPs) != 2 || ready.IPs[0].Version != baremetal.IPVersionIPv4 || ready.IPs[1].Version != baremetal.IPVersionIPv6 {
		t.Fatalf("ready ips: %+v", ready.IPs)
	}
	m, ok := e.sim.Server(srv.ID)
	if !ok || ready.IPs[0].Address.String() != m.Machine.IPv4 || ready.IPs[1].Address.String() != m.Machine.IPv6 {
		t.Fatalf("ips %v %v do not match machine %+v", ready.IPs[0].Address, ready.IPs[1].Address, m.Machine)
	}
	if !strings.HasPrefix(m.Machine.IPv4, "127.10.") {
		t.Fatalf("ready: ipv4 %s", m.Machine.IPv4)
	}
	settled := e.waitFor(t, srv.ID, func(s *baremetal.Server) bool { return s.Domain != "" })
	if settled.Domain != srv.ID+".fr-par-2.baremetal.scw.cloud" || settled.IPs[0].Reverse != settled.Domain ||
		settled.IPs[0].ReverseStatus != baremetal.IPReverseStatusActive || settled.PingStatus != baremetal.ServerPingStatusPingStatusUp {
		t.Fatalf("settled: %+v", settled)
	}
	ev := e.host.waitEvents(t, srv.ID, 1)
	if ev[0].Kind != "boot" || ev[0].Mode != BootNormal || len(ev[0].Keys) != 0 || ev[0].Machine.Offer.Name != offerB112 {
		t.Fatalf("first host event: %+v", ev[0])
	}

	stopped, err := e.bm.StopServer(&baremetal.StopServerRequest{ServerID: srv.ID})
	if err != nil || stopped.Status != baremetal.ServerStatusStopping {
		t.Fatalf("StopServer: %v, status %v", err, stopped)
	}
	// Recorded: a stopped server's ping status stays up.
	if s := e.waitStatus(t, srv.ID, baremetal.ServerStatusStopped); s.PingStatus != baremetal.ServerPingStatusPingStatusUp {
		t.Fatalf("stopped ping: %s", s.PingStatus)
	}
	started, err := e.bm.StartServer(&baremetal.StartServerRequest{ServerID: srv.ID}) // boot_type unknown_boot_type, as recorded
	if err != nil || started.Status != baremetal.ServerStatusStarting || started.BootType != baremetal.ServerBootTypeNormal {
		t.Fatalf("StartServer: %v %+v", err, started)
	}
	e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
	rebooted, err := e.bm.RebootServer(&baremetal.RebootServerRequest{ServerID: srv.ID, BootType: baremetal.ServerBootTypeNormal})
	if err != nil || rebooted.Status != baremetal.ServerStatusStopping {
		t.Fatalf("RebootServer: %v %+v", err, rebooted)
	}
	e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
	e.host.waitEvents(t, srv.ID, 5)
	deleted, err := e.bm.DeleteServer(&baremetal.DeleteServerRequest{ServerID: srv.ID})
	if err != nil || deleted.Status != baremetal.ServerStatusDeleting {
		t.Fatalf("DeleteServer: %v %+v", err, deleted)
	}
	re := e.waitGone(t, srv.ID)
	if re.StatusCode != http.StatusNotFound || re.Message != "Not Found" || re.Type != "" {
		t.Fatalf("after delete: %+v, want untyped 404 Not Found", re)
	}
	equalStrings(t, "history", e.sim.History(srv.ID), []string{"delivering", "ready", "stopping", "stopped",
		"starting", "ready", "stopping", "starting", "ready", "deleting", "gone"})
	e.host.waitEvents(t, srv.ID, 7)
	equalStrings(t, "host calls", e.host.kinds(srv.ID), []string{"boot:normal", "poweroff", "boot:normal",
		"poweroff", "boot:normal", "poweroff", "delete"})
	if _, ok := e.sim.Server(srv.ID); ok {
		t.Fatal("Sim.Server still knows a gone server")
	}
}

func TestOrderedPhaseAndInstall(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Delays.Order = 10 * time.Millisecond })
	srv := e.create(t, offerB112)
	if srv.Status != baremetal.ServerStatusOrdered {
		t.Fatalf("create with Delays.Order: status %s, want ordered", srv.Status)
	}
	e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
	equalStrings(t, "history", e.sim.History(srv.ID), []string{"ordered", "delivering", "ready"})

	// An install (not what the provider sends) is reported like the recording.
	osID := "96e5f0f2-d216-4de2-8a15-68730d877885"
	srv2, err := e.bm.CreateServer(&baremetal.CreateServerRequest{OfferID: e.offerID(t, "EM-I215E-NVME"), Name: "inst",
		Install: &baremetal.CreateServerRequestInstall{OsID: osID, Hostname: "h"}})
	if err != nil || srv2.Status != baremetal.ServerStatusOrdered || srv2.Install == nil ||
		srv2.Install.Status != baremetal.ServerInstallStatusToInstall {
		t.Fatalf("create with install: %v %+v", err, srv2)
	}
	e.host.waitEvents(t, srv2.ID, 1)
	got, err := e.bm.GetServer(&baremetal.GetServerRequest{ServerID: srv2.ID})
	if err != nil || got.Install.Status != baremetal.ServerInstallStatusCompleted {
		t.Fatalf("after install boot: %v %+v", err, got.Install)
	}
	_, err = e.bm.CreateServer(&baremetal.CreateServerRequest{OfferID: e.offerID(t, "EM-I215E-NVME"), Name: "x",
		Install: &baremetal.CreateServerRequestInstall{OsID: "00000000-0000-4000-8000-000000000001"}})
	if nf := mustAs[*scw.ResourceNotFoundError](t, err); nf.Resource != "os" {
		t.Fatalf("unknown os: %+v", nf)
	}
}

func TestRebootWhileDeliveringIsRefusedAsRecorded(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Delays.Delivery = time.Hour })
	srv := e.create(t, offerB112)
	for name, call := range map[string]func() error{
		"reboot": func() error {
			_, err := e.bm.RebootServer(&baremetal.RebootServerRequest{ServerID: srv.ID})
			return err
		},
		"stop": func() error { _, err := e.bm.StopServer(&baremetal.StopServerRequest{ServerID: srv.ID}); return err },
		"start": func() error {
			_, err := e.bm.StartServer(&baremetal.StartServerRequest{ServerID: srv.ID})
			return err
		},
	} {
		re := mustAs[*scw.ResponseError](t, call())
		if re.StatusCode != http.StatusBadRequest || re.Message != "Server is not delivered" {
			t.Fatalf("%s while delivering: %+v", name, re)
		}
	}
	if h := e.sim.History(srv.ID); len(h) != 1 || h[0] != "delivering" {
		t.Fatalf("refused actions changed the server: %v", h)
	}
}

func TestTransientStateErrors(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Delays.RebootStop, o.Delays.Delete = time.Hour, time.Hour })
	srv := e.create(t, offerB112)
	e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
	if _, err := e.bm.RebootServer(&baremetal.RebootServerRequest{ServerID: srv.ID}); err != nil {
		t.Fatal(err)
	}
	_, err := e.bm.RebootServer(&baremetal.RebootServerRequest{ServerID: srv.ID})
	ts := mustAs[*scw.TransientStateError](t, err)
	if ts.CurrentState != "stopping" || ts.ResourceID != srv.ID || ts.Resource != "baremetal_server" {
		t.Fatalf("transient: %+v", ts)
	}
	// Delete wins over a pending reboot; a second delete is transient.
	if _, err := e.bm.DeleteServer(&baremetal.DeleteServerRequest{ServerID: srv.ID}); err != nil {
		t.Fatal(err)
	}
	_, err = e.bm.DeleteServer(&baremetal.DeleteServerRequest{ServerID: srv.ID})
	if ts := mustAs[*scw.TransientStateError](t, err); ts.CurrentState != "deleting" {
		t.Fatalf("second delete: %+v", ts)
	}
}

func TestStateRefusalsAndProtection(t *testing.T) {
	e := newEnv(t, nil)
	srv := e.create(t, offerB112)
	e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
	_, err := e.bm.StartServer(&baremetal.StartServerRequest{ServerID: srv.ID})
	if re := mustAs[*scw.ResponseError](t, err); re.StatusCode != 400 {
		t.Fatalf("start while ready: %+v", re)
	}
	_, err = e.bm.RebootServer(&baremetal.RebootServerRequest{ServerID: srv.ID, BootType: "bogus"})
	if ia := mustAs[*scw.InvalidArgumentsError](t, err); ia.Details[0].ArgumentName != "boot_type" {
		t.Fatalf("bad boot type: %+v", ia)
	}
	if _, err := e.bm.StopServer(&baremetal.StopServerRequest{ServerID: srv.ID}); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, srv.ID, baremetal.ServerStatusStopped)
	for _, err := range []error{
		func() error { _, err := e.bm.StopServer(&baremetal.StopServerRequest{ServerID: srv.ID}); return err }(),
		func() error {
			_, err := e.bm.RebootServer(&baremetal.RebootServerRequest{ServerID: srv.ID})
			return err
		}(),
	} {
		if re := mustAs[*scw.ResponseError](t, err); re.StatusCode != 400 {
			t.Fatalf("action on stopped server: %+v", re)
		}
	}
	protected := true
	if _, err := e.bm.UpdateServer(&baremetal.UpdateServerRequest{ServerID: srv.ID, Protected: &protected}); err != nil {
		t.Fatal(err)
	}
	_, err = e.bm.DeleteServer(&baremetal.DeleteServerRequest{ServerID: srv.ID})
	if re := mustAs[*scw.ResponseError](t, err); re.StatusCode != 400 || !strings.Contains(re.Message, "protected") {
		t.Fatalf("delete protected: %+v", re)
	}
}

func TestUpdateServer(t *testing.T) {
	e := newEnv(t, nil)
	srv := e.create(t, offerB112, "a=1")
	name, desc, tags := "renamed", "updated-description", []string{"a=1", "karpenter-scaleway-em/phase=rescue"}
	got, err := e.bm.UpdateServer(&baremetal.UpdateServerRequest{ServerID: srv.ID, Name: &name, Description: &desc, Tags: &tags})
	if err != nil || got.Name != name || got.Description != desc || strings.Join(got.Tags, ",") != strings.Join(tags, ",") {
		t.Fatalf("UpdateServer: %v %+v", err, got)
	}
	if !got.UpdatedAt.After(*srv.UpdatedAt) && !got.UpdatedAt.Equal(*srv.UpdatedAt) {
		t.Fatalf("updated_at went back: %v < %v", got.UpdatedAt, srv.UpdatedAt)
	}
	empty := ""
	_, err = e.bm.UpdateServer(&baremetal.UpdateServerRequest{ServerID: srv.ID, Name: &empty})
	if ia := mustAs[*scw.InvalidArgumentsError](t, err); ia.Details[0].ArgumentName != "name" {
		t.Fatalf("empty name: %+v", ia)
	}
}

func TestUnknownServerIsTypedNotFound(t *testing.T) {
	e := newEnv(t, nil)
	id := "b3ba839a-dcf2-4b0a-ac81-fc32370052a0"
	_, err := e.bm.GetServer(&baremetal.GetServerRequest{ServerID: id})
	nf := mustAs[*scw.ResourceNotFoundError](t, err)
	if nf.Resource != "baremetal_server" || nf.ResourceID != id {
		t.Fatalf("not found: %+v", nf)
	}
	// A server of another zone is not found in this one.
	srv := e.create(t, offerB112)
	_, err = e.bm.GetServer(&baremetal.GetServerRequest{Zone: scw.ZoneFrPar1, ServerID: srv.ID})
	mustAs[*scw.ResourceNotFoundError](t, err)
	// An unsimulated zone answers 404.
	_, err = e.bm.GetServer(&baremetal.GetServerRequest{Zone: scw.ZonePlWaw3, ServerID: srv.ID})
	if re := mustAs[*scw.ResponseError](t, err); re.StatusCode != 404 {
		t.Fatalf("unknown zone: %+v", re)
	}
}

func TestRescueBootPassesKeyLines(t *testing.T) {
	e := newEnv(t, nil)
	key := newSSHKey(t, e, "controller")
	srv := e.create(t, offerB112)
	e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
	e.host.waitEvents(t, srv.ID, 1)

	_, err := e.bm.RebootServer(&baremetal.RebootServerRequest{ServerID: srv.ID, BootType: baremetal.ServerBootTypeRescue,
		SSHKeyIDs: []string{"00000000-0000-4000-8000-00000000abcd"}})
	if nf := mustAs[*scw.ResourceNotFoundError](t, err); nf.Resource != "ssh_key" {
		t.Fatalf("unknown key: %+v", nf)
	}
	got, err := e.bm.RebootServer(&baremetal.RebootServerRequest{ServerID: srv.ID, BootType: baremetal.ServerBootTypeRescue,
		SSHKeyIDs: []string{key.ID}})
	if err != nil || got.Status != baremetal.ServerStatusStopping || got.BootType != baremetal.ServerBootTypeRescue {
		t.Fatalf("rescue reboot: %v %+v", err, got)
	}
	ready := e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
	if ready.BootType != baremetal.ServerBootTypeRescue || ready.RescueServer == nil || ready.RescueServer.User != "rescue" {
		t.Fatalf("rescue ready: boot %s rescue %+v", ready.BootType, ready.RescueServer)
	}
	ev := e.host.waitEvents(t, srv.ID, 3)
	if ev[1].Kind != "poweroff" || ev[2].Mode != BootRescue || len(ev[2].Keys) != 1 || ev[2].Keys[0] != key.PublicKey {
		t.Fatalf("host events: %+v", ev)
	}
	if ev[2].Machine.IPv4 != ev[0].Machine.IPv4 || len(ev[2].Machine.MACs) != 2 {
		t.Fatalf("machine changed across boots: %+v vs %+v", ev[2].Machine, ev[0].Machine)
	}
	if _, err := e.bm.RebootServer(&baremetal.RebootServerRequest{ServerID: srv.ID, BootType: baremetal.ServerBootTypeNormal}); err != nil {
		t.Fatal(err)
	}
	back := e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
	if back.BootType != baremetal.ServerBootTypeNormal || back.RescueServer != nil {
		t.Fatalf("back to normal: boot %s rescue %+v", back.BootType, back.RescueServer)
	}
	if ev := e.host.waitEvents(t, srv.ID, 5); ev[4].Mode != BootNormal || len(ev[4].Keys) != 0 {
		t.Fatalf("normal boot after rescue: %+v", ev[4])
	}
}

func TestHostBootFailurePutsServerInError(t *testing.T) {
	e := newEnv(t, nil)
	e.host.bootErr = errors.New("disk on fire")
	srv := e.create(t, offerB112)
	e.waitStatus(t, srv.ID, baremetal.ServerStatusError)
	e.host.mu.Lock()
	e.host.bootErr = nil
	e.host.mu.Unlock()
	// A reboot is how an operator recovers a server in error.
	if _, err := e.bm.RebootServer(&baremetal.RebootServerRequest{ServerID: srv.ID}); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
}

func TestMachinesAreUniqueAcrossLifetime(t *testing.T) {
	e := newEnv(t, nil)
	a := e.create(t, offerB112)
	ma, _ := e.sim.Server(a.ID)
	if _, err := e.bm.DeleteServer(&baremetal.DeleteServerRequest{ServerID: a.ID}); err != nil {
		t.Fatal(err)
	}
	e.waitGone(t, a.ID)
	// Acting on a gone server: the untyped 404.
	_, err := e.bm.RebootServer(&baremetal.RebootServerRequest{ServerID: a.ID})
	if re := mustAs[*scw.ResponseError](t, err); re.StatusCode != 404 || re.Type != "" {
		t.Fatalf("reboot gone: %+v", re)
	}
	b := e.create(t, offerB112)
	mb, _ := e.sim.Server(b.ID)
	if ma.Machine.IPv4 == mb.Machine.IPv4 || ma.Machine.MACs[0] == mb.Machine.MACs[0] || ma.Machine.IPv6 == mb.Machine.IPv6 {
		t.Fatalf("addresses reused: %+v / %+v", ma.Machine, mb.Machine)
	}
	for _, m := range []Machine{ma.Machine, mb.Machine} {
		if ip := net.ParseIP(m.IPv4); ip == nil || !ip.IsLoopback() {
			t.Fatalf("ipv4 %q is not loopback", m.IPv4)
		}
		if ip := net.ParseIP(m.IPv6); ip == nil || ip.To4() != nil {
			t.Fatalf("ipv6 %q", m.IPv6)
		}
		if hw, err := net.ParseMAC(m.MACs[0]); err != nil || hw[0] != 0xb4 {
			t.Fatalf("mac %q: %v", m.MACs[0], err)
		}
	}
}

func TestStartListensAndCloseIsIdempotent(t *testing.T) {
	opts, _ := Profile(ProfileTest)
	sim := New(opts)
	url, err := sim.Start()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sim.Start(); err == nil {
		t.Fatal("second Start succeeded")
	}
	api := baremetal.NewAPI(newClient(t, url, sim.SecretKey()))
	if _, err := api.ListOffers(&baremetal.ListOffersRequest{}); err != nil {
		t.Fatal(err)
	}
	sim.Close()
	sim.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := api.ListOffers(&baremetal.ListOffersRequest{}, scw.WithContext(ctx)); err == nil {
		t.Fatal("served after Close")
	}
}

func TestRequestsAfterCloseAreRefused(t *testing.T) {
	e := newEnv(t, nil)
	e.sim.Close()
	_, err := e.bm.ListOffers(&baremetal.ListOffersRequest{})
	if re := mustAs[*scw.ResponseError](t, err); re.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("after Close: %+v", re)
	}
}

func TestMalformedBodyIsRefused(t *testing.T) {
	e := newEnv(t, nil)
	resp := e.send(t, "POST", "/baremetal/v1/zones/fr-par-2/servers", strings.NewReader("{not json"))
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if len(e.sim.Servers()) != 0 {
		t.Fatal("a malformed create made a server")
	}
	// Unknown paths answer a JSON 404 too.
	st, body := e.raw(t, "GET", "/baremetal/v1/zones/fr-par-2/nothing-here", nil)
	if st != 404 || body.(map[string]any)["message"] != "Not Found" {
		t.Fatalf("unknown path: %d %v", st, body)
	}
}

// As recorded, a delivery's reverse DNS, domain and ping settle after
// "ready": first reads show reverse_status unknown, domain "" and ping
// unknown; IPs of an order seen "ordered" are listed before delivery.
func TestDeliverySettlesAfterReady(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.ReadyIPs = ReadyIPsRecorded
		o.Delays.Order = 50 * time.Millisecond
		o.Delays.Settle = time.Hour
	})
	hold := e.sim.MustInject(Fault{Kind: FaultStuck, Tag: "settle", State: "ordered"})
	srv := e.create(t, offerB112, "settle")
	if srv.Status != baremetal.ServerStatusOrdered || len(srv.IPs) != 0 {
		t.Fatalf("create answer: %s with %d ips, want ordered without ips", srv.Status, len(srv.IPs))
	}
	ordered := e.waitStatus(t, srv.ID, baremetal.ServerStatusOrdered)
	if len(ordered.IPs) != 2 || ordered.Domain != "" || ordered.IPs[0].Reverse != "" || ordered.IPs[0].ReverseStatus != baremetal.IPReverseStatusUnknown {
		t.Fatalf("ordered server: %+v, want its IPs without reverse", ordered)
	}
	e.sim.RemoveFault(hold)
	ready := e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
	if len(ready.IPs) != 2 || ready.Domain != "" || ready.IPs[1].ReverseStatus != baremetal.IPReverseStatusUnknown ||
		ready.PingStatus != baremetal.ServerPingStatusPingStatusUnknown {
		t.Fatalf("just ready: %+v", ready)
	}
}

// ReadyIPsLate: "ready" with ips: [] and domain "" (as recorded for 2 of 11
// orders), the IPs appearing Delays.IPsAfterReady later.
func TestReadyWithoutIPs(t *testing.T) {
	for _, c := range []struct {
		mode  ReadyIPsMode
		after time.Duration
	}{{ReadyIPsLate, time.Hour}, {ReadyIPsLate, time.Millisecond}, {ReadyIPsNever, time.Millisecond}} {
		e := newEnv(t, func(o *Options) { o.ReadyIPs, o.Delays.IPsAfterReady = c.mode, c.after })
		srv := e.create(t, offerB112)
		if ready := e.waitStatus(t, srv.ID, baremetal.ServerStatusReady); c.after == time.Hour && (len(ready.IPs) != 0 || ready.Domain != "") {
			t.Fatalf("%s: ready with %d ips, domain %q; want none", c.mode, len(ready.IPs), ready.Domain)
		}
		if c.mode == ReadyIPsLate && c.after < time.Hour {
			e.waitFor(t, srv.ID, func(s *baremetal.Server) bool { return len(s.IPs) == 2 })
		}
		if c.mode == ReadyIPsNever {
			time.Sleep(20 * time.Millisecond) // many times IPsAfterReady: nothing may show
			if s, _ := e.bm.GetServer(&baremetal.GetServerRequest{ServerID: srv.ID}); len(s.IPs) != 0 {
				t.Fatalf("ReadyIPsNever listed %v", s.IPs)
			}
		}
	}
}

// Like the real API, each rescue boot shows its own credentials in
// rescue_server: the user (shared "rescue", or the server's em-XXXXX) and a
// password new at every rescue boot, which the host is told as well.
func TestRescueLoginIsShownPerRescueBoot(t *testing.T) {
	for _, mode := range []RescueUserMode{RescueUserShared, RescueUserPerServer} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t, func(o *Options) { o.RescueUser = mode })
			key := newSSHKey(t, e, "controller")
			srv := e.create(t, offerB112)
			e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
			var seen []baremetal.ServerRescueServer
			for boot := range 2 {
				if _, err := e.bm.RebootServer(&baremetal.RebootServerRequest{ServerID: srv.ID, BootType: baremetal.ServerBootTypeRescue,
					SSHKeyIDs: []string{key.ID}}); err != nil {
					t.Fatal(err)
				}
				ready := e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
				if ready.RescueServer == nil || ready.RescueServer.Password == "" {
					t.Fatalf("rescue boot %d shows %+v, want a user and a password", boot, ready.RescueServer)
				}
				seen = append(seen, *ready.RescueServer)
				ev := e.host.waitEvents(t, srv.ID, 3+2*boot)
				if m := ev[len(ev)-1].Machine; m.RescueUser != ready.RescueServer.User || m.RescuePassword != ready.RescueServer.Password {
					t.Errorf("the host was told %q, the API shows %q", m.RescueUser, ready.RescueServer.User)
				}
			}
			want := regexp.MustCompile(`^rescue$`)
			if mode == RescueUserPerServer {
				want = regexp.MustCompile(`^em-[a-z0-9]{5}$`)
			}
			if !want.MatchString(seen[0].User) || seen[1].User != seen[0].User {
				t.Errorf("rescue users %q, %q: want one user matching %s", seen[0].User, seen[1].User, want)
			}
			if seen[0].Password == seen[1].Password {
				t.Error("two rescue boots show the same password, want a new one per boot")
			}
			if pws := e.sim.RescuePasswords(); !slices.Contains(pws, seen[0].Password) || !slices.Contains(pws, seen[1].Password) {
				t.Errorf("RescuePasswords does not list the boots' passwords")
			}
		})
	}
}
