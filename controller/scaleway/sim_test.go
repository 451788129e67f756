package scaleway

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	baremetalv3 "github.com/scaleway/scaleway-sdk-go/api/baremetal/v3"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"golang.org/x/crypto/ssh"
)

const (
	zone      = scw.Zone("fr-par-2")
	cluster   = "c1"
	serversRE = `^/baremetal/v1/zones/fr-par-2/servers$`
	serverRE  = `^/baremetal/v1/zones/fr-par-2/servers/[^/]+$`
)

type simEnv struct {
	*testEnv
	sim   *scwsim.Sim
	offer *baremetal.Offer
	sent  *countingTransport
	base  int64 // requests sent before the last resetCalls
}

// countingTransport counts the requests the client sent, so that tests can
// wait for the simulator's call record to hold all of them (it records a
// call just after answering it).
type countingTransport struct {
	base http.RoundTripper
	n    atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.base.RoundTrip(r)
}

// withBase sets the transport under the counting one (fault injectors).
type withBase http.RoundTripper

// startSim runs the EM API simulator with the fast "test" delays scaled by
// scale, and a client against it.
func startSim(t testing.TB, scale float64, mutate func(*scwsim.Options), cfgMutate func(*Config), base ...withBase) *simEnv {
	t.Helper()
	sent := &countingTransport{base: http.DefaultTransport}
	if len(base) > 0 {
		sent.base = base[0]
	}
	o, err := scwsim.Profile(scwsim.ProfileTest)
	if err != nil {
		t.Fatal(err)
	}
	o.Scale = scale
	o.SecretKey = testSecretKey
	o.ProjectID = testProject
	if mutate != nil {
		mutate(&o)
	}
	sim := scwsim.New(o)
	url, err := sim.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	cfg := testConfig(url)
	if cfgMutate != nil {
		cfgMutate(&cfg)
	}
	env := &simEnv{testEnv: newTestClient(t, cfg, WithTransport(sent)), sim: sim, sent: sent}
	env.offer = pickOffer(t, env.client)
	env.resetCalls(t)
	return env
}

// creates counts accepted orders by NodeClaim, once the record is complete.
func (e *simEnv) creates(t testing.TB) map[string]int {
	t.Helper()
	e.settle(t)
	return e.sim.CreatesByTag(TagNodeClaim)
}

// settle waits until the simulator has recorded every request sent so far.
func (e *simEnv) settle(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for int64(len(e.sim.Calls())) < e.sent.n.Load()-e.base {
		if time.Now().After(deadline) {
			t.Fatalf("simulator recorded %d calls, client sent %d", len(e.sim.Calls()), e.sent.n.Load()-e.base)
		}
		time.Sleep(time.Millisecond)
	}
}

// resetCalls clears the simulator's call record once it holds every sent
// request.
func (e *simEnv) resetCalls(t testing.TB) {
	t.Helper()
	e.settle(t)
	e.sim.ResetCalls()
	e.base = e.sent.n.Load()
}

var (
	offerMu     sync.Mutex
	cachedOffer *baremetal.Offer
)

// pickOffer returns an enabled, in-stock hourly offer of the zone that has
// the Private Network option (fr-par-2 keeps the recorded offer IDs, so one
// pick serves every simulator of the test binary).
func pickOffer(t testing.TB, c *Client) *baremetal.Offer {
	t.Helper()
	offerMu.Lock()
	defer offerMu.Unlock()
	if cachedOffer != nil {
		return cachedOffer
	}
	offers, err := c.ListOffers(context.Background(), zone, baremetal.OfferSubscriptionPeriodHourly)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offers {
		if !o.Enable || o.Stock != baremetal.OfferStockAvailable {
			continue
		}
		for _, opt := range o.Options {
			if opt.PrivateNetwork != nil {
				cachedOffer = o
				return o
			}
		}
	}
	t.Fatalf("no available offer with a private network option among %d", len(offers))
	return nil
}

func (e *simEnv) count(t *testing.T, method, re string) int {
	t.Helper()
	e.settle(t)
	n, err := e.sim.CountCalls(method, re)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// readyServer orders a server for nodeclaim and waits until it is ready; it
// returns the server, the poller that waited (closed with the test) and the
// private network option's ID, for tests of the calls made on a delivered server.
func (e *simEnv) readyServer(ctx context.Context, t *testing.T, nodeclaim string) (*baremetal.Server, *Poller, string) {
	t.Helper()
	srv, _, err := e.client.CreateServer(ctx, e.createReq(nodeclaim))
	if err != nil {
		t.Fatal(err)
	}
	poller := e.client.NewPoller(Tag(TagManagedBy, cluster))
	t.Cleanup(poller.Close)
	if _, err := poller.WaitFor(ctx, zone, srv.ID, StatusIs(baremetal.ServerStatusReady)); err != nil {
		t.Fatal(err)
	}
	optID, err := e.client.PrivateNetworkOptionID(ctx, zone)
	if err != nil {
		t.Fatal(err)
	}
	return srv, poller, optID
}

func (e *simEnv) createReq(nodeclaim string) CreateServerRequest {
	claim := Tag(TagNodeClaim, nodeclaim)
	return CreateServerRequest{Zone: zone, OfferID: e.offer.ID, Name: nodeclaim, Description: "test",
		Tags: []string{Tag(TagManagedBy, cluster), claim, Tag(TagPhase, "ordered")}, IdempotencyTag: claim}
}

func TestSimCreateGetListDelete(t *testing.T) {
	env := startSim(t, 1, nil, nil)
	ctx := context.Background()
	srv, created, err := env.client.CreateServer(ctx, env.createReq("nc-1"))
	if err != nil || !created {
		t.Fatalf("CreateServer: %v created=%v", err, created)
	}
	if srv.Install != nil {
		t.Fatalf("ordered with an install: %+v", srv.Install)
	}
	// A second call for the same NodeClaim adopts the server, no new order.
	again, created, err := env.client.CreateServer(ctx, env.createReq("nc-1"))
	if err != nil || created || again.ID != srv.ID {
		t.Fatalf("second CreateServer: %v created=%v id=%s want %s", err, created, again.ID, srv.ID)
	}
	if n := env.creates(t)["nc-1"]; n != 1 {
		t.Fatalf("%d orders for nc-1", n)
	}
	list, err := env.client.ListServers(ctx, zone, []string{Tag(TagManagedBy, cluster)})
	if err != nil || len(list) != 1 || list[0].ID != srv.ID {
		t.Fatalf("ListServers: %v %d", err, len(list))
	}
	if list, err := env.client.ListServers(ctx, zone, []string{Tag(TagManagedBy, "other")}); err != nil || len(list) != 0 {
		t.Fatalf("foreign tag matched: %v %d", err, len(list))
	}
	if _, err := env.client.DeleteServer(ctx, zone, srv.ID); err != nil {
		t.Fatal(err)
	}
	// Wait for the deletion to complete: the API then answers the untyped 404.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err = env.client.GetServer(ctx, zone, srv.ID)
		if err != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !IsNotFound(err) {
		t.Fatalf("after delete: class %s: %v", Classify(err), err)
	}
	var re *scw.ResponseError
	if !errors.As(err, &re) || re.StatusCode != 404 {
		t.Fatalf("want an untyped 404 ResponseError, got %T", errors.Unwrap(err))
	}
	if _, err := env.client.DeleteServer(ctx, zone, srv.ID); !IsNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
}

// A DELETE whose answer is lost is retried; the retry meets a server
// already "deleting" (a transient-state error) and that counts as success.
func TestSimDeleteIdempotent(t *testing.T) {
	d := &dropper{base: http.DefaultTransport}
	env := startSim(t, 1, nil, nil, withBase(d))
	env.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStuck, State: "deleting"})
	ctx := context.Background()
	srv, _, err := env.client.CreateServer(ctx, env.createReq("nc-del"))
	if err != nil {
		t.Fatal(err)
	}
	rule := d.add("DELETE", `/servers/`+srv.ID+`$`)
	got, err := env.client.DeleteServer(ctx, zone, srv.ID)
	if err != nil || got.Status != baremetal.ServerStatusDeleting {
		t.Fatalf("DeleteServer after a lost answer: %v %+v", err, got)
	}
	if d.hits(rule) != 1 || env.count(t, "DELETE", serverRE) != 2 {
		t.Fatalf("dropped %d, %d DELETEs", d.hits(rule), env.count(t, "DELETE", serverRE))
	}
	// And again while it is still deleting.
	if got, err := env.client.DeleteServer(ctx, zone, srv.ID); err != nil || got.Status != baremetal.ServerStatusDeleting {
		t.Fatalf("second DeleteServer: %v", err)
	}
}

func TestSimConcurrentCreatesOneOrder(t *testing.T) {
	env := startSim(t, 1, nil, nil)
	var wg sync.WaitGroup
	ids := make([]string, 5)
	for i := range ids {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			srv, _, err := env.client.CreateServer(context.Background(), env.createReq("nc-conc"))
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = srv.ID
		}(i)
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("different servers: %v", ids)
		}
	}
	if n := env.creates(t)["nc-conc"]; n != 1 {
		t.Fatalf("%d orders", n)
	}
}

func TestSimCreateValidation(t *testing.T) {
	env := startSim(t, 1, nil, nil)
	req := env.createReq("nc-v")
	req.IdempotencyTag = ""
	if _, _, err := env.client.CreateServer(context.Background(), req); err == nil || !strings.Contains(err.Error(), "IdempotencyTag") {
		t.Fatalf("missing tag: %v", err)
	}
	req.IdempotencyTag = Tag(TagNodeClaim, "elsewhere")
	if _, _, err := env.client.CreateServer(context.Background(), req); err == nil || !strings.Contains(err.Error(), "one of Tags") {
		t.Fatalf("tag not in Tags: %v", err)
	}
	if n := env.count(t, "", ""); n != 0 {
		t.Fatalf("invalid requests reached the API: %d", n)
	}
}

func TestSimOutOfStockAndQuota(t *testing.T) {
	t.Run("out of stock", func(t *testing.T) {
		var name string
		env := startSim(t, 1, nil, nil)
		name = env.offer.Name
		env = startSim(t, 1, func(o *scwsim.Options) { o.Stock = map[string]int{name: 0} }, nil)
		_, _, err := env.client.CreateServer(context.Background(), env.createReq("nc-oos"))
		if !IsOutOfStock(err) || IsRetryable(err) {
			t.Fatalf("class %s: %v", Classify(err), err)
		}
		if n := env.count(t, "POST", serversRE); n != 1 {
			t.Fatalf("out of stock retried: %d orders", n)
		}
	})
	t.Run("quota", func(t *testing.T) {
		env := startSim(t, 1, nil, nil)
		name := env.offer.Name
		env = startSim(t, 1, func(o *scwsim.Options) { o.Quotas = map[string]int{name: 1} }, nil)
		ctx := context.Background()
		if _, _, err := env.client.CreateServer(ctx, env.createReq("nc-q1")); err != nil {
			t.Fatal(err)
		}
		_, _, err := env.client.CreateServer(ctx, env.createReq("nc-q2"))
		if !IsQuotaExceeded(err) {
			t.Fatalf("class %s: %v", Classify(err), err)
		}
		if n := env.count(t, "POST", serversRE); n != 2 {
			t.Fatalf("%d orders", n)
		}
	})
	t.Run("permission", func(t *testing.T) {
		env := startSim(t, 1, func(o *scwsim.Options) { o.AllowedProjects = []string{"22222222-2222-4222-8222-222222222222"} }, nil)
		_, _, err := env.client.CreateServer(context.Background(), env.createReq("nc-p"))
		if !IsPermissionDenied(err) {
			t.Fatalf("class %s: %v", Classify(err), err)
		}
	})
	t.Run("wrong secret", func(t *testing.T) {
		env := startSim(t, 1, nil, nil)
		cfg := env.client.Config()
		cfg.SecretKey = "33333333-3333-4333-8333-333333333333"
		other := newTestClient(t, cfg)
		_, err := other.client.ListServers(context.Background(), zone, nil)
		if !IsUnauthorized(err) || strings.Contains(err.Error(), cfg.SecretKey) {
			t.Fatalf("class %s: %v", Classify(err), err)
		}
	})
}

func TestSimRetries(t *testing.T) {
	t.Run("5xx", func(t *testing.T) {
		env := startSim(t, 1, nil, nil)
		srv, _, err := env.client.CreateServer(context.Background(), env.createReq("nc-r"))
		if err != nil {
			t.Fatal(err)
		}
		env.resetCalls(t)
		id := env.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Method: "GET", Path: `/servers/[^/]+$`, Status: 503, Times: 2})
		got, err := env.client.GetServer(context.Background(), zone, srv.ID)
		if err != nil || got.ID != srv.ID {
			t.Fatalf("GetServer: %v", err)
		}
		if env.sim.FaultHits(id) != 2 || env.count(t, "GET", serverRE) != 3 {
			t.Fatalf("hits %d, calls %d", env.sim.FaultHits(id), env.count(t, "GET", serverRE))
		}
	})
	t.Run("429 with Retry-After", func(t *testing.T) {
		env := startSim(t, 1, func(o *scwsim.Options) { o.RateLimited = scwsim.RateLimitedJSON }, nil)
		env.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultRateLimit, Method: "GET", Path: `/servers$`, RetryAfter: 2 * time.Second, Times: 2})
		if _, err := env.client.ListServers(context.Background(), zone, nil); err != nil {
			t.Fatal(err)
		}
		if n := env.count(t, "GET", serversRE); n != 3 {
			t.Fatalf("%d list calls, want 3", n)
		}
		waits := env.clock.Waits()
		if len(waits) != 2 || waits[0] < 2*time.Second || waits[1] < 2*time.Second {
			t.Fatalf("Retry-After not honoured: %v", waits)
		}
	})
	t.Run("4xx business error not retried", func(t *testing.T) {
		env := startSim(t, 1, nil, nil)
		env.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStuck, State: "delivering"})
		srv, _, err := env.client.CreateServer(context.Background(), env.createReq("nc-b"))
		if err != nil {
			t.Fatal(err)
		}
		env.resetCalls(t)
		// Still delivering: the API refuses a reboot ("Server is not delivered").
		_, err = env.client.RebootServer(context.Background(), zone, srv.ID, baremetal.ServerBootTypeRescue, nil)
		if err == nil || IsRetryable(err) {
			t.Fatalf("reboot while delivering: %v", err)
		}
		if !IsTransientState(err) {
			t.Fatalf("class %s: %v", Classify(err), err)
		}
		if n := env.count(t, "POST", `/reboot$`); n != 1 {
			t.Fatalf("%d reboots", n)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		env := startSim(t, 1, nil, func(c *Config) { c.RequestTimeout = time.Second; c.Retry.MaxAttempts = 3 })
		env.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultTimeout, Method: "GET", Path: `/servers$`, Times: 2})
		if _, err := env.client.ListServers(context.Background(), zone, nil); err != nil {
			t.Fatal(err)
		}
		if n := env.count(t, "GET", serversRE); n != 3 {
			t.Fatalf("%d list calls", n)
		}
		if got := env.counter(t, MetricAPICalls, map[string]string{"op": OpListServers, "result": "timeout"}); got != 2 {
			t.Fatalf("timeouts counted %v", got)
		}
	})
}

// dropOnce forwards the first matching request to the simulator, lets it
// act, then loses the answer: a 502 from a gateway, or a hang until the
// attempt times out. That is the ambiguous failure of a real network.
type dropOnce struct {
	base    http.RoundTripper
	method  string
	path    string
	hang    bool
	dropped atomic.Int32
}

func (d *dropOnce) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := d.base.RoundTrip(r)
	if err != nil || r.Method != d.method || r.URL.Path != d.path || !d.dropped.CompareAndSwap(0, 1) {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if d.hang {
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	return &http.Response{StatusCode: 502, Status: "502 Bad Gateway", Header: http.Header{"Content-Type": {"text/html"}},
		Body: io.NopCloser(strings.NewReader("<html>bad gateway</html>")), Request: r}, nil
}

// dropper loses the answers of requests matching its rules (method and
// path regexp), once per rule, after the simulator acted on them.
type dropper struct {
	base  http.RoundTripper
	mu    sync.Mutex
	rules []*dropRule
}

type dropRule struct {
	method  string
	path    *regexp.Regexp
	dropped int
}

func (d *dropper) add(method, pathRE string) *dropRule {
	r := &dropRule{method: method, path: regexp.MustCompile(pathRE)}
	d.mu.Lock()
	d.rules = append(d.rules, r)
	d.mu.Unlock()
	return r
}

func (d *dropper) hits(r *dropRule) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return r.dropped
}

func (d *dropper) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := d.base.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	d.mu.Lock()
	drop := false
	for _, rule := range d.rules {
		if rule.dropped == 0 && rule.method == r.Method && rule.path.MatchString(r.URL.Path) {
			rule.dropped++
			drop = true
			break
		}
	}
	d.mu.Unlock()
	if !drop {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return &http.Response{StatusCode: 504, Status: "504 Gateway Timeout", Header: http.Header{"Content-Type": {"text/html"}},
		Body: io.NopCloser(strings.NewReader("<html>gateway timeout</html>")), Request: r}, nil
}

// TestSimReconcileAfterLostAnswers: option, private network attachment and
// SSH key creation are applied by the API but their answers are lost; each
// call reads state back and succeeds without sending the request again.
func TestSimReconcileAfterLostAnswers(t *testing.T) {
	pnID := "44444444-4444-4444-8444-444444444444"
	d := &dropper{base: http.DefaultTransport}
	env := startSim(t, 1, nil, nil, withBase(d))
	env.clock.sleep.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, poller, optID := env.readyServer(ctx, t, "nc-lost")
	opt := d.add("POST", `/options/`)
	if _, err := env.client.AddServerOption(ctx, zone, srv.ID, optID); err != nil {
		t.Fatalf("AddServerOption after a lost answer: %v", err)
	}
	if d.hits(opt) != 1 || env.count(t, "POST", `/options/`) != 1 {
		t.Fatalf("option: dropped %d, %d POSTs", d.hits(opt), env.count(t, "POST", `/options/`))
	}
	if _, err := poller.WaitFor(ctx, zone, srv.ID, func(s *baremetal.Server) (bool, error) {
		return len(s.Options) > 0 && s.Options[len(s.Options)-1].Status == baremetal.ServerOptionOptionStatusOptionStatusEnable, nil
	}); err != nil {
		t.Fatal(err)
	}
	pn := d.add("POST", `/private-networks$`)
	if _, err := env.client.AttachPrivateNetwork(ctx, zone, srv.ID, pnID); err != nil {
		t.Fatalf("AttachPrivateNetwork after a lost answer: %v", err)
	}
	if d.hits(pn) != 1 || env.count(t, "POST", `/private-networks$`) != 1 {
		t.Fatalf("attach: dropped %d, %d POSTs", d.hits(pn), env.count(t, "POST", `/private-networks$`))
	}
	key := d.add("POST", `/ssh-keys$`)
	id, err := env.client.EnsureSSHKey(ctx, "karpenter-c1", newAuthorizedKey(t, "c"))
	if err != nil || id == "" {
		t.Fatalf("EnsureSSHKey after a lost answer: %v", err)
	}
	if d.hits(key) != 1 || env.count(t, "POST", `/ssh-keys$`) != 1 {
		t.Fatalf("ssh key: dropped %d, %d POSTs", d.hits(key), env.count(t, "POST", `/ssh-keys$`))
	}
}

// TestSimCreateNeverDoubled: the simulator creates the server, the answer is
// lost (5xx or timeout); CreateServer looks the server up by its NodeClaim
// tag and adopts it instead of ordering again.
func TestSimCreateNeverDoubled(t *testing.T) {
	for _, hang := range []bool{false, true} {
		t.Run(fmt.Sprintf("hang=%v", hang), func(t *testing.T) {
			drop := &dropOnce{base: http.DefaultTransport, method: "POST", path: "/baremetal/v1/zones/fr-par-2/servers", hang: hang}
			env := startSim(t, 1, nil, func(c *Config) { c.RequestTimeout = 300 * time.Millisecond }, withBase(drop))
			srv, created, err := env.client.CreateServer(context.Background(), env.createReq("nc-d"))
			if err != nil || !created {
				t.Fatalf("CreateServer: %v created=%v", err, created)
			}
			if drop.dropped.Load() != 1 {
				t.Fatal("the answer was not dropped")
			}
			if n := env.creates(t)["nc-d"]; n != 1 {
				t.Fatalf("%d orders for one NodeClaim", n)
			}
			if n := env.count(t, "POST", serversRE); n != 1 {
				t.Fatalf("%d POSTs", n)
			}
			list, _ := env.client.ListServers(context.Background(), zone, nil)
			if len(list) != 1 || list[0].ID != srv.ID {
				t.Fatalf("servers %d", len(list))
			}
		})
	}
	t.Run("a refused order is sent again only after the settle window", func(t *testing.T) {
		env := startSim(t, 1, nil, func(c *Config) { c.OrderSettle = time.Minute })
		// The API answers 500 without creating anything: nothing tells the
		// client so, and nothing shows in listings.
		env.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Method: "POST", Path: `/servers$`, Status: 500, Times: 1})
		_, _, err := env.client.CreateServer(context.Background(), env.createReq("nc-e"))
		if err == nil || !IsAmbiguous(err) {
			t.Fatalf("CreateServer after a 500 = %v, want an ambiguous error", err)
		}
		for i := 0; i < 3; i++ {
			_, _, err = env.client.CreateServer(context.Background(), env.createReq("nc-e"))
			if !errors.Is(err, ErrOrderInFlight) {
				t.Fatalf("retry %d inside the settle window = %v, want ErrOrderInFlight", i, err)
			}
		}
		if n := env.count(t, "POST", serversRE); n != 1 {
			t.Fatalf("%d POSTs inside the settle window, want 1", n)
		}
		// Callers that could give the tag's owner another server (a spare)
		// ask first.
		tag := env.createReq("nc-e").IdempotencyTag
		if z, ok := env.client.OrderInFlight(tag); !ok || z != zone {
			t.Fatalf("OrderInFlight inside the settle window = %s, %v; want %s, true", z, ok, zone)
		}
		if _, ok := env.client.OrderInFlight(env.createReq("nc-other").IdempotencyTag); ok {
			t.Fatal("another tag's order is in flight")
		}
		env.clock.advance(time.Minute)
		if _, ok := env.client.OrderInFlight(tag); ok {
			t.Fatal("the order is still in flight after its settle window")
		}
		if _, created, err := env.client.CreateServer(context.Background(), env.createReq("nc-e")); err != nil || !created {
			t.Fatalf("CreateServer after the settle window: %v created=%v", err, created)
		}
		if n := env.count(t, "POST", serversRE); n != 2 {
			t.Fatalf("%d POSTs, want 2", n)
		}
		if n := env.creates(t)["nc-e"]; n != 1 || env.client.InFlightOrders() != 0 {
			t.Fatalf("%d accepted orders, %d still in flight", n, env.client.InFlightOrders())
		}
	})
	t.Run("lookup failure never orders blind", func(t *testing.T) {
		// The order's answer is lost and every list after it fails: whether
		// the order went through cannot be checked, so no second POST may
		// go out, neither from this call nor from the next ones.
		gate := &failListsAfterPOST{base: http.DefaultTransport}
		env := startSim(t, 1, nil, func(c *Config) { c.Retry.MaxAttempts = 2; c.OrderSettle = time.Minute }, withBase(gate))
		gate.sim = env.sim
		env.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Method: "POST", Path: `/servers$`, Status: 502, Times: 1})
		for i := 0; i < 3; i++ {
			if _, _, err := env.client.CreateServer(context.Background(), env.createReq("nc-g")); err == nil {
				t.Fatalf("call %d: CreateServer succeeded although no lookup could succeed", i)
			}
			if i == 1 {
				env.clock.advance(2 * time.Minute) // past the window: still no lookup, still no order
			}
		}
		if n := env.count(t, "POST", serversRE); n != 1 {
			t.Fatalf("%d POSTs: ordered again without a successful lookup", n)
		}
		if env.count(t, "GET", serversRE) < 2 {
			t.Fatal("the test did not exercise a lookup before the order")
		}
	})
	t.Run("late listing: one order", func(t *testing.T) {
		// The API takes the order, the answer is lost, and the server shows
		// in listings only seconds later: retries find it, never re-order.
		env := startSim(t, 1, func(o *scwsim.Options) { o.ListLag = 2 * time.Second }, nil)
		env.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultAnswerLost, Method: "POST", Path: `/servers$`, Times: 1})
		deadline := time.Now().Add(30 * time.Second)
		var srv *baremetal.Server
		var err error
		for srv == nil {
			srv, _, err = env.client.CreateServer(context.Background(), env.createReq("nc-late"))
			if err != nil && !IsAmbiguous(err) {
				t.Fatalf("CreateServer: %v", err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("the server never showed: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if n := env.creates(t)["nc-late"]; n != 1 {
			t.Fatalf("%d orders, want 1", n)
		}
		if n := env.count(t, "POST", serversRE); n != 1 {
			t.Fatalf("%d POSTs, want 1", n)
		}
	})
}

// failListsAfterPOST forwards everything and, from the first POST on, makes
// the simulator fail every server listing.
type failListsAfterPOST struct {
	base http.RoundTripper
	sim  *scwsim.Sim
	once sync.Once
}

func (f *failListsAfterPOST) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/servers") {
		f.once.Do(func() {
			f.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Method: "GET", Path: `/servers$`, Status: 503})
		})
	}
	return f.base.RoundTrip(r)
}

func TestSimTagsOptionsPrivateNetworks(t *testing.T) {
	pnID := "44444444-4444-4444-8444-444444444444"
	env := startSim(t, 1, func(o *scwsim.Options) { o.PrivateNetworkIDs = []string{pnID} }, nil)
	ctx := context.Background()
	srv, _, err := env.client.CreateServer(ctx, env.createReq("nc-t"))
	if err != nil {
		t.Fatal(err)
	}
	env.clock.sleep.Store(true)
	poller := env.client.NewPoller(Tag(TagManagedBy, cluster))
	defer poller.Close()
	if _, err := poller.WaitFor(ctx, zone, srv.ID, StatusIs(baremetal.ServerStatusReady)); err != nil {
		t.Fatal(err)
	}
	got, err := env.client.SetTag(ctx, zone, srv.ID, TagPhase, "rescue")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{Tag(TagManagedBy, cluster), Tag(TagNodeClaim, "nc-t"), Tag(TagPhase, "rescue")}
	if strings.Join(got.Tags, ",") != strings.Join(want, ",") {
		t.Fatalf("tags %v", got.Tags)
	}
	env.resetCalls(t)
	if _, err := env.client.SetTag(ctx, zone, srv.ID, TagPhase, "rescue"); err != nil {
		t.Fatal(err)
	}
	if n := env.count(t, "PATCH", ""); n != 0 {
		t.Fatalf("unchanged tag written: %d PATCH", n)
	}
	// Concurrent SetTag of different keys in one process: none is lost.
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if _, err := env.client.SetTag(ctx, zone, srv.ID, fmt.Sprintf("k%d", i), "v"); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	cur, _ := env.client.GetServer(ctx, zone, srv.ID)
	for i := 0; i < 5; i++ {
		if _, ok := TagValue(cur.Tags, fmt.Sprintf("k%d", i)); !ok {
			t.Fatalf("lost update k%d: %v", i, cur.Tags)
		}
	}
	if got, err := env.client.RemoveTag(ctx, zone, srv.ID, "k0"); err != nil || HasTags(got.Tags, "k0=v") {
		t.Fatalf("RemoveTag: %v %v", err, got.Tags)
	}

	optID, err := env.client.PrivateNetworkOptionID(ctx, zone)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.AddServerOption(ctx, zone, srv.ID, optID); err != nil {
		t.Fatal(err)
	}
	// Idempotent: adding again sends nothing.
	env.resetCalls(t)
	if _, err := env.client.AddServerOption(ctx, zone, srv.ID, optID); err != nil {
		t.Fatal(err)
	}
	if n := env.count(t, "POST", `/options/`); n != 0 {
		t.Fatalf("option added twice")
	}
	// Attaching before the option is enabled is refused; wait for it.
	if _, err := poller.WaitFor(ctx, zone, srv.ID, func(s *baremetal.Server) (bool, error) {
		for _, o := range s.Options {
			if o.ID == optID && o.Status == baremetal.ServerOptionOptionStatusOptionStatusEnable {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	att, err := env.client.AttachPrivateNetwork(ctx, zone, srv.ID, pnID)
	if err != nil {
		t.Fatal(err)
	}
	again, err := env.client.AttachPrivateNetwork(ctx, zone, srv.ID, pnID)
	if err != nil || again.ID != att.ID {
		t.Fatalf("second attach: %v", err)
	}
	if n := env.count(t, "POST", `/private-networks$`); n != 1 {
		t.Fatalf("%d attach calls", n)
	}
	vlans, err := env.client.WaitPrivateNetworksAttached(ctx, zone, srv.ID, []string{pnID})
	if err != nil {
		t.Fatal(err)
	}
	list, err := env.client.ListServerPrivateNetworks(ctx, zone, srv.ID)
	if err != nil || len(list) != 1 || list[0].Status != baremetalv3.ServerPrivateNetworkStatusAttached {
		t.Fatalf("attachments: %v %d", err, len(list))
	}
	simVLANs := env.sim.PrivateNetworks(srv.ID)
	if len(vlans) != 1 || vlans[pnID] == 0 || vlans[pnID] != simVLANs[pnID] || VLANs(list)[pnID] != vlans[pnID] {
		t.Fatalf("VLANs %v, simulator %v", vlans, simVLANs)
	}
	if _, err := env.client.WaitPrivateNetworksAttached(ctx, zone, srv.ID, []string{"66666666-6666-4666-8666-666666666666"}); err == nil || !strings.Contains(err.Error(), "not attached") {
		t.Fatalf("missing attachment: %v", err)
	}
	if _, err := env.client.AttachPrivateNetwork(ctx, zone, srv.ID, "55555555-5555-4555-8555-555555555555"); !IsNotFound(err) {
		t.Fatalf("unknown private network: %v", err)
	}
}

func TestSimEnsureSSHKey(t *testing.T) {
	env := startSim(t, 1, nil, nil)
	ctx := context.Background()
	pub1, pub2 := newAuthorizedKey(t, "controller@a"), newAuthorizedKey(t, "controller@b")
	id1, err := env.client.EnsureSSHKey(ctx, "karpenter-c1", pub1)
	if err != nil || id1 == "" {
		t.Fatal(err)
	}
	again, err := env.client.EnsureSSHKey(ctx, "karpenter-c1", pub1)
	if err != nil || again != id1 {
		t.Fatalf("second ensure: %v %s", err, again)
	}
	// Same key material under another comment and name: reused.
	fields := strings.Fields(pub1)
	renamed, err := env.client.EnsureSSHKey(ctx, "other-name", fields[0]+" "+fields[1]+" another-comment")
	if err != nil || renamed != id1 {
		t.Fatalf("renamed: %v %s", err, renamed)
	}
	rotated, err := env.client.EnsureSSHKey(ctx, "karpenter-c1", pub2)
	if err != nil || rotated == id1 {
		t.Fatalf("rotated key got the old id: %v", err)
	}
	if n := env.count(t, "POST", `/ssh-keys$`); n != 2 {
		t.Fatalf("%d key creations, want 2", n)
	}
	if _, err := env.client.EnsureSSHKey(ctx, "x", "not a key"); err == nil || !strings.Contains(err.Error(), "publicKey") {
		t.Fatalf("bad key: %v", err)
	}
}

func TestSimFindAndDeleteSSHKey(t *testing.T) {
	env := startSim(t, 1, nil, nil)
	ctx := context.Background()
	pub := newAuthorizedKey(t, "controller@a")
	if id, name, err := env.client.FindSSHKey(ctx, "karpenter-c1", pub); err != nil || id != "" || name != "" {
		t.Fatalf("FindSSHKey before registering = %q %q %v", id, name, err)
	}
	id, err := env.client.EnsureSSHKey(ctx, "karpenter-c1", pub)
	if err != nil {
		t.Fatal(err)
	}
	if got, name, err := env.client.FindSSHKey(ctx, "karpenter-c1", pub); err != nil || got != id || name != "karpenter-c1" {
		t.Fatalf("FindSSHKey = %q %q %v, want %s", got, name, err, id)
	}
	if err := env.client.DeleteSSHKey(ctx, id); err != nil {
		t.Fatalf("DeleteSSHKey: %v", err)
	}
	if got, _, err := env.client.FindSSHKey(ctx, "karpenter-c1", pub); err != nil || got != "" {
		t.Fatalf("FindSSHKey after delete = %q %v", got, err)
	}
	// Already gone (another replica removed it): not an error.
	if err := env.client.DeleteSSHKey(ctx, id); err != nil {
		t.Fatalf("DeleteSSHKey of a removed key: %v", err)
	}
	if n := env.count(t, "DELETE", `/ssh-keys/`); n != 2 {
		t.Fatalf("%d DELETE calls, want 2", n)
	}
}

func newAuthorizedKey(t *testing.T, comment string) string {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) + " " + comment
}

// A server carrying the order's NodeClaim tag that Match refuses (a
// namesake cluster's) is neither returned nor stops the order: ours is
// ordered beside it, and later calls find ours.
func TestSimCreateSkipsServersMatchRefuses(t *testing.T) {
	env := startSim(t, 1, nil, nil)
	ctx := context.Background()
	foreign, created, err := env.client.CreateServer(ctx, env.createReq("nc-1"))
	if err != nil || !created {
		t.Fatalf("the namesake's order: %v created=%v", err, created)
	}
	notForeign := func(tags []string) bool { return !slices.Contains(tags, Tag(TagPhase, "ordered")) }
	req := env.createReq("nc-1")
	req.Tags = []string{Tag(TagManagedBy, cluster), req.IdempotencyTag, Tag(TagPhase, "ours")}
	req.Match = notForeign
	ours, created, err := env.client.CreateServer(ctx, req)
	if err != nil || !created || ours.ID == foreign.ID {
		t.Fatalf("CreateServer beside the namesake's server: %v created=%v id=%s (namesake's %s)", err, created, ours.ID, foreign.ID)
	}
	again, created, err := env.client.CreateServer(ctx, req)
	if err != nil || created || again.ID != ours.ID {
		t.Fatalf("second CreateServer: %v created=%v id=%s want %s", err, created, again.ID, ours.ID)
	}
	if n := env.creates(t)["nc-1"]; n != 2 {
		t.Fatalf("%d orders for nc-1, want the namesake's and ours", n)
	}
}
