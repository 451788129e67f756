package scwsim

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

const (
	testZone   = scw.ZoneFrPar2
	offerB112  = "EM-B112X-SSD"
	offerEmpty = "EM-L420E-NVME" // recorded with stock "empty"
	accessKey  = "SCWXXXXXXXXXXXXXXXXX"
)

// hostEvent is one call the simulator made on the Host.
type hostEvent struct {
	Kind     string // boot, poweroff, delete
	ServerID string
	Mode     BootMode
	Keys     []string
	Machine  Machine
}

func (e hostEvent) String() string {
	if e.Kind == "boot" {
		return "boot:" + string(e.Mode)
	}
	return e.Kind
}

// recordingHost records Host calls; bootErr, when set, fails boots.
type recordingHost struct {
	mu      sync.Mutex
	events  []hostEvent
	bootErr error
	notify  chan struct{}
}

func newRecordingHost() *recordingHost { return &recordingHost{notify: make(chan struct{}, 1024)} }

func (h *recordingHost) add(e hostEvent) {
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
	select {
	case h.notify <- struct{}{}:
	default:
	}
}

func (h *recordingHost) Boot(_ context.Context, m Machine, mode BootMode, keys []string) error {
	h.add(hostEvent{Kind: "boot", ServerID: m.ID, Mode: mode, Keys: keys, Machine: m})
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.bootErr
}
func (h *recordingHost) PowerOff(id string) { h.add(hostEvent{Kind: "poweroff", ServerID: id}) }
func (h *recordingHost) Delete(id string)   { h.add(hostEvent{Kind: "delete", ServerID: id}) }

func (h *recordingHost) of(id string) []hostEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []hostEvent
	for _, e := range h.events {
		if e.ServerID == id {
			out = append(out, e)
		}
	}
	return out
}

func (h *recordingHost) kinds(id string) []string {
	var out []string
	for _, e := range h.of(id) {
		out = append(out, e.String())
	}
	return out
}

// waitEvents waits until the server has n host events.
func (h *recordingHost) waitEvents(t *testing.T, id string, n int) []hostEvent {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		if ev := h.of(id); len(ev) >= n {
			return ev
		}
		select {
		case <-h.notify:
		case <-time.After(5 * time.Millisecond):
		case <-deadline:
			t.Fatalf("server %s: waited for %d host events, have %v", id, n, h.kinds(id))
		}
	}
}

type env struct {
	sim  *Sim
	host *recordingHost
	url  string
	cli  *scw.Client
	bm   *baremetal.API
}

// newEnv starts a simulator (test profile) behind httptest and a real SDK client.
func newEnv(t *testing.T, mutate func(*Options)) *env {
	t.Helper()
	opts, err := Profile(ProfileTest)
	if err != nil {
		t.Fatal(err)
	}
	host := newRecordingHost()
	opts.Host = host
	opts.Logf = t.Logf
	if mutate != nil {
		mutate(&opts)
	}
	sim := New(opts)
	ts := httptest.NewServer(sim.Handler())
	t.Cleanup(ts.Close)
	t.Cleanup(sim.Close) // runs first: releases hung requests
	cli := newClient(t, ts.URL, sim.SecretKey())
	return &env{sim: sim, host: host, url: ts.URL, cli: cli, bm: baremetal.NewAPI(cli)}
}

func newClient(t *testing.T, url, secret string, extra ...scw.ClientOption) *scw.Client {
	t.Helper()
	cli, err := scw.NewClient(append([]scw.ClientOption{scw.WithAPIURL(url), scw.WithAuth(accessKey, secret),
		scw.WithDefaultZone(testZone), scw.WithDefaultProjectID(zeroID)}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

func (e *env) offerID(t *testing.T, name string) string {
	t.Helper()
	id, ok := e.sim.OfferID(string(testZone), name, "hourly")
	if !ok {
		t.Fatalf("no hourly offer %s", name)
	}
	return id
}

func (e *env) create(t *testing.T, offerName string, tags ...string) *baremetal.Server {
	t.Helper()
	srv, err := e.bm.CreateServer(&baremetal.CreateServerRequest{OfferID: e.offerID(t, offerName),
		Name: "node-" + fmt.Sprint(len(e.sim.Servers())), Tags: tags})
	if err != nil {
		t.Fatalf("CreateServer: %v", err)
	}
	return srv
}

// waitStatus polls GetServer (as a client would) until the status is want.
func (e *env) waitStatus(t *testing.T, id string, want baremetal.ServerStatus) *baremetal.Server {
	t.Helper()
	return e.waitFor(t, id, func(s *baremetal.Server) bool { return s.Status == want })
}

// waitFor polls GetServer until ok says the server is as wanted.
func (e *env) waitFor(t *testing.T, id string, ok func(*baremetal.Server) bool) *baremetal.Server {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last *baremetal.Server
	for time.Now().Before(deadline) {
		srv, err := e.bm.GetServer(&baremetal.GetServerRequest{ServerID: id})
		if err != nil {
			t.Fatalf("GetServer %s: %v", id, err)
		}
		if ok(srv) {
			return srv
		}
		last = srv
		time.Sleep(3 * time.Millisecond)
	}
	t.Fatalf("server %s never got as wanted; last %+v (history %v)", id, last, e.sim.History(id))
	return nil
}

// waitGone polls GetServer until the recorded untyped 404.
func (e *env) waitGone(t *testing.T, id string) *scw.ResponseError {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		_, err := e.bm.GetServer(&baremetal.GetServerRequest{ServerID: id})
		if err != nil {
			var re *scw.ResponseError
			if !errors.As(err, &re) {
				t.Fatalf("GetServer after delete: %T %v, want *scw.ResponseError", err, err)
			}
			return re
		}
		time.Sleep(3 * time.Millisecond)
	}
	t.Fatalf("server %s never went away (history %v)", id, e.sim.History(id))
	return nil
}

func mustAs[T error](t *testing.T, err error) T {
	t.Helper()
	var target T
	if err == nil {
		t.Fatalf("got no error, want %T", target)
	}
	if !errors.As(err, &target) {
		t.Fatalf("got %T (%v), want %T", err, err, target)
	}
	return target
}

func equalStrings(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}
