package scaleway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// answer is a transport that answers every request with one status and body.
type answer struct {
	status int
	body   []byte
}

func (a answer) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: a.status, Status: http.StatusText(a.status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": []string{"application/json"}}, Body: io.NopCloser(bytes.NewReader(a.body)),
		ContentLength: int64(len(a.body)), Request: r}, nil
}

// Whatever the API (or whatever stands between it and the controller)
// answers, a read returns a server or a classified error: no crash, no
// success without a server, and the credentials never in the error.
func FuzzAPIAnswer(f *testing.F) {
	for _, s := range []struct {
		status int
		body   string
	}{
		{200, `{"id":"11111111-1111-1111-1111-111111111111","status":"ready","tags":["a"],"ips":[{"address":"51.15.1.2","version":"IPv4"}]}`},
		{404, `{"message":"resource is not found","resource":"server","resource_id":"x","type":"not_found"}`},
		{409, `{"message":"out of stock","type":"out_of_stock"}`},
		{403, `{"message":"quotas exceeded","type":"quotas_exceeded","details":[{"resource":"baremetal_servers","quota":1,"current":1}]}`},
		{400, `{"message":"invalid argument(s)","type":"invalid_arguments","details":[{"argument_name":"offer_id","reason":"constraint"}]}`},
		{429, ``}, {503, `<html>Service Unavailable</html>`}, {200, `{"id":`}, {204, ``},
	} {
		f.Add(s.status, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if status < 100 || status > 599 {
			return
		}
		cfg := testConfig("http://api.invalid")
		cfg.Retry = RetryPolicy{MaxAttempts: 1, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}
		env := newTestClient(t, cfg, WithTransport(answer{status: status, body: body}))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv, err := env.client.GetServer(ctx, "fr-par-2", "11111111-1111-1111-1111-111111111111")
		switch {
		case err == nil && srv == nil:
			t.Fatalf("%d %q: no error and no server", status, body)
		case err != nil && Classify(err) == ClassOK:
			t.Fatalf("%d %q: error %v classified OK", status, body, err)
		case err != nil && strings.Contains(err.Error(), testSecretKey) && !bytes.Contains(body, []byte(testSecretKey)):
			t.Fatalf("%d: the secret key is in the error: %v", status, err)
		}
	})
}
