package scwsim

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

// startedEnv runs the simulator on its own listener (Start, which speaks
// HTTP/1.1 and unencrypted HTTP/2) and a real SDK client whose transport
// speaks only HTTP/2 when h2 is set, else only HTTP/1.1.
func startedEnv(t *testing.T, h2 bool) *env {
	t.Helper()
	opts, err := Profile(ProfileTest)
	if err != nil {
		t.Fatal(err)
	}
	opts.Logf = t.Logf
	sim := New(opts)
	url, err := sim.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Protocols = new(http.Protocols)
	if h2 {
		tr.Protocols.SetUnencryptedHTTP2(true)
	} else {
		tr.Protocols.SetHTTP1(true)
	}
	t.Cleanup(tr.CloseIdleConnections)
	cli := newClient(t, url, sim.SecretKey(), scw.WithHTTPClient(&http.Client{Transport: tr}))
	return &env{sim: sim, url: url, cli: cli, bm: baremetal.NewAPI(cli)}
}

// order sends one CreateServer for the claim tag with a short deadline.
func (e *env) order(t *testing.T, claim string) (*baremetal.Server, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	return e.bm.CreateServer(&baremetal.CreateServerRequest{OfferID: e.offerID(t, offerB112), Name: claim,
		Tags: []string{"karpenter.sh/nodeclaim=" + claim}}, scw.WithContext(ctx))
}

// TestFaultAfterCommitEveryShape: each after-commit fault lets the order
// through (the server exists, the call record counts an accepted order) and
// the client gets the lost answer in its shape, over HTTP/1.1 and HTTP/2.
func TestFaultAfterCommitEveryShape(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		proto := "HTTP/1.1"
		if h2 {
			proto = "HTTP/2"
		}
		for _, kind := range AfterCommitKinds {
			t.Run(proto+"/"+string(kind), func(t *testing.T) {
				e := startedEnv(t, h2)
				id := e.sim.MustInject(Fault{Kind: kind, Method: "POST", Path: `/servers$`, Times: 1})
				start := time.Now()
				srv, err := e.order(t, "lost")
				if err == nil {
					t.Fatalf("the answer reached the client: %+v", srv)
				}
				switch kind {
				case FaultAnswerLost:
					if re := mustAs[*scw.ResponseError](t, err); re.StatusCode != http.StatusGatewayTimeout {
						t.Fatalf("want a 504, got %+v", re)
					}
				case FaultResetAfterCommit:
					if h2 {
						if !strings.Contains(err.Error(), "stream error") || !strings.Contains(err.Error(), "INTERNAL_ERROR") {
							t.Fatalf("want a reset stream, got %v", err)
						}
					} else if !errors.Is(err, syscall.ECONNRESET) {
						t.Fatalf("want a reset connection, got %v", err)
					}
				case FaultTimeoutAfterCommit:
					if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < 400*time.Millisecond {
						t.Fatalf("want the client's deadline after 500ms, got %v after %v", err, time.Since(start))
					}
				case FaultUndecodableAfterCommit:
					// The real answer cut in half: the JSON never closes.
					if !errors.Is(err, io.ErrUnexpectedEOF) {
						t.Fatalf("want an undecodable body, got %T %v", err, err)
					}
				}
				if e.sim.FaultHits(id) != 1 {
					t.Fatalf("hits %d", e.sim.FaultHits(id))
				}
				waitCalls(t, e.sim, 1)
				if n := len(e.sim.Servers()); n != 1 {
					t.Fatalf("%d servers after an order whose answer was lost, want 1", n)
				}
				if c := e.sim.CreatesByTag("karpenter.sh/nodeclaim"); c["lost"] != 1 {
					t.Fatalf("the taken order is not counted: %v", c)
				}
				// The next request on the same client gets its answer.
				if _, err := e.order(t, "next"); err != nil {
					t.Fatalf("the order after the fault: %v", err)
				}
			})
		}
	}
}

// waitCalls waits until the call record holds n calls: a dropped exchange
// is recorded when its handler returns, which may be after the client saw
// the failure.
func waitCalls(t *testing.T, s *Sim, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(s.Calls()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls recorded, want %d", len(s.Calls()), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// An undecodable answer's body and type are configurable; a real answer
// that is not a success goes through unchanged.
func TestFaultUndecodableBodyAndRefusals(t *testing.T) {
	e := startedEnv(t, false)
	e.sim.MustInject(Fault{Kind: FaultUndecodableAfterCommit, Method: "POST", Path: `/servers$`, Times: 1,
		Body: "<html><body>OK</body></html>"})
	_, err := e.order(t, "html")
	var syntax *json.SyntaxError
	if !errors.As(err, &syntax) {
		t.Fatalf("want a JSON syntax error, got %T %v", err, err)
	}
	if n := len(e.sim.Servers()); n != 1 {
		t.Fatalf("%d servers, want 1", n)
	}
	e.sim.MustInject(Fault{Kind: FaultUndecodableAfterCommit, Method: "POST", Path: `/servers$`, Times: 1})
	_, err = e.bm.CreateServer(&baremetal.CreateServerRequest{OfferID: e.offerID(t, offerEmpty), Name: "none"})
	var oos *scw.OutOfStockError
	if !errors.As(err, &oos) {
		t.Fatalf("a refusal under the fault: want the API's out-of-stock answer, got %T %v", err, err)
	}
	if n := len(e.sim.Servers()); n != 1 {
		t.Fatalf("%d servers after a refused order, want 1", n)
	}
}
