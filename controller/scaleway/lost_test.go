package scaleway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
)

// lostShape is one way the answer to a request the API acted on is lost.
type lostShape struct {
	name string
	// fault is a simulator fault (Method and Path are set per call); nil
	// when lose does the losing on the client's side.
	fault *scwsim.Fault
	// lose, when set, makes the transport under the client: it lets the
	// armed request through and fails the exchange its way.
	lose func() *failAfterSend
	// h2: the client speaks HTTP/2 (the simulator's unencrypted HTTP/2).
	h2 bool
}

// goAway is what net/http returns when the server sends GOAWAY and closes
// the connection while a request is out: the sim cannot send one on its
// own, so the transport plays it after the simulator acted.
const goAway = `http2: server sent GOAWAY and closed the connection; LastStreamID=1, ErrCode=NO_ERROR, debug=""`

// lostShapes are every shape of a lost answer the client must take as
// "may have been applied".
func lostShapes() []lostShape {
	f := func(k scwsim.FaultKind, body string) *scwsim.Fault { return &scwsim.Fault{Kind: k, Body: body} }
	return []lostShape{
		{name: "504 after commit", fault: f(scwsim.FaultAnswerLost, "")},
		{name: "connection reset after commit", fault: f(scwsim.FaultResetAfterCommit, "")},
		{name: "HTTP2 RST_STREAM after commit", fault: f(scwsim.FaultResetAfterCommit, ""), h2: true},
		{name: "HTTP2 GOAWAY after commit", lose: func() *failAfterSend { return &failAfterSend{err: errors.New(goAway)} }},
		{name: "timeout after commit", fault: f(scwsim.FaultTimeoutAfterCommit, "")},
		{name: "2xx cut short", fault: f(scwsim.FaultUndecodableAfterCommit, "")},
		{name: "2xx not JSON", fault: f(scwsim.FaultUndecodableAfterCommit, "<html><body>OK</body></html>")},
		{name: "2xx naming no server", fault: f(scwsim.FaultUndecodableAfterCommit, "{}")},
	}
}

// failAfterSend forwards the next request matching the armed method and
// path, lets the API act on it, drops its answer and fails the exchange
// with err.
type failAfterSend struct {
	base   http.RoundTripper
	err    error
	mu     sync.Mutex
	method string
	path   *regexp.Regexp // nil: disarmed
}

func (f *failAfterSend) arm(method, path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.method, f.path = method, regexp.MustCompile(path)
}

func (f *failAfterSend) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	hit := f.path != nil && r.Method == f.method && f.path.MatchString(r.URL.Path)
	if hit {
		f.path = nil
	}
	f.mu.Unlock()
	resp, err := f.base.RoundTrip(r)
	if err != nil || !hit {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, f.err
}

// start runs a simulator and a client for the shape; arm loses the answer
// of the next request with method and a path matching the expression.
func (s lostShape) start(t *testing.T, mutate func(*scwsim.Options), cfgMutate func(*Config)) (env *simEnv, arm func(method, path string)) {
	t.Helper()
	base := http.DefaultTransport
	if s.h2 {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
		t.Cleanup(tr.CloseIdleConnections)
		base = tr
	}
	var lose *failAfterSend
	if s.lose != nil {
		lose = s.lose()
		lose.base = base
		base = lose
	}
	env = startSim(t, 1, mutate, func(c *Config) {
		// The timeout shape ends in the attempt's timeout; keep it short.
		c.RequestTimeout = 500 * time.Millisecond
		if cfgMutate != nil {
			cfgMutate(c)
		}
	}, withBase(base))
	return env, func(method, path string) {
		if lose != nil {
			lose.arm(method, path)
			return
		}
		f := *s.fault
		f.Method, f.Path, f.Times = method, path, 1
		env.sim.MustInject(f)
	}
}

// TestSimLostOrderEveryShapeOrdersOnce: the API takes an order and its
// answer is lost, in each shape; the listing lags behind the order; the
// caller retries CreateServer as Karpenter retries Create. The simulator's
// own record counts exactly one order for the NodeClaim, and the retries
// end with that server. The first call is ambiguous (the caller must not
// try another offering as if nothing was bought).
func TestSimLostOrderEveryShapeOrdersOnce(t *testing.T) {
	for _, shape := range lostShapes() {
		t.Run(shape.name, func(t *testing.T) {
			env, arm := shape.start(t, func(o *scwsim.Options) { o.ListLag = 1500 * time.Millisecond }, nil)
			arm("POST", `/servers$`)
			ctx := context.Background()
			req := env.createReq("nc-lost")
			_, _, err := env.client.CreateServer(ctx, req)
			if err == nil || !IsAmbiguous(err) {
				t.Errorf("first CreateServer = %v (ambiguous %v), want an ambiguous error", err, IsAmbiguous(err))
			}
			var srv *baremetal.Server
			deadline := time.Now().Add(20 * time.Second)
			for srv == nil || srv.ID == "" {
				if time.Now().After(deadline) {
					t.Fatalf("the ordered server never came back from CreateServer: %v", err)
				}
				time.Sleep(50 * time.Millisecond)
				srv, _, err = env.client.CreateServer(ctx, req)
			}
			if n := env.creates(t)["nc-lost"]; n != 1 {
				t.Fatalf("the simulator took %d orders for one NodeClaim, want 1", n)
			}
			for range 3 {
				again, created, err := env.client.CreateServer(ctx, req)
				if err != nil || created || again.ID != srv.ID {
					t.Fatalf("CreateServer once the server shows: %v created=%v", err, created)
				}
			}
			if n := env.creates(t)["nc-lost"]; n != 1 {
				t.Fatalf("the simulator took %d orders for one NodeClaim, want 1", n)
			}
			if all := env.sim.Servers(); len(all) != 1 || all[0].ID != srv.ID {
				t.Fatalf("the simulator holds %d servers, want the one CreateServer returned", len(all))
			}
			if env.client.InFlightOrders() != 0 {
				t.Fatalf("%d orders still in flight once found", env.client.InFlightOrders())
			}
		})
	}
}

// TestSimLostAnswerOtherCalls: the same lost answers on the other calls that
// change state. A reboot is reported ambiguous and not sent again (the
// caller reads the server's state); adding an option, attaching a private
// network and registering an SSH key read state back and succeed without a
// second request; a tag update and a delete are retried (sending the same
// request again changes nothing) and succeed.
func TestSimLostAnswerOtherCalls(t *testing.T) {
	pnID := "44444444-4444-4444-8444-444444444444"
	for _, shape := range lostShapes() {
		if shape.fault != nil && shape.fault.Body == "{}" {
			continue // a decodable body: only CreateServer and EnsureSSHKey check what it names
		}
		t.Run(shape.name, func(t *testing.T) {
			env, arm := shape.start(t, func(o *scwsim.Options) { o.PrivateNetworkIDs = []string{pnID} }, nil)
			env.clock.sleep.Store(true)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			srv, poller, optID := env.readyServer(ctx, t, "nc-other")
			arm("POST", `/options/`)
			if _, err := env.client.AddServerOption(ctx, zone, srv.ID, optID); err != nil {
				t.Errorf("AddServerOption after a lost answer: %v", err)
			}
			if n := env.count(t, "POST", `/options/`); n != 1 {
				t.Errorf("%d option POSTs, want 1", n)
			}
			if _, err := poller.WaitFor(ctx, zone, srv.ID, func(s *baremetal.Server) (bool, error) {
				return optionStatus(s, optID) == baremetal.ServerOptionOptionStatusOptionStatusEnable, nil
			}); err != nil {
				t.Fatal(err)
			}
			arm("POST", `/private-networks$`)
			if _, err := env.client.AttachPrivateNetwork(ctx, zone, srv.ID, pnID); err != nil {
				t.Errorf("AttachPrivateNetwork after a lost answer: %v", err)
			}
			if n := env.count(t, "POST", `/private-networks$`); n != 1 {
				t.Errorf("%d attach POSTs, want 1", n)
			}
			arm("POST", `/ssh-keys$`)
			if id, err := env.client.EnsureSSHKey(ctx, "karpenter-c1", newAuthorizedKey(t, "c")); err != nil || id == "" {
				t.Errorf("EnsureSSHKey after a lost answer: %q, %v", id, err)
			}
			if n := env.count(t, "POST", `/ssh-keys$`); n != 1 {
				t.Errorf("%d key POSTs, want 1", n)
			}
			arm("PATCH", serverRE)
			if _, err := env.client.SetTag(ctx, zone, srv.ID, TagPhase, "rescue"); err != nil {
				t.Errorf("SetTag after a lost answer: %v", err)
			}
			if cur, err := env.client.GetServer(ctx, zone, srv.ID); err != nil || !HasTags(cur.Tags, Tag(TagPhase, "rescue")) {
				t.Errorf("the tag is not on the server: %v", err)
			}
			env.resetCalls(t)
			arm("POST", `/reboot$`)
			_, err := env.client.RebootServer(ctx, zone, srv.ID, baremetal.ServerBootTypeRescue, nil)
			if err == nil || !IsAmbiguous(err) {
				t.Errorf("RebootServer after a lost answer = %v (ambiguous %v), want an ambiguous error", err, IsAmbiguous(err))
			}
			if n := env.count(t, "POST", `/reboot$`); n != 1 {
				t.Errorf("%d reboot POSTs, want 1 (a reboot is not sent twice)", n)
			}
			if _, err := poller.WaitFor(ctx, zone, srv.ID, func(s *baremetal.Server) (bool, error) {
				return s.Status == baremetal.ServerStatusReady && s.BootType == baremetal.ServerBootTypeRescue, nil
			}); err != nil {
				t.Fatalf("the reboot the API took: %v", err)
			}
			arm("DELETE", serverRE)
			// Gone already (the deletion the API took has finished by the
			// retry) is the documented NotFound, which callers take as done.
			if _, err := env.client.DeleteServer(ctx, zone, srv.ID); err != nil && !IsNotFound(err) {
				t.Errorf("DeleteServer after a lost answer: %v", err)
			}
		})
	}
}

// TestSimOrderCallerGivesUpAfterSending: the caller's context is cancelled
// while the order is out (the API took it, its answer is slow): the order
// is in flight, and the retries never order a second server while the
// listing lags.
func TestSimOrderCallerGivesUpAfterSending(t *testing.T) {
	env := startSim(t, 1, func(o *scwsim.Options) { o.ListLag = 1500 * time.Millisecond }, nil)
	env.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultTimeoutAfterCommit, Method: "POST", Path: `/servers$`, Times: 1})
	req := env.createReq("nc-cancel")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		// Cancel once the API has taken the order.
		for env.sim.CreatesByTag(TagNodeClaim)["nc-cancel"] == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	_, _, err := env.client.CreateServer(ctx, req)
	cancel()
	if !errors.Is(err, context.Canceled) || !IsAmbiguous(err) || env.client.InFlightOrders() != 1 {
		t.Errorf("CreateServer cancelled after sending = %v (ambiguous %v, %d in flight), want an ambiguous cancellation with the order in flight",
			err, IsAmbiguous(err), env.client.InFlightOrders())
	}
	var srv *baremetal.Server
	deadline := time.Now().Add(20 * time.Second)
	for srv == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the ordered server never came back from CreateServer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
		srv, _, err = env.client.CreateServer(context.Background(), req)
	}
	if n := env.creates(t)["nc-cancel"]; n != 1 {
		t.Fatalf("the simulator took %d orders for one NodeClaim, want 1", n)
	}
}

// TestAmbiguityRule: which answers to a call that changes state leave it
// ambiguous. Only a 4xx other than 408 and 429 (the API refused it) or a
// failure that proves nothing was sent says "not applied"; a reboot is
// sent once whatever the answer, except 429 (retried).
func TestAmbiguityRule(t *testing.T) {
	cases := []struct {
		name      string
		reply     reply
		ambiguous bool
	}{
		{"typed 400", reply{status: 400, body: `{"details":[],"message":"invalid argument(s)","type":"invalid_arguments"}`}, false},
		{"untyped 400", reply{status: 400, body: `{"message":"Server is not delivered"}`}, false},
		{"404", reply{status: 404, body: `{"message":"Not Found"}`}, false},
		{"409", reply{status: 409, body: `{"message":"resource is in a transient state","type":"transient_state"}`}, false},
		{"412 without a body", reply{status: 412, ctype: noCtype}, false},
		{"403 from a gateway", reply{status: 403, body: "<html>forbidden</html>", ctype: "text/html"}, false},
		{"408", reply{status: 408, body: "<html>request timeout</html>", ctype: "text/html"}, true},
		{"500", reply{status: 500, body: `{"message":"Internal Server Error"}`}, true},
		{"503 whose words refuse", reply{status: 503, body: `{"message":"cloud-init is not supported on this offer"}`}, true},
		{"2xx not JSON", reply{status: 200, body: "<html>OK</html>"}, true},
		{"2xx as HTML", reply{status: 200, body: "<html>OK</html>", ctype: "text/html"}, true},
		{"2xx cut short", reply{status: 200, body: okServer[:len(okServer)/2]}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newScripted(t, c.reply)
			env := newTestClient(t, testConfig(s.srv.URL))
			_, err := env.client.RebootServer(context.Background(), "", serverID, baremetal.ServerBootTypeNormal, nil)
			if err == nil || IsAmbiguous(err) != c.ambiguous || s.count() != 1 {
				t.Fatalf("RebootServer: ambiguous=%v (want %v), %d requests (want 1): %v", IsAmbiguous(err), c.ambiguous, s.count(), err)
			}
		})
	}
	t.Run("a tag update retried after a 5xx is ambiguous; a read never is", func(t *testing.T) {
		s := newScripted(t, reply{status: 502, body: `{"message":"Bad Gateway"}`})
		cfg := testConfig(s.srv.URL)
		cfg.Retry.MaxAttempts = 2
		env := newTestClient(t, cfg)
		_, err := env.client.UpdateServerTags(context.Background(), "", serverID, []string{"a=b"})
		if !IsAmbiguous(err) || s.count() != 2 {
			t.Fatalf("UpdateServerTags: ambiguous=%v, %d requests: %v", IsAmbiguous(err), s.count(), err)
		}
		if _, err := env.client.GetServer(context.Background(), "", serverID); err == nil || IsAmbiguous(err) {
			t.Fatalf("GetServer after 5xx: %v (ambiguous %v)", err, IsAmbiguous(err))
		}
	})
	t.Run("a tag update refused is not ambiguous", func(t *testing.T) {
		s := newScripted(t, reply{status: 404, body: `{"message":"Not Found"}`})
		env := newTestClient(t, testConfig(s.srv.URL))
		_, err := env.client.UpdateServerTags(context.Background(), "", serverID, []string{"a=b"})
		if !IsNotFound(err) || IsAmbiguous(err) {
			t.Fatalf("UpdateServerTags: %v (ambiguous %v)", err, IsAmbiguous(err))
		}
	})
	t.Run("nothing sent: the client-side rate limit", func(t *testing.T) {
		s := newScripted(t, reply{status: 200, body: okServer})
		cfg := testConfig(s.srv.URL)
		cfg.RateLimit = RateLimit{PerSecond: 0.0001, Burst: 1}
		cfg.Retry.MaxAttempts = 1
		cfg.RequestTimeout = 100 * time.Millisecond
		env := newTestClient(t, cfg)
		if _, err := env.client.GetServer(context.Background(), "", serverID); err != nil {
			t.Fatal(err)
		}
		_, err := env.client.RebootServer(context.Background(), "", serverID, baremetal.ServerBootTypeNormal, nil)
		if err == nil || IsAmbiguous(err) || s.count() != 1 {
			t.Fatalf("RebootServer held by the rate limit: %v (ambiguous %v), %d requests", err, IsAmbiguous(err), s.count())
		}
	})
}

// TestSimSSHKeyAnswerNamingNoKey: the key is registered and the answer is a
// 2xx that names no key: EnsureSSHKey finds the key instead of returning an
// empty ID (which a rescue boot would then carry).
func TestSimSSHKeyAnswerNamingNoKey(t *testing.T) {
	env := startSim(t, 1, nil, nil)
	env.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultUndecodableAfterCommit, Method: "POST", Path: `/ssh-keys$`, Body: "{}", Times: 1})
	id, err := env.client.EnsureSSHKey(context.Background(), "karpenter-c1", newAuthorizedKey(t, "c"))
	if err != nil || id == "" {
		t.Fatalf("EnsureSSHKey = %q, %v; want the registered key's ID", id, err)
	}
	if n := env.count(t, "POST", `/ssh-keys$`); n != 1 {
		t.Fatalf("%d key POSTs, want 1", n)
	}
}

// TestSimTagUpdateAnswerNamingNoServer: a tag update is applied and its 2xx
// answer shows no server: SetTag returns the server as it now reads, not an
// empty one whose tags a caller would go on from.
func TestSimTagUpdateAnswerNamingNoServer(t *testing.T) {
	env := startSim(t, 1, nil, nil)
	ctx := context.Background()
	srv, _, err := env.client.CreateServer(ctx, env.createReq("nc-tags"))
	if err != nil {
		t.Fatal(err)
	}
	env.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultUndecodableAfterCommit, Method: "PATCH", Path: serverRE, Body: "{}", Times: 1})
	got, err := env.client.SetTag(ctx, zone, srv.ID, TagPhase, "rescue")
	if err != nil || got.ID != srv.ID || !HasTags(got.Tags, Tag(TagPhase, "rescue"), Tag(TagNodeClaim, "nc-tags")) {
		t.Fatalf("SetTag = %+v, %v; want the server with its tags", got, err)
	}
	if n := env.count(t, "PATCH", serverRE); n != 1 {
		t.Fatalf("%d PATCHes, want 1", n)
	}
}

// TestSimOrderInFlightSaysNothingOfTheOffer: a 5xx whose words refuse the
// order or say "out of stock" is ambiguous (the order is in flight) and
// keeps its class for the caller's first decision; the ErrOrderInFlight of
// the next tries is transient, so a caller trying another offering does not
// set that one aside for the lost order's reason.
func TestSimOrderInFlightSaysNothingOfTheOffer(t *testing.T) {
	for _, c := range []struct {
		body  string
		class Class
	}{
		{`{"message":"cloud-init is not supported on this offer"}`, ClassRefused},
		{`{"message":"offer is out of stock"}`, ClassOutOfStock},
	} {
		t.Run(string(c.class), func(t *testing.T) {
			env := startSim(t, 1, nil, nil)
			env.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Method: "POST", Path: `/servers$`, Status: 503, Body: c.body,
				ContentType: "application/json", Times: 1})
			req := env.createReq("nc-5xx")
			_, _, err := env.client.CreateServer(context.Background(), req)
			if Classify(err) != c.class || !IsAmbiguous(err) {
				t.Fatalf("first CreateServer: %s (ambiguous %v), want %s and ambiguous: %v", Classify(err), IsAmbiguous(err), c.class, err)
			}
			_, _, err = env.client.CreateServer(context.Background(), req)
			if !errors.Is(err, ErrOrderInFlight) || Classify(err) != ClassTransient || IsOrderRefused(err) || IsOutOfStock(err) {
				t.Fatalf("next CreateServer: %s: %v, want a transient ErrOrderInFlight", Classify(err), err)
			}
			if n := env.count(t, "POST", serversRE); n != 1 {
				t.Fatalf("%d POSTs, want 1", n)
			}
		})
	}
}
