package source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func payload(n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(int64(n))).Read(b)
	return b
}

// fastOpts keeps retries quick in tests.
func fastOpts() Options {
	return Options{StallTimeout: 300 * time.Millisecond, BackoffMin: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond, MaxAttempts: 4}
}

// dropAfter hijacks the connection and closes it after n body bytes.
func dropAfter(w http.ResponseWriter, data []byte, n int, extra http.Header) {
	hj := w.(http.Hijacker)
	conn, buf, err := hj.Hijack()
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n", len(data))
	for k := range extra {
		fmt.Fprintf(buf, "%s: %s\r\n", k, extra.Get(k))
	}
	fmt.Fprintf(buf, "\r\n")
	buf.Write(data[:n])
	buf.Flush()
}

func readAll(t *testing.T, url string, o Options) ([]byte, *Reader, error) {
	t.Helper()
	r, err := Open(context.Background(), url, o)
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	return b, r, err
}

func TestResumeAfterDroppedConnection(t *testing.T) {
	data := payload(3 << 20)
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n := requests.Add(1)
		if n == 1 {
			dropAfter(w, data, 1<<20+17, http.Header{"Etag": {`"v1"`}, "Accept-Ranges": {"bytes"}})
			return
		}
		if req.Header.Get("Range") != fmt.Sprintf("bytes=%d-", 1<<20+17) || req.Header.Get("If-Range") != `"v1"` {
			t.Errorf("resume request has Range %q If-Range %q", req.Header.Get("Range"), req.Header.Get("If-Range"))
		}
		w.Header().Set("ETag", `"v1"`)
		http.ServeContent(w, req, "img", time.Time{}, bytes.NewReader(data))
	}))
	defer srv.Close()
	got, r, err := readAll(t, srv.URL+"/img?X-Amz-Signature=secret", fastOpts())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("got %d bytes, not the object", len(got))
	}
	if r.Resumes() != 1 || r.Offset() != int64(len(data)) || r.Size() != int64(len(data)) {
		t.Fatalf("resumes=%d offset=%d size=%d", r.Resumes(), r.Offset(), r.Size())
	}
}

func TestResumeOnServerIgnoringRanges(t *testing.T) {
	data := payload(2 << 20)
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if requests.Add(1) == 1 {
			dropAfter(w, data, 700000, http.Header{"Last-Modified": {"Mon, 02 Jan 2006 15:04:05 GMT"}})
			return
		}
		w.Header().Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
		w.Write(data) // 200, whole object, Range ignored
	}))
	defer srv.Close()
	got, r, err := readAll(t, srv.URL, fastOpts())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) || r.Resumes() != 1 {
		t.Fatalf("got %d bytes, resumes %d", len(got), r.Resumes())
	}
}

func TestObjectChangedOnResume(t *testing.T) {
	data := payload(2 << 20)
	for _, mode := range []string{"etag-206", "etag-200"} {
		var requests atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if requests.Add(1) == 1 {
				dropAfter(w, data, 500000, http.Header{"Etag": {`"v1"`}})
				return
			}
			w.Header().Set("ETag", `"v2"`)
			if mode == "etag-206" {
				w.Header().Set("Content-Range", fmt.Sprintf("bytes 500000-%d/%d", len(data)-1, len(data)))
				w.WriteHeader(http.StatusPartialContent)
				w.Write(data[500000:])
				return
			}
			w.Write(data)
		}))
		_, _, err := readAll(t, srv.URL, fastOpts())
		srv.Close()
		if !errors.Is(err, ErrChanged) {
			t.Errorf("%s: err = %v, want ErrChanged", mode, err)
		}
	}
}

func TestFinalAndRetriedStatuses(t *testing.T) {
	data := payload(1000)
	cases := []struct {
		name     string
		statuses []int
		want     error
		requests int32
	}{
		{"404 is final", []int{404}, ErrRejected, 1},
		{"403 is final", []int{403}, ErrRejected, 1},
		{"503 then 200", []int{503, 200}, nil, 2},
		{"429 then 408 then 200", []int{429, 408, 200}, nil, 3},
		{"always 500", []int{500, 500, 500, 500, 500}, ErrUnreachable, 4},
	}
	for _, c := range cases {
		var requests atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			n := requests.Add(1)
			st := c.statuses[min(int(n), len(c.statuses))-1]
			if st == 429 {
				w.Header().Set("Retry-After", "0")
			}
			w.WriteHeader(st)
			if st == 200 {
				w.Write(data)
			}
		}))
		got, _, err := readAll(t, srv.URL, fastOpts())
		srv.Close()
		if !errors.Is(err, c.want) && !(c.want == nil && err == nil) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
		if c.want == nil && !bytes.Equal(got, data) {
			t.Errorf("%s: wrong body", c.name)
		}
		if requests.Load() != c.requests {
			t.Errorf("%s: %d requests, want %d", c.name, requests.Load(), c.requests)
		}
	}
}

func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there any more
	_, err = Open(context.Background(), "http://"+addr+"/img?token=secret", fastOpts())
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("err = %v, want ErrUnreachable", err)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("error leaks the query string: %v", err)
	}
}

func TestStall(t *testing.T) {
	data := payload(1 << 20)
	release := make(chan struct{})
	defer close(release)
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		requests.Add(1)
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.WriteHeader(200)
		w.Write(data[:1000])
		w.(http.Flusher).Flush()
		select { // then nothing, until the test ends
		case <-release:
		case <-req.Context().Done():
		}
	}))
	defer srv.Close()
	_, _, err := readAll(t, srv.URL, fastOpts())
	if !errors.Is(err, ErrStalled) {
		t.Fatalf("err = %v, want ErrStalled", err)
	}
	if requests.Load() < 2 {
		t.Fatalf("%d requests: a stall must be retried", requests.Load())
	}
}

func TestStallBeforeHeaders(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		select {
		case <-release:
		case <-req.Context().Done():
		}
	}))
	defer srv.Close()
	_, err := Open(context.Background(), srv.URL, fastOpts())
	if !errors.Is(err, ErrStalled) {
		t.Fatalf("err = %v, want ErrStalled", err)
	}
}

func TestOverallTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Length", "100000000")
		for i := 0; i < 1000; i++ { // slow but never stalled
			if _, err := w.Write(make([]byte, 100)); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond)
		}
	}))
	defer srv.Close()
	o := fastOpts()
	o.Timeout = 300 * time.Millisecond
	_, _, err := readAll(t, srv.URL, o)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
}

func TestRedirectFollowed(t *testing.T) {
	data := payload(5000)
	mux := http.NewServeMux()
	mux.HandleFunc("/old", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/new", http.StatusFound) })
	mux.HandleFunc("/new", func(w http.ResponseWriter, r *http.Request) { w.Write(data) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	got, _, err := readAll(t, srv.URL+"/old", fastOpts())
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("err %v, %d bytes", err, len(got))
	}
}

func TestLocalFile(t *testing.T) {
	data := payload(12345)
	p := filepath.Join(t.TempDir(), "img.raw")
	os.WriteFile(p, data, 0o600)
	for _, u := range []string{p, "file://" + p} {
		got, r, err := readAll(t, u, fastOpts())
		if err != nil || !bytes.Equal(got, data) || r.Size() != int64(len(data)) {
			t.Fatalf("%s: err %v, %d bytes", u, err, len(got))
		}
	}
	if _, err := Open(context.Background(), filepath.Join(t.TempDir(), "missing"), fastOpts()); !errors.Is(err, ErrRejected) {
		t.Fatalf("missing file: err = %v", err)
	}
	if _, err := Open(context.Background(), "ftp://example.com/x", fastOpts()); !errors.Is(err, ErrRejected) {
		t.Fatalf("ftp: err = %v", err)
	}
}

func TestRedactURL(t *testing.T) {
	got := RedactURL("https://user:pw@s3.example.com/b/talos.raw.xz?X-Amz-Signature=abc&X-Amz-Credential=k#f")
	if got != "https://s3.example.com/b/talos.raw.xz" {
		t.Fatalf("RedactURL = %q", got)
	}
}

func TestManyInterruptions(t *testing.T) {
	data := payload(1 << 20)
	var mu sync.Mutex
	cuts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		cuts++
		c := cuts
		mu.Unlock()
		w.Header().Set("ETag", `"v1"`)
		if c <= 10 { // ten drops, more than MaxAttempts, each after progress
			start := int64(0)
			if rg := req.Header.Get("Range"); rg != "" {
				fmt.Sscanf(rg, "bytes=%d-", &start)
			}
			hj, _, _ := w.(http.Hijacker).Hijack()
			status := "200 OK"
			hdr := fmt.Sprintf("Content-Length: %d\r\n", len(data))
			if start > 0 {
				status = "206 Partial Content"
				hdr = fmt.Sprintf("Content-Length: %d\r\nContent-Range: bytes %d-%d/%d\r\n", int64(len(data))-start, start, len(data)-1, len(data))
			}
			fmt.Fprintf(hj, "HTTP/1.1 %s\r\nETag: \"v1\"\r\n%s\r\n", status, hdr)
			hj.Write(data[start : start+50000])
			hj.Close()
			return
		}
		http.ServeContent(w, req, "x", time.Time{}, bytes.NewReader(data))
	}))
	defer srv.Close()
	got, r, err := readAll(t, srv.URL, fastOpts())
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("err %v, %d bytes", err, len(got))
	}
	if r.Resumes() != 10 {
		t.Fatalf("resumes = %d, want 10", r.Resumes())
	}
}

// TestCloseDuringRead closes the reader while another goroutine is blocked
// in Read (what em-imager does on SIGTERM): the Read must return.
func TestCloseDuringRead(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Length", "1000000")
		w.WriteHeader(200)
		w.Write(make([]byte, 10))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-req.Context().Done():
		}
	}))
	defer srv.Close()
	o := fastOpts()
	o.StallTimeout = time.Hour
	r, err := Open(context.Background(), srv.URL, o)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := io.ReadAll(r)
		done <- err
	}()
	for r.Offset() < 10 {
		time.Sleep(5 * time.Millisecond)
	}
	r.Close()
	if err := <-done; err == nil {
		t.Fatal("Read returned no error after Close")
	}
}
