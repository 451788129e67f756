package leaderfence

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) step(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// beat is one heartbeat of Run.
func (f *Fence) beat() {
	if f.Check() == nil {
		f.mu.Lock()
		f.last = f.now()
		f.mu.Unlock()
	}
}

// A process that beats regularly writes; one whose heartbeat was silent
// longer than MaxStall (it was frozen) is refused every write from then
// on, beats or not, and exits once.
func TestStallLongerThanTheLeaseAllowsRefusesWritesForGood(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	var exits []time.Duration
	f := newFence(5*time.Second, clk.now, func(d time.Duration) { exits = append(exits, d) })
	for range 20 {
		clk.step(500 * time.Millisecond)
		f.beat()
		if err := f.Check(); err != nil {
			t.Fatalf("Check after regular beats = %v", err)
		}
	}
	clk.step(24 * time.Second) // SIGSTOP ... SIGCONT
	if err := f.Check(); !errors.Is(err, ErrStalled) {
		t.Fatalf("Check after a 24s freeze = %v, want ErrStalled", err)
	}
	f.beat()
	clk.step(500 * time.Millisecond)
	f.beat()
	if err := f.Check(); !errors.Is(err, ErrStalled) {
		t.Errorf("Check after beating again = %v: a process that may have lost its Lease must not write again", err)
	}
	if len(exits) != 1 || exits[0] != 24*time.Second {
		t.Errorf("exit called with %v, want once with 24s", exits)
	}
}

// Once tripped, the transport sends reads and refuses writes before they
// leave the process.
func TestTrippedTransportSendsReadsOnly(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = append(got, r.Method) }))
	defer srv.Close()
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	f := newFence(5*time.Second, clk.now, nil)
	c := &http.Client{Transport: f.Transport(http.DefaultTransport)}
	do := func(method string) error {
		req, _ := http.NewRequest(method, srv.URL+"/servers", nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := do(http.MethodPost); err != nil {
		t.Fatalf("POST before any stall: %v", err)
	}
	clk.step(6 * time.Second)
	if err := do(http.MethodGet); err != nil {
		t.Errorf("GET after the stall: %v, want it sent", err)
	}
	for _, m := range []string{http.MethodPost, http.MethodPatch, http.MethodDelete} {
		if err := do(m); !errors.Is(err, ErrStalled) {
			t.Errorf("%s after the stall: %v, want ErrStalled", m, err)
		}
	}
	if len(got) != 2 || got[0] != http.MethodPost || got[1] != http.MethodGet {
		t.Errorf("the API received %v, want [POST GET]", got)
	}
}
