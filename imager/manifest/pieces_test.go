package manifest

import (
	"errors"
	"net/http"
	"net/url"
	"testing"
)

// TestStatusError: 2xx reads on, a 4xx other than 408/429 is a refusal,
// the rest may pass on retry.
func TestStatusError(t *testing.T) {
	for code, want := range map[int]error{200: nil, 204: nil, 403: ErrRejected, 404: ErrRejected,
		408: ErrUnreachable, 429: ErrUnreachable, 500: ErrUnreachable, 302: ErrUnreachable} {
		err := statusError(&http.Response{StatusCode: code, Status: http.StatusText(code)})
		if !errors.Is(err, want) || (want == nil) != (err == nil) {
			t.Errorf("statusError(%d) = %v, want %v", code, err, want)
		}
	}
}

// TestLocation: the scheme policy without any read.
func TestLocation(t *testing.T) {
	for _, c := range []struct {
		raw, pin string
		local    bool
		where    string
		err      error
	}{
		{"https://b.example/m.json?X-Amz-Signature=s", "", false, "https://b.example/m.json", nil},
		{"http://b.example/m.json", "", false, "", ErrInsecure},
		{"http://b.example/m.json", "ab", false, "http://b.example/m.json", nil},
		{"/tmp/../tmp/m.json", "", false, "", ErrInsecure},
		{"/tmp/../tmp/m.json", "", true, "/tmp/m.json", nil},
		{"file:///tmp/m.json", "", true, "/tmp/m.json", nil},
		{"ftp://b.example/m.json", "", true, "", ErrInsecure},
	} {
		u, _ := url.Parse(c.raw)
		where, _, err := location(u, c.raw, c.pin, FetchOptions{AllowLocal: c.local})
		if !errors.Is(err, c.err) || (c.err == nil) != (err == nil) || (err == nil && where != c.where) {
			t.Errorf("location(%q, pin %q, local %v) = %q, %v; want %q, %v", c.raw, c.pin, c.local, where, err, c.where, c.err)
		}
	}
}
