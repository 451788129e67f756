package scaleway

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
)

// Body shapes an error answer can take. Only some are recorded for each
// status; the others are plausible (a gateway, an unrecorded error), so the
// classification must hold for all of them.
const (
	shapeTyped   = "typed JSON"
	shapeMessage = "untyped message"
	shapeEmpty   = "empty, no Content-Type"
	shapeText    = "text/plain"
	shapeHTML    = "HTML"
	shapeBadJSON = "not the JSON its Content-Type claims"
)

func shaped(status int, shape, typed, message string) reply {
	switch shape {
	case shapeTyped:
		return reply{status: status, body: typed}
	case shapeMessage:
		return reply{status: status, body: fmt.Sprintf(`{"message":%q}`, message)}
	case shapeEmpty:
		return reply{status: status, ctype: noCtype}
	case shapeText:
		return reply{status: status, body: message + "\n", ctype: "text/plain; charset=utf-8"}
	case shapeHTML:
		return reply{status: status, body: "<html><body><h1>" + message + "</h1></body></html>", ctype: "text/html"}
	case shapeBadJSON:
		return reply{status: status, body: "<html>" + message + "</html>"}
	}
	panic(shape)
}

// TestClassifyEveryBodyShape: every status the provider branches on, in
// every plausible body shape, classifies to a class whose handling is
// bounded: retryable classes are retried MaxAttempts times then fail with
// the status in the error, the others fail on the first request.
func TestClassifyEveryBodyShape(t *testing.T) {
	all := []string{shapeTyped, shapeMessage, shapeEmpty, shapeText, shapeHTML, shapeBadJSON}
	cases := []struct {
		status  int
		typed   string // "" when the status has no typed form
		message string
		want    map[string]Class // by shape; missing shapes get def
		def     Class
	}{
		{429, `{"message":"rate limit exceeded, retry later","type":"too_many_requests"}`, "Too Many Requests",
			nil, ClassThrottled},
		{503, "", "cloud-init is not supported on this offer", // recorded: a refusal answered 503
			map[string]Class{shapeHTML: ClassServerError, shapeBadJSON: ClassServerError, shapeEmpty: ClassServerError}, ClassRefused},
		{503, "", "Service Unavailable", nil, ClassServerError},
		{503, "", "upstream connect error or disconnect/reset before headers", nil, ClassServerError},
		{500, "", "Internal Server Error", nil, ClassServerError},
		{502, "", "Bad Gateway", nil, ClassServerError},
		{504, "", "Gateway Timeout", nil, ClassTimeout},
		{412, `{"message":"resource is out of stock","resource":"EM-B112X-SSD","type":"out_of_stock"}`, "resource is out of stock",
			map[string]Class{shapeEmpty: ClassInvalid}, ClassOutOfStock},
		{412, `{"help_message":"x","message":"precondition failed","precondition":"attribute_must_be_set","type":"precondition_failed"}`,
			"precondition failed", nil, ClassInvalid},
		{403, `{"details":[{"current":1,"quota":1,"resource":"EM_B112X_SSD"}],"message":"quota(s) exceeded for this resource","type":"quotas_exceeded"}`,
			"quota(s) exceeded for this resource", map[string]Class{shapeEmpty: ClassPermission}, ClassQuota},
		{403, `{"details":[{"action":"read","resource":"baremetal"}],"message":"insufficient permissions","type":"permissions_denied"}`,
			"insufficient permissions", nil, ClassPermission},
		{409, `{"current_state":"stopping","message":"resource is in a transient state","resource":"baremetal_server","resource_id":"x","type":"transient_state"}`,
			"resource is in a transient state", nil, ClassTransient},
		{404, `{"message":"resource is not found","resource":"baremetal_server","resource_id":"x","type":"not_found"}`, "Not Found", nil, ClassNotFound},
		{400, "", "Server is not delivered", map[string]Class{shapeEmpty: ClassInvalid}, ClassTransient},
		{401, `{"message":"authentication is denied","method":"api_key","reason":"not_found","type":"denied_authentication"}`,
			"authentication is denied", nil, ClassUnauthorized},
	}
	for _, c := range cases {
		for _, shape := range all {
			if shape == shapeTyped && c.typed == "" {
				continue
			}
			want, ok := c.want[shape]
			if !ok {
				want = c.def
			}
			t.Run(fmt.Sprintf("%d %s %s", c.status, c.message, shape), func(t *testing.T) {
				s := newScripted(t, shaped(c.status, shape, c.typed, c.message))
				cfg := testConfig(s.srv.URL)
				cfg.Retry.MaxAttempts = 3
				cfg.Retry.ThrottleWait = 200 * time.Millisecond // waits are instant here; the budget still bounds them
				env := newTestClient(t, cfg)
				_, err := env.client.GetServer(context.Background(), "fr-par-2", serverID)
				if got := Classify(err); got != want {
					t.Fatalf("Classify = %s, want %s (%v)", got, want, err)
				}
				if shape != shapeTyped && !strings.Contains(err.Error(), fmt.Sprint(c.status)) {
					t.Fatalf("an untyped error does not give the status: %v", err)
				}
				switch n := s.count(); {
				case want == ClassThrottled:
					if n < 2 || n > 50 {
						t.Fatalf("throttled: %d requests, want a bounded ride (2..50)", n)
					}
				case isRetryableClass(want):
					if n != cfg.Retry.MaxAttempts || !strings.Contains(err.Error(), "after 3 attempts") {
						t.Fatalf("retryable: %d requests, want %d, and an error that says so: %v", n, cfg.Retry.MaxAttempts, err)
					}
				default:
					if n != 1 {
						t.Fatalf("%s is not retryable but was sent %d times", want, n)
					}
				}
			})
		}
	}
}

// The recorded 503 refusal is sent once, even for an order, and is a
// refusal (the caller sets the offering aside). It is also ambiguous: a 5xx
// proves nothing about what the API did, and the words that make it a
// refusal are a guess (refusal takes any 503 message it does not know for
// one), so the order is remembered as in flight like any other 5xx.
func TestRefusedOrderIsSentOnce(t *testing.T) {
	s := newScripted(t,
		reply{status: 200, body: `{"servers":[],"total_count":0}`},
		reply{status: 503, body: `{"message":"cloud-init is not supported on this offer"}`})
	env := newTestClient(t, testConfig(s.srv.URL))
	_, _, err := env.client.CreateServer(context.Background(), CreateServerRequest{OfferID: "o", Name: "n",
		Tags: []string{"karpenter.sh/nodeclaim=n"}, IdempotencyTag: "karpenter.sh/nodeclaim=n"})
	if !IsRefused(err) || IsRetryable(err) || !IsAmbiguous(err) || !IsOrderRefused(err) {
		t.Fatalf("want an ambiguous refusal, got %s (ambiguous %v): %v", Classify(err), IsAmbiguous(err), err)
	}
	if env.client.InFlightOrders() != 1 {
		t.Fatalf("%d orders in flight after a 5xx, want 1", env.client.InFlightOrders())
	}
	posts := 0
	for _, r := range s.requests() {
		if r.Method == "POST" {
			posts++
		}
	}
	if posts != 1 {
		t.Fatalf("refused order sent %d times", posts)
	}
}

// A storm of bare 429s (no body, no Retry-After) longer than MaxAttempts is
// ridden out; an endless one ends when ThrottleWait is spent.
func TestThrottleStorm(t *testing.T) {
	bare := reply{status: 429, ctype: noCtype, headers: map[string]string{"X-Envoy-Ratelimited": "true"}}
	t.Run("ridden out", func(t *testing.T) {
		replies := []reply{}
		for range 10 {
			replies = append(replies, bare)
		}
		s := newScripted(t, append(replies, reply{status: 200, body: okServer})...)
		env := newTestClient(t, testConfig(s.srv.URL)) // MaxAttempts 4
		srv, err := env.client.GetServer(context.Background(), "", serverID)
		if err != nil || srv.Status != baremetal.ServerStatusReady || s.count() != 11 {
			t.Fatalf("GetServer after 10 bare 429s: %v, %d requests", err, s.count())
		}
		for _, w := range env.clock.Waits() {
			if w > ThrottleBackoffCap {
				t.Fatalf("throttle wait %v above the cap %v", w, ThrottleBackoffCap)
			}
		}
		if got := env.counter(t, MetricAPIRetries, map[string]string{"op": OpGetServer, "reason": "throttled"}); got != 10 {
			t.Fatalf("throttled retries %v, want 10", got)
		}
	})
	t.Run("endless", func(t *testing.T) {
		s := newScripted(t, bare)
		cfg := testConfig(s.srv.URL)
		cfg.Retry.ThrottleWait = time.Second
		env := newTestClient(t, cfg)
		_, err := env.client.GetServer(context.Background(), "", serverID)
		if Classify(err) != ClassThrottled {
			t.Fatalf("want the throttled error back: %v", err)
		}
		var sum time.Duration
		for _, w := range env.clock.Waits() {
			sum += w
		}
		if sum > cfg.Retry.ThrottleWait || s.count() < 2 {
			t.Fatalf("waited %v over %d requests; the budget is %v", sum, s.count(), cfg.Retry.ThrottleWait)
		}
	})
	t.Run("MaxAttempts 1 disables retries", func(t *testing.T) {
		s := newScripted(t, bare)
		cfg := testConfig(s.srv.URL)
		cfg.Retry.MaxAttempts = 1
		env := newTestClient(t, cfg)
		if _, err := env.client.GetServer(context.Background(), "", serverID); Classify(err) != ClassThrottled || s.count() != 1 {
			t.Fatalf("%d requests: %v", s.count(), err)
		}
	})
}
