package source

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

// TestStatusVerdict pins what each status means for one attempt: read on,
// retry (with the server's Retry-After), or stop with the sentinel.
func TestStatusVerdict(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int
		resuming   bool
		want       error // nil: read the body
		final      bool
		retryAfter time.Duration
	}{
		{name: "200", status: 200},
		{name: "206", status: 206, resuming: true},
		{name: "408 retried", status: 408, want: errRetried},
		{name: "429 retried with Retry-After", status: 429, want: errRetried, retryAfter: 7 * time.Second},
		{name: "503 retried", status: 503, want: errRetried},
		{name: "416 when resuming: the object shrank", status: 416, resuming: true, want: ErrChanged, final: true},
		{name: "416 on a first request is a refusal", status: 416, want: ErrRejected, final: true},
		{name: "404 final", status: 404, want: ErrRejected, final: true},
		{name: "403 final even when resuming", status: 403, resuming: true, want: ErrRejected, final: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := answer{status: tc.status, statusText: http.StatusText(tc.status), retryAfter: tc.retryAfter}
			ae := statusVerdict(a, tc.resuming, 100)
			if tc.want == nil {
				if ae != nil {
					t.Fatalf("got %v, want the body read", ae.err)
				}
				return
			}
			if ae == nil {
				t.Fatal("got nil, want a failed attempt")
			}
			if ae.final != tc.final || ae.retryAfter != tc.retryAfter {
				t.Fatalf("final=%v retryAfter=%v, want final=%v retryAfter=%v", ae.final, ae.retryAfter, tc.final, tc.retryAfter)
			}
			if !errors.Is(tc.want, errRetried) && !errors.Is(ae.err, tc.want) {
				t.Fatalf("err %v, want %v", ae.err, tc.want)
			}
		})
	}
}

// errRetried marks the table rows whose attempt error is retried, carrying
// no sentinel.
var errRetried = errors.New("retried")

// TestResumeVerdict pins when a resumed answer continues the same object,
// when the bytes already delivered are skipped, and when it is refused.
func TestResumeVerdict(t *testing.T) {
	const off = 100
	etag := known{etag: `"v1"`, size: 1000}
	date := known{lastMod: "Mon, 02 Jan 2026 15:04:05 GMT", size: 1000}
	for _, tc := range []struct {
		name    string
		k       known
		a       answer
		discard bool
		changed bool
	}{
		{name: "206 at the offset", k: etag, a: answer{status: 206, etag: `"v1"`, contentRange: "bytes 100-999/1000", length: 900}},
		{name: "206 of unknown total", k: etag, a: answer{status: 206, etag: `"v1"`, contentRange: "bytes 100-999/*", length: 900}},
		{name: "206 at another offset", k: etag, a: answer{status: 206, etag: `"v1"`, contentRange: "bytes 0-999/1000"}, changed: true},
		{name: "206 of another size", k: etag, a: answer{status: 206, etag: `"v1"`, contentRange: "bytes 100-1999/2000"}, changed: true},
		{name: "206 without Content-Range", k: etag, a: answer{status: 206, etag: `"v1"`}, changed: true},
		{name: "another ETag", k: etag, a: answer{status: 206, etag: `"v2"`, contentRange: "bytes 100-999/1000"}, changed: true},
		{name: "ETag wins over Last-Modified", k: known{etag: `"v1"`, lastMod: "a", size: -1}, a: answer{status: 206, etag: `"v1"`, lastMod: "b", contentRange: "bytes 100-999/1000"}},
		{name: "another Last-Modified", k: date, a: answer{status: 200, lastMod: "Tue, 03 Jan 2026 15:04:05 GMT", length: 1000}, changed: true},
		{name: "200 same object: skip what was delivered", k: date, a: answer{status: 200, lastMod: date.lastMod, length: 1000}, discard: true},
		{name: "200 of unknown length", k: etag, a: answer{status: 200, etag: `"v1"`, length: -1}, discard: true},
		{name: "200 of another length", k: etag, a: answer{status: 200, etag: `"v1"`, length: 999}, changed: true},
		{name: "200 without validators", k: known{size: 1000}, a: answer{status: 200, length: 1000}, changed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			discard, ae := resumeVerdict(tc.k, tc.a, off)
			if tc.changed {
				if ae == nil || !ae.final || !errors.Is(ae.err, ErrChanged) {
					t.Fatalf("got %+v, want a final ErrChanged", ae)
				}
				return
			}
			if ae != nil {
				t.Fatalf("got %v, want the object continued", ae.err)
			}
			if discard != tc.discard {
				t.Fatalf("discard=%v, want %v", discard, tc.discard)
			}
		})
	}
}
