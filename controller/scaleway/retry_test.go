package scaleway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
)

const okServer = `{"id":"491871c5-aa0d-472c-adfa-10b06050684a","name":"n","status":"ready","tags":["a=b"],"zone":"fr-par-2"}`

func TestRetries5xxThenSucceeds(t *testing.T) {
	s := newScripted(t,
		reply{status: 500, body: `{"message":"Internal Server Error"}`},
		reply{status: 502, body: `bad gateway`, ctype: "text/plain"},
		reply{status: 200, body: okServer})
	env := newTestClient(t, testConfig(s.srv.URL))
	srv, err := env.client.GetServer(context.Background(), "", serverID)
	if err != nil || srv.Status != baremetal.ServerStatusReady {
		t.Fatalf("GetServer: %v %+v", err, srv)
	}
	if s.count() != 3 {
		t.Fatalf("%d attempts, want 3", s.count())
	}
	if got := env.counter(t, MetricAPICalls, map[string]string{"op": OpGetServer, "result": "server_error"}); got != 2 {
		t.Fatalf("server_error count %v", got)
	}
	if got := env.counter(t, MetricAPICalls, map[string]string{"op": OpGetServer, "result": "ok"}); got != 1 {
		t.Fatalf("ok count %v", got)
	}
	if got := env.counter(t, MetricAPIRetries, map[string]string{"op": OpGetServer}); got != 2 {
		t.Fatalf("retries %v", got)
	}
	if got := env.counter(t, MetricAPICallDuration, map[string]string{"op": OpGetServer}); got != 3 {
		t.Fatalf("duration samples %v", got)
	}
	// Full jitter: each wait below the doubling cap.
	waits := env.clock.Waits()
	caps := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond}
	if len(waits) != 2 {
		t.Fatalf("waits %v", waits)
	}
	for i, w := range waits {
		if w < 0 || w >= caps[i] {
			t.Fatalf("wait %d = %v, outside [0,%v)", i, w, caps[i])
		}
	}
}

func TestRetryBoundedAttempts(t *testing.T) {
	s := newScripted(t, reply{status: 503, body: `{"message":"Service Unavailable"}`})
	cfg := testConfig(s.srv.URL)
	cfg.Retry.MaxAttempts = 3
	env := newTestClient(t, cfg)
	_, err := env.client.ListServers(context.Background(), "", nil)
	if s.count() != 3 {
		t.Fatalf("%d attempts, want 3", s.count())
	}
	if !strings.Contains(err.Error(), "after 3 attempts") || Classify(err) != ClassServerError {
		t.Fatalf("error %v", err)
	}
}

func TestRetryHonoursRetryAfter(t *testing.T) {
	s := newScripted(t,
		reply{status: 429, body: `{"message":"rate limit exceeded, retry later","type":"too_many_requests"}`, headers: map[string]string{"Retry-After": "3"}},
		reply{status: 503, body: `{"message":"busy"}`, headers: map[string]string{"Retry-After": time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)}},
		reply{status: 200, body: okServer})
	cfg := testConfig(s.srv.URL)
	cfg.Retry.MaxRetryAfter = 10 * time.Second
	env := newTestClient(t, cfg)
	if _, err := env.client.GetServer(context.Background(), "", serverID); err != nil {
		t.Fatal(err)
	}
	waits := env.clock.Waits()
	if len(waits) != 2 {
		t.Fatalf("waits %v", waits)
	}
	if waits[0] < 3*time.Second || waits[0] > 3*time.Second+cfg.Retry.BaseBackoff {
		t.Fatalf("Retry-After: 3 gave wait %v", waits[0])
	}
	// An HTTP-date an hour away is capped at MaxRetryAfter.
	if waits[1] < 10*time.Second || waits[1] > 10*time.Second+cfg.Retry.BaseBackoff {
		t.Fatalf("capped Retry-After gave wait %v", waits[1])
	}
	if got := env.counter(t, MetricAPICalls, map[string]string{"op": OpGetServer, "result": "throttled"}); got != 1 {
		t.Fatalf("throttled count %v", got)
	}
}

func TestRetryAfterBeyondDeadlineGivesUp(t *testing.T) {
	s := newScripted(t, reply{status: 429, body: `{"message":"slow down"}`, headers: map[string]string{"Retry-After": "60"}})
	env := newTestClient(t, testConfig(s.srv.URL))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := env.client.GetServer(ctx, "", serverID)
	if !IsRetryable(err) || Classify(err) != ClassThrottled {
		t.Fatalf("want the throttled error back, got %v", err)
	}
	if s.count() != 1 || len(env.clock.Waits()) != 0 {
		t.Fatalf("waited past the caller's deadline: %d requests, waits %v", s.count(), env.clock.Waits())
	}
}

func TestNoRetryOnBusinessErrors(t *testing.T) {
	for _, body := range []string{
		`{"message":"resource is out of stock","resource":"EM","type":"out_of_stock"}`,
		`{"details":[{"argument_name":"offer_id","reason":"required"}],"message":"invalid argument(s)","type":"invalid_arguments"}`,
		`{"message":"Server is not delivered"}`,
	} {
		s := newScripted(t, reply{status: 400, body: body})
		env := newTestClient(t, testConfig(s.srv.URL))
		_, err := env.client.StopServer(context.Background(), "", serverID)
		if err == nil || s.count() != 1 || len(env.clock.Waits()) != 0 {
			t.Fatalf("%s: %d requests, err %v", body, s.count(), err)
		}
	}
}

// A reboot is not idempotent: a 502 after sending may have been applied, so
// it is returned as ambiguous instead of rebooting twice; a 429 proves the
// request was refused and is retried.
func TestNonIdempotentCalls(t *testing.T) {
	t.Run("5xx is ambiguous, not retried", func(t *testing.T) {
		s := newScripted(t, reply{status: 502, body: `{"message":"Bad Gateway"}`})
		env := newTestClient(t, testConfig(s.srv.URL))
		_, err := env.client.RebootServer(context.Background(), "", serverID, baremetal.ServerBootTypeNormal, nil)
		if !IsAmbiguous(err) || !IsRetryable(err) || s.count() != 1 {
			t.Fatalf("ambiguous=%v requests=%d err=%v", IsAmbiguous(err), s.count(), err)
		}
	})
	t.Run("429 is retried", func(t *testing.T) {
		s := newScripted(t,
			reply{status: 429, body: `{"message":"slow down"}`, headers: map[string]string{"Retry-After": "1"}},
			reply{status: 200, body: okServer})
		env := newTestClient(t, testConfig(s.srv.URL))
		if _, err := env.client.RebootServer(context.Background(), "", serverID, baremetal.ServerBootTypeRescue, []string{"key"}); err != nil {
			t.Fatal(err)
		}
		if s.count() != 2 {
			t.Fatalf("%d requests", s.count())
		}
	})
	t.Run("bad boot type", func(t *testing.T) {
		s := newScripted(t, reply{status: 200, body: okServer})
		env := newTestClient(t, testConfig(s.srv.URL))
		_, err := env.client.RebootServer(context.Background(), "", serverID, "pxe", nil)
		if err == nil || !strings.Contains(err.Error(), "bootType") || s.count() != 0 {
			t.Fatalf("err %v, %d requests", err, s.count())
		}
	})
}

// TestRateLimitShared: one token bucket for every operation. With a bucket
// of 2 and a refill far in the future, the third request of any kind is
// refused client-side without reaching the API.
func TestRateLimitShared(t *testing.T) {
	s := newScripted(t, reply{status: 200, body: okServer})
	cfg := testConfig(s.srv.URL)
	cfg.RateLimit = RateLimit{PerSecond: 0.0001, Burst: 2}
	cfg.Retry.MaxAttempts = 1
	cfg.RequestTimeout = time.Second
	env := newTestClient(t, cfg)
	ctx := context.Background()
	if _, err := env.client.GetServer(ctx, "", serverID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.StartServer(ctx, "", serverID); err != nil {
		t.Fatal(err)
	}
	_, err := env.client.GetServer(ctx, "", serverID)
	var rw *rateWaitError
	if !errors.As(err, &rw) || Classify(err) != ClassTimeout {
		t.Fatalf("third call: want a client-side rate-limit error, got %T %v", err, err)
	}
	if s.count() != 2 {
		t.Fatalf("API saw %d requests, want 2", s.count())
	}
}

func TestBackoffBounds(t *testing.T) {
	s := newScripted(t, reply{status: 200, body: okServer})
	cfg := testConfig(s.srv.URL)
	cfg.Retry = RetryPolicy{MaxAttempts: 10, BaseBackoff: 100 * time.Millisecond, MaxBackoff: 400 * time.Millisecond, MaxRetryAfter: time.Second}
	env := newTestClient(t, cfg)
	for attempt := 1; attempt <= 8; attempt++ {
		ceil := min(100*time.Millisecond<<(attempt-1), 400*time.Millisecond)
		for i := 0; i < 200; i++ {
			if d := env.client.backoff(attempt, 0); d < 0 || d >= ceil {
				t.Fatalf("attempt %d: %v outside [0,%v)", attempt, d, ceil)
			}
		}
	}
	if d := env.client.backoff(1, 5*time.Second); d < time.Second || d > time.Second+100*time.Millisecond {
		t.Fatalf("Retry-After above the cap: %v", d)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"0": 0, "7": 7 * time.Second, now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Minute).Format(http.TimeFormat): 0,
	} {
		got, ok := parseRetryAfter(in, now)
		if !ok || got != want {
			t.Fatalf("%q: %v %v", in, got, ok)
		}
	}
	for _, bad := range []string{"", "-3", "soon"} {
		if _, ok := parseRetryAfter(bad, now); ok {
			t.Fatalf("%q accepted", bad)
		}
	}
}

// TestRetryAfterDateReadsInjectedClock: an HTTP-date Retry-After is measured
// against the client's clock, like every other wait of the retry loop. The
// clock here runs 30 minutes ahead of the wall: a date 30 minutes and 5
// seconds ahead of the wall is 5 seconds away, not half an hour.
func TestRetryAfterDateReadsInjectedClock(t *testing.T) {
	s := newScripted(t,
		reply{status: 503, body: `{"message":"busy"}`, headers: map[string]string{"Retry-After": time.Now().Add(30*time.Minute + 5*time.Second).UTC().Format(http.TimeFormat)}},
		reply{status: 200, body: okServer})
	cfg := testConfig(s.srv.URL)
	cfg.Retry.MaxRetryAfter = time.Hour
	env := newTestClient(t, cfg)
	env.clock.advance(30 * time.Minute)
	if _, err := env.client.GetServer(context.Background(), "", serverID); err != nil {
		t.Fatal(err)
	}
	waits := env.clock.Waits()
	if len(waits) != 1 || waits[0] < 3*time.Second || waits[0] > 6*time.Second+cfg.Retry.BaseBackoff {
		t.Fatalf("waits %v, want one of about 5s", waits)
	}
}
