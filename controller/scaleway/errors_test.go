package scaleway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

const serverID = "491871c5-aa0d-472c-adfa-10b06050684a"

// TestClassifyRecordedBodies replays the exact error bodies recorded from
// the real API through the real SDK.
func TestClassifyRecordedBodies(t *testing.T) {
	gone, goneStatusPath := recordedExchange(t, "GET", "/servers/"+serverID, 404)
	notDelivered, _ := recordedExchange(t, "POST", "/reboot", 400)
	if !strings.Contains(goneStatusPath, serverID) {
		t.Fatalf("unexpected recording path %s", goneStatusPath)
	}

	t.Run("untyped 404 after delete is not found", func(t *testing.T) {
		s := newScripted(t, reply{status: 404, body: string(gone)})
		cfg := testConfig(s.srv.URL)
		env := newTestClient(t, cfg)
		_, err := env.client.GetServer(context.Background(), "fr-par-2", serverID)
		var re *scw.ResponseError
		if !errors.As(err, &re) || re.Message != "Not Found" {
			t.Fatalf("want the SDK's untyped ResponseError, got %T %v", err, err)
		}
		if !IsNotFound(err) || Classify(err) != ClassNotFound {
			t.Fatalf("IsNotFound=false for recorded 404 (class %s): %v", Classify(err), err)
		}
		if IsRetryable(err) || s.count() != 1 {
			t.Fatalf("404 must not be retried: %d requests", s.count())
		}
		if got := env.counter(t, MetricAPICalls, map[string]string{"op": OpGetServer, "result": "not_found"}); got != 1 {
			t.Fatalf("calls_total{GetServer,not_found}=%v, want 1", got)
		}
	})

	t.Run("reboot of an undelivered server is transient and not retried", func(t *testing.T) {
		s := newScripted(t, reply{status: 400, body: string(notDelivered)})
		env := newTestClient(t, testConfig(s.srv.URL))
		_, err := env.client.RebootServer(context.Background(), "fr-par-2", serverID, baremetal.ServerBootTypeRescue, []string{"k"})
		if !IsTransientState(err) {
			t.Fatalf("class %s, want transient: %v", Classify(err), err)
		}
		if s.count() != 1 {
			t.Fatalf("4xx retried: %d requests", s.count())
		}
		if IsAmbiguous(err) {
			t.Fatalf("a rejected request is not ambiguous: %v", err)
		}
	})
}

func TestClassifyEveryKind(t *testing.T) {
	cases := []struct {
		name   string
		reply  reply
		want   Class
		is     func(error) bool
		retry  bool
		status int
	}{
		{"typed not_found", reply{status: 404, body: `{"message":"resource is not found","resource":"baremetal_server","resource_id":"x","type":"not_found"}`}, ClassNotFound, IsNotFound, false, 404},
		{"typed out_of_stock", reply{status: 412, body: `{"message":"resource is out of stock","resource":"EM-A115X-SSD","type":"out_of_stock"}`}, ClassOutOfStock, IsOutOfStock, false, 412},
		{"untyped out of stock message", reply{status: 400, body: `{"message":"Offer EM-A115X-SSD is out of stock"}`}, ClassOutOfStock, IsOutOfStock, false, 400},
		{"typed quotas_exceeded", reply{status: 403, body: `{"details":[{"current":2,"quota":2,"resource":"baremetal_servers"}],"message":"quota(s) exceeded for this resource","type":"quotas_exceeded"}`}, ClassQuota, IsQuotaExceeded, false, 403},
		{"untyped quota message", reply{status: 403, body: `{"message":"Quota exceeded for this resource","type":"invalid_request_error"}`}, ClassQuota, IsQuotaExceeded, false, 403},
		{"typed transient_state", reply{status: 409, body: `{"current_state":"delivering","message":"resource is in a transient state","resource":"baremetal_server","resource_id":"x","type":"transient_state"}`}, ClassTransient, IsTransientState, false, 409},
		{"typed locked", reply{status: 423, body: `{"message":"resource is locked","resource":"baremetal_server","resource_id":"x","type":"locked"}`}, ClassTransient, IsTransientState, false, 423},
		{"typed permissions_denied", reply{status: 403, body: `{"details":[{"action":"write","resource":"baremetal"}],"message":"insufficient permissions","type":"permissions_denied"}`}, ClassPermission, IsPermissionDenied, false, 403},
		{"untyped 403", reply{status: 403, body: `{"message":"Forbidden"}`}, ClassPermission, IsPermissionDenied, false, 403},
		{"typed denied_authentication", reply{status: 401, body: `{"message":"authentication is denied","method":"api_key","reason":"not_found","type":"denied_authentication"}`}, ClassUnauthorized, IsUnauthorized, false, 401},
		{"untyped 401", reply{status: 401, body: `{"message":"Unauthorized"}`}, ClassUnauthorized, IsUnauthorized, false, 401},
		{"typed invalid_arguments", reply{status: 400, body: `{"details":[{"argument_name":"offer_id","help_message":"unknown offer","reason":"constraint"}],"message":"invalid argument(s)","type":"invalid_arguments"}`}, ClassInvalid, nil, false, 400},
		{"typed precondition_failed", reply{status: 412, body: `{"help_message":"x","message":"precondition failed","precondition":"resource_still_in_use","type":"precondition_failed"}`}, ClassInvalid, nil, false, 412},
		{"429", reply{status: 429, body: `{"message":"rate limit exceeded, retry later","type":"too_many_requests"}`}, ClassThrottled, IsRetryable, true, 429},
		{"500 json", reply{status: 500, body: `{"message":"Internal Server Error"}`}, ClassServerError, IsRetryable, true, 500},
		{"502 html", reply{status: 502, body: `<html>Bad Gateway</html>`, ctype: "text/html"}, ClassServerError, IsRetryable, true, 502},
		{"503 empty", reply{status: 503, body: ``, ctype: "text/plain"}, ClassServerError, IsRetryable, true, 503},
		{"504", reply{status: 504, body: `{"message":"Gateway Timeout"}`}, ClassTimeout, IsRetryable, true, 504},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScripted(t, tc.reply)
			cfg := testConfig(s.srv.URL)
			cfg.Retry.MaxAttempts = 1
			env := newTestClient(t, cfg)
			_, err := env.client.GetServer(context.Background(), "fr-par-2", serverID)
			if err == nil {
				t.Fatal("want an error")
			}
			if got := Classify(err); got != tc.want {
				t.Fatalf("Classify=%s, want %s (%v)", got, tc.want, err)
			}
			if tc.is != nil && !tc.is(err) {
				t.Fatalf("predicate false for %v", err)
			}
			if IsRetryable(err) != tc.retry {
				t.Fatalf("IsRetryable=%v, want %v", IsRetryable(err), tc.retry)
			}
			var re *scw.ResponseError
			if errors.As(err, &re) && re.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", re.StatusCode, tc.status)
			}
			if got := env.counter(t, MetricAPICalls, map[string]string{"op": OpGetServer, "result": string(tc.want)}); got != 1 {
				t.Fatalf("calls_total{result=%s}=%v, want 1", tc.want, got)
			}
			// Every other predicate is false: classes do not overlap.
			preds := map[Class]func(error) bool{ClassNotFound: IsNotFound, ClassOutOfStock: IsOutOfStock, ClassQuota: IsQuotaExceeded,
				ClassTransient: IsTransientState, ClassPermission: IsPermissionDenied, ClassUnauthorized: IsUnauthorized}
			for c, p := range preds {
				if c != tc.want && p(err) {
					t.Fatalf("predicate for %s also true", c)
				}
			}
		})
	}
}

func TestClassifyTransportFailures(t *testing.T) {
	t.Run("attempt timeout", func(t *testing.T) {
		s := newScripted(t, reply{hang: true})
		cfg := testConfig(s.srv.URL)
		cfg.RequestTimeout = 50 * time.Millisecond
		cfg.Retry.MaxAttempts = 2
		env := newTestClient(t, cfg)
		_, err := env.client.GetServer(context.Background(), "", serverID)
		var te *TimeoutError
		if !errors.As(err, &te) || Classify(err) != ClassTimeout || !IsRetryable(err) {
			t.Fatalf("want a retryable TimeoutError, got %T %v (class %s)", err, err, Classify(err))
		}
		if s.count() != 2 {
			t.Fatalf("timeouts retried %d times, want 2 attempts", s.count())
		}
		if got := env.counter(t, MetricAPICalls, map[string]string{"op": OpGetServer, "result": "timeout"}); got != 2 {
			t.Fatalf("calls_total{timeout}=%v, want 2", got)
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		cfg := testConfig("http://" + addr)
		cfg.Retry.MaxAttempts = 3
		env := newTestClient(t, cfg)
		_, err = env.client.GetServer(context.Background(), "", serverID)
		if Classify(err) != ClassNetwork || !IsRetryable(err) {
			t.Fatalf("class %s, want network: %v", Classify(err), err)
		}
		var e *Error
		if !errors.As(err, &e) || e.Attempts != 3 {
			t.Fatalf("want 3 attempts recorded, got %+v", e)
		}
		if len(env.clock.Waits()) != 2 {
			t.Fatalf("want 2 backoff waits, got %v", env.clock.Waits())
		}
	})
	t.Run("caller cancel", func(t *testing.T) {
		s := newScripted(t, reply{hang: true})
		env := newTestClient(t, testConfig(s.srv.URL))
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			for s.count() == 0 {
				time.Sleep(time.Millisecond)
			}
			cancel()
		}()
		_, err := env.client.GetServer(ctx, "", serverID)
		if Classify(err) != ClassCanceled || IsRetryable(err) || !errors.Is(err, context.Canceled) {
			t.Fatalf("class %s: %v", Classify(err), err)
		}
		if s.count() != 1 {
			t.Fatalf("a cancelled call was retried: %d", s.count())
		}
	})
	t.Run("plain errors", func(t *testing.T) {
		if Classify(nil) != ClassOK {
			t.Fatal("nil is ok")
		}
		if Classify(errors.New("boom")) != ClassOther {
			t.Fatal("unknown is other")
		}
		if Classify(fmt.Errorf("wrapped: %w", context.DeadlineExceeded)) != ClassTimeout {
			t.Fatal("deadline is timeout")
		}
		if !IsOutOfStock(&ServerStateError{ID: "x", Status: baremetal.ServerStatusOutOfStock}) {
			t.Fatal("a server left out_of_stock is out of stock")
		}
		if IsOutOfStock(&ServerStateError{ID: "x", Status: baremetal.ServerStatusError}) {
			t.Fatal("an errored server is not out of stock")
		}
	})
}

// TestErrorsNameTheOperation: errors say which call failed, on what.
func TestErrorsNameTheOperation(t *testing.T) {
	s := newScripted(t, reply{status: http.StatusNotFound, body: `{"message":"Not Found"}`})
	env := newTestClient(t, testConfig(s.srv.URL))
	_, err := env.client.DeleteServer(context.Background(), "nl-ams-1", "abc")
	if err == nil || !strings.Contains(err.Error(), "DeleteServer in nl-ams-1 abc") || !strings.Contains(err.Error(), "Not Found") {
		t.Fatalf("error does not name op, zone, id: %v", err)
	}
	if got := s.requests()[0].URL.Path; got != "/baremetal/v1/zones/nl-ams-1/servers/abc" {
		t.Fatalf("path %s", got)
	}
}
