package scwsim

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

func TestFault5xxOnNextRequests(t *testing.T) {
	e := newEnv(t, nil)
	srv := e.create(t, offerB112)
	id := e.sim.MustInject(Fault{Kind: FaultStatus, Method: "GET", Path: `/servers/[^/]+$`, Status: 503, Times: 2})
	for i := 0; i < 2; i++ {
		_, err := e.bm.GetServer(&baremetal.GetServerRequest{ServerID: srv.ID})
		if re := mustAs[*scw.ResponseError](t, err); re.StatusCode != 503 {
			t.Fatalf("attempt %d: %+v", i, re)
		}
	}
	if _, err := e.bm.GetServer(&baremetal.GetServerRequest{ServerID: srv.ID}); err != nil {
		t.Fatalf("third GET after Times 2: %v", err)
	}
	// Other paths were never affected.
	if _, err := e.bm.ListServers(&baremetal.ListServersRequest{}); err != nil {
		t.Fatal(err)
	}
	if hits := e.sim.FaultHits(id); hits != 2 {
		t.Fatalf("hits %d", hits)
	}
	var faulted int
	for _, c := range e.sim.Calls() {
		if c.Fault == FaultStatus {
			faulted++
			if c.Status != 503 {
				t.Fatalf("faulted call recorded with %d", c.Status)
			}
		}
	}
	if faulted != 2 {
		t.Fatalf("faulted calls recorded: %d", faulted)
	}
	// A non-JSON 502 from a proxy still decodes as a ResponseError.
	e.sim.MustInject(Fault{Kind: FaultStatus, Method: "POST", Path: `/servers$`, Status: 502, Body: "<html>bad gateway</html>",
		ContentType: "text/html", Times: 1})
	_, err := e.bm.CreateServer(&baremetal.CreateServerRequest{OfferID: e.offerID(t, offerB112), Name: "x",
		Tags: []string{"karpenter.sh/nodeclaim=x"}})
	if re := mustAs[*scw.ResponseError](t, err); re.StatusCode != 502 {
		t.Fatalf("502: %+v", re)
	}
	if c := e.sim.CreatesByTag("karpenter.sh/nodeclaim"); c["x"] != 0 {
		t.Fatalf("faulted create counted: %v", c)
	}
}

// The recorded 429 of Scaleway's gateway: no body, no Content-Type, no
// Retry-After, only X-Envoy-Ratelimited.
func TestFaultRateLimitIsBareByDefault(t *testing.T) {
	e := newEnv(t, nil)
	e.sim.MustInject(Fault{Kind: FaultRateLimit, Path: `/offers`, RetryAfter: 1500 * time.Millisecond, Times: 2})
	_, err := e.bm.ListOffers(&baremetal.ListOffersRequest{})
	if re := mustAs[*scw.ResponseError](t, err); re.StatusCode != http.StatusTooManyRequests || len(re.RawBody) != 0 {
		t.Fatalf("429: %+v", re)
	}
	resp := e.send(t, "GET", "/baremetal/v1/zones/fr-par-2/offers", nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || len(body) != 0 || resp.Header.Get("Content-Type") != "" || resp.Header.Get("Retry-After") != "" ||
		resp.Header.Get("X-Envoy-Ratelimited") != "true" {
		t.Fatalf("status %d headers %v body %q, want a bare 429", resp.StatusCode, resp.Header, body)
	}
}

func TestFaultRateLimitWithRetryAfter(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.RateLimited = RateLimitedJSON })
	e.sim.MustInject(Fault{Kind: FaultRateLimit, Path: `/offers`, RetryAfter: 1500 * time.Millisecond, Times: 2})
	_, err := e.bm.ListOffers(&baremetal.ListOffersRequest{})
	if re := mustAs[*scw.ResponseError](t, err); re.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("429: %+v", re)
	}
	resp := e.send(t, "GET", "/baremetal/v1/zones/fr-par-2/offers", nil)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "2" {
		t.Fatalf("status %d Retry-After %q, want 429 and 2", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if _, err := e.bm.ListOffers(&baremetal.ListOffersRequest{}); err != nil {
		t.Fatalf("after the fault: %v", err)
	}
}

func TestFaultTimeoutHangsUntilClientGivesUp(t *testing.T) {
	e := newEnv(t, nil)
	srv := e.create(t, offerB112)
	e.sim.MustInject(Fault{Kind: FaultTimeout, Method: "GET", Path: `/servers/`, Times: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := e.bm.GetServer(&baremetal.GetServerRequest{ServerID: srv.ID}, scw.WithContext(ctx))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want a deadline error, got %v", err)
	}
	if _, err := e.bm.GetServer(&baremetal.GetServerRequest{ServerID: srv.ID}); err != nil {
		t.Fatalf("after the timeout: %v", err)
	}
	// The hung call is recorded without a status once the client left.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var timedOut int
		for _, c := range e.sim.Calls() {
			if c.Fault == FaultTimeout && c.Status == 0 {
				timedOut++
			}
		}
		if timedOut == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed-out call not recorded: %+v", e.sim.Calls())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCloseReleasesHungRequests(t *testing.T) {
	e := newEnv(t, nil)
	id := e.sim.MustInject(Fault{Kind: FaultTimeout})
	done := make(chan error, 1)
	go func() {
		_, err := e.bm.ListOffers(&baremetal.ListOffersRequest{})
		done <- err
	}()
	for e.sim.FaultHits(id) == 0 {
		time.Sleep(2 * time.Millisecond)
	}
	e.sim.Close()
	if err := <-done; err == nil {
		t.Fatal("hung request succeeded")
	}
}

func TestFaultDelay(t *testing.T) {
	e := newEnv(t, nil)
	e.sim.MustInject(Fault{Kind: FaultDelay, Delay: 20 * time.Millisecond, Times: 1})
	if _, err := e.bm.ListOffers(&baremetal.ListOffersRequest{}); err != nil {
		t.Fatalf("delayed call failed: %v", err)
	}
	if c := e.sim.Calls(); len(c) != 1 || c[0].Fault != FaultDelay || c[0].Status != 200 {
		t.Fatalf("calls: %+v", c)
	}
}

func TestServerStuckUntilFaultRemoved(t *testing.T) {
	e := newEnv(t, nil)
	id := e.sim.MustInject(Fault{Kind: FaultStuck, Tag: "stuck=yes", State: "delivering"})
	stuck := e.create(t, offerB112, "stuck=yes")
	free := e.create(t, offerB112, "stuck=no")
	e.waitStatus(t, free.ID, baremetal.ServerStatusReady)
	// The free server, ordered after, is delivered; the stuck one is not.
	// Wait for its delivery edge to pass (the fault records its hit there).
	for e.sim.FaultHits(id) == 0 {
		time.Sleep(2 * time.Millisecond)
	}
	if s, _ := e.sim.Server(stuck.ID); s.Status != "delivering" {
		t.Fatalf("stuck server: %s", s.Status)
	}
	if got := e.host.of(stuck.ID); len(got) != 0 {
		t.Fatalf("stuck server booted: %+v", got)
	}
	e.sim.RemoveFault(id)
	e.waitStatus(t, stuck.ID, baremetal.ServerStatusReady)
	equalStrings(t, "history", e.sim.History(stuck.ID), []string{"delivering", "ready"})
}

func TestServerStuckInStoppingByID(t *testing.T) {
	e := newEnv(t, nil)
	srv := e.create(t, offerB112)
	e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
	id := e.sim.MustInject(Fault{Kind: FaultStuck, ServerID: srv.ID, State: "stopping"})
	if _, err := e.bm.RebootServer(&baremetal.RebootServerRequest{ServerID: srv.ID}); err != nil {
		t.Fatal(err)
	}
	for e.sim.FaultHits(id) == 0 {
		time.Sleep(2 * time.Millisecond)
	}
	_, err := e.bm.RebootServer(&baremetal.RebootServerRequest{ServerID: srv.ID})
	if ts := mustAs[*scw.TransientStateError](t, err); ts.CurrentState != "stopping" {
		t.Fatalf("%+v", ts)
	}
	// Deleting a stuck server still works.
	if _, err := e.bm.DeleteServer(&baremetal.DeleteServerRequest{ServerID: srv.ID}); err != nil {
		t.Fatal(err)
	}
	e.waitGone(t, srv.ID)
	e.sim.ClearFaults()
}

func TestServerGoesToError(t *testing.T) {
	e := newEnv(t, nil)
	e.sim.MustInject(Fault{Kind: FaultServerError, State: "delivering", Times: 1})
	bad := e.create(t, offerB112)
	e.waitStatus(t, bad.ID, baremetal.ServerStatusError)
	good := e.create(t, offerB112) // Times 1: the next server is fine
	e.waitStatus(t, good.ID, baremetal.ServerStatusReady)
	if ev := e.host.of(bad.ID); len(ev) != 0 {
		t.Fatalf("errored delivery booted the host: %+v", ev)
	}
	// ForceStatus breaks a running server: the host is powered off.
	e.host.waitEvents(t, good.ID, 1)
	if err := e.sim.ForceStatus(good.ID, "error"); err != nil {
		t.Fatal(err)
	}
	if ev := e.host.waitEvents(t, good.ID, 2); ev[1].Kind != "poweroff" {
		t.Fatalf("events: %+v", ev)
	}
	if err := e.sim.ForceStatus(good.ID, "bogus"); err == nil {
		t.Fatal("ForceStatus accepted a bogus status")
	}
}

func TestInvalidFaults(t *testing.T) {
	e := newEnv(t, nil)
	for _, f := range []Fault{
		{Kind: "nope"},
		{Kind: FaultStatus, Status: 200},
		{Kind: FaultStatus, Path: "("},
		{Kind: FaultDelay},
		{Kind: FaultStuck},
		{Kind: FaultStuck, State: "sleeping"},
		{Kind: FaultStuck, State: "delivering", Path: "/x"},
		{Kind: FaultStatus, ServerID: "x"},
		{Kind: FaultStatus, Times: -1},
	} {
		if _, err := e.sim.Inject(f); err == nil {
			t.Fatalf("Inject(%+v) accepted", f)
		}
	}
}

func TestRateLimitThrottlesBeyondBurst(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.RateLimit, o.RateBurst = 0.001, 2 // no refill within a test
		o.RateLimited = RateLimitedJSON
	})
	for i := 0; i < 2; i++ {
		if _, err := e.bm.ListOffers(&baremetal.ListOffersRequest{}); err != nil {
			t.Fatalf("request %d within burst: %v", i, err)
		}
	}
	_, err := e.bm.ListOffers(&baremetal.ListOffersRequest{})
	if re := mustAs[*scw.ResponseError](t, err); re.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("beyond burst: %+v", re)
	}
	resp := e.send(t, "GET", "/baremetal/v1/zones/fr-par-2/offers", nil)
	resp.Body.Close()
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 {
		t.Fatalf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
}

func TestSetHostBindsLater(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Host = nil })
	late := newRecordingHost()
	e.sim.SetHost(late)
	srv := e.create(t, offerB112)
	if ev := late.waitEvents(t, srv.ID, 1); ev[0].Mode != BootNormal {
		t.Fatalf("late host: %+v", ev)
	}
	if got := e.host.of(srv.ID); len(got) != 0 {
		t.Fatalf("replaced host still called: %+v", got)
	}
}

func TestServerErrorFaultHitsEachServerOnce(t *testing.T) {
	e := newEnv(t, nil)
	srv := e.create(t, offerB112)
	e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
	id := e.sim.MustInject(Fault{Kind: FaultServerError, ServerID: srv.ID}) // any state, every time it matches
	if _, err := e.bm.RebootServer(&baremetal.RebootServerRequest{ServerID: srv.ID}); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, srv.ID, baremetal.ServerStatusError)
	if _, err := e.bm.RebootServer(&baremetal.RebootServerRequest{ServerID: srv.ID}); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
	if hits := e.sim.FaultHits(id); hits != 1 {
		t.Fatalf("hits %d", hits)
	}
	equalStrings(t, "history", e.sim.History(srv.ID), []string{"delivering", "ready", "stopping", "error",
		"stopping", "starting", "ready"})
}

// An order the API takes but whose answer is lost: the client sees a 504, the
// server exists, and the call record counts the order.
func TestFaultAnswerLostStillActs(t *testing.T) {
	e := newEnv(t, nil)
	id := e.sim.MustInject(Fault{Kind: FaultAnswerLost, Method: "POST", Path: `/servers$`, Times: 1})
	_, err := e.bm.CreateServer(&baremetal.CreateServerRequest{OfferID: e.offerID(t, offerB112), Name: "lost",
		Tags: []string{"karpenter.sh/nodeclaim=lost"}})
	if re := mustAs[*scw.ResponseError](t, err); re.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("lost answer: %+v", re)
	}
	if e.sim.FaultHits(id) != 1 {
		t.Fatalf("hits %d", e.sim.FaultHits(id))
	}
	if n := len(e.sim.Servers()); n != 1 {
		t.Fatalf("%d servers after an order whose answer was lost, want 1", n)
	}
	if c := e.sim.CreatesByTag("karpenter.sh/nodeclaim"); c["lost"] != 1 {
		t.Fatalf("the taken order is not counted: %v", c)
	}
}

// ListLag hides a new server from listings for a while; GetServer sees it.
func TestListLagHidesNewServersFromListings(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.ListLag = 3 * time.Second })
	srv := e.create(t, offerB112)
	list, err := e.bm.ListServers(&baremetal.ListServersRequest{})
	if err != nil || len(list.Servers) != 0 {
		t.Fatalf("a server created just now is listed: %d, %v", len(list.Servers), err)
	}
	if _, err := e.bm.GetServer(&baremetal.GetServerRequest{ServerID: srv.ID}); err != nil {
		t.Fatalf("GetServer of a server not yet listed: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, err = e.bm.ListServers(&baremetal.ListServersRequest{})
		if err == nil && len(list.Servers) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server never showed in listings: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
