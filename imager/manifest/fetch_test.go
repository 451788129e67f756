package manifest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// manifestServer serves a valid manifest at /talos/manifest.json, and
// redirects, errors and oversized bodies at other paths.
type manifestServer struct {
	*httptest.Server
	body     []byte
	requests atomic.Int32
	other    string // base URL of another server, for cross-host redirects
	hang     chan struct{}
}

func newManifestServer(t *testing.T, tls bool) *manifestServer {
	t.Helper()
	body, err := valid().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	s := &manifestServer{body: body, hang: make(chan struct{})}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		switch r.URL.Path {
		case "/talos/manifest.json":
			w.Write(s.body)
		case "/same-host":
			http.Redirect(w, r, "/talos/manifest.json", http.StatusFound)
		case "/other-host":
			http.Redirect(w, r, s.other+"/talos/manifest.json", http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/big":
			w.Write(make([]byte, MaxSize+1))
		case "/busy":
			http.Error(w, "slow down", http.StatusServiceUnavailable)
		case "/hang":
			select {
			case <-s.hang:
			case <-r.Context().Done():
			}
		default:
			http.NotFound(w, r)
		}
	})
	if tls {
		s.Server = httptest.NewTLSServer(h)
	} else {
		s.Server = httptest.NewServer(h)
	}
	t.Cleanup(func() { close(s.hang); s.Close() })
	return s
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestFetchRules(t *testing.T) {
	plain := newManifestServer(t, false)
	secure := newManifestServer(t, true)
	plain.other, secure.other = secure.URL, plain.URL
	pin := digest(plain.body)
	wrong := strings.Repeat("0", 64)
	const sig = "?X-Amz-Signature=topsecret"
	ctx := context.Background()
	cases := []struct {
		name    string
		url     string
		opts    FetchOptions
		want    error // nil: success
		noCalls bool  // refused before any request
	}{
		{"https", secure.URL + "/talos/manifest.json" + sig, FetchOptions{Client: secure.Client()}, nil, false},
		{"https pinned", secure.URL + "/talos/manifest.json", FetchOptions{Client: secure.Client(), SHA256: strings.ToUpper(pin)}, nil, false},
		{"https wrong pin", secure.URL + "/talos/manifest.json", FetchOptions{Client: secure.Client(), SHA256: wrong}, ErrPinMismatch, false},
		{"http unpinned", plain.URL + "/talos/manifest.json" + sig, FetchOptions{}, ErrInsecure, true},
		{"http pinned", plain.URL + "/talos/manifest.json", FetchOptions{SHA256: pin}, nil, false},
		{"http wrong pin", plain.URL + "/talos/manifest.json" + sig, FetchOptions{SHA256: wrong}, ErrPinMismatch, false},
		{"pin not hex", plain.URL + "/talos/manifest.json", FetchOptions{SHA256: "abc"}, ErrInsecure, true},
		{"ftp", "ftp://example.invalid/manifest.json", FetchOptions{}, ErrInsecure, true},
		{"local not allowed", "/etc/hostname", FetchOptions{}, ErrInsecure, true},
		{"same-host redirect", secure.URL + "/same-host", FetchOptions{Client: secure.Client()}, nil, false},
		{"cross-host redirect", plain.URL + "/other-host", FetchOptions{SHA256: pin}, ErrRedirect, false},
		{"https to http redirect", secure.URL + "/other-host", FetchOptions{Client: secure.Client()}, ErrRedirect, false},
		{"redirect loop", plain.URL + "/loop", FetchOptions{SHA256: pin}, ErrRedirect, false},
		{"404", secure.URL + "/nothing" + sig, FetchOptions{Client: secure.Client()}, ErrRejected, false},
		{"503", secure.URL + "/busy", FetchOptions{Client: secure.Client()}, ErrUnreachable, false},
		{"too big", secure.URL + "/big", FetchOptions{Client: secure.Client()}, ErrInvalid, false},
		{"time limit", secure.URL + "/hang", FetchOptions{Client: secure.Client(), Timeout: 300 * time.Millisecond}, ErrUnreachable, false},
		{"unreachable", "https://127.0.0.1:1/manifest.json", FetchOptions{}, ErrUnreachable, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := plain.requests.Load() + secure.requests.Load()
			f, err := Fetch(ctx, c.url, c.opts)
			if c.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if f.SHA256 != pin || f.SchematicID != schematic || strings.Contains(f.Location, "topsecret") {
					t.Fatalf("fetched %+v", f)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("Fetch = %v, want %v", err, c.want)
			}
			if strings.Contains(err.Error(), "topsecret") {
				t.Fatalf("the signature leaked into the error: %v", err)
			}
			if calls := plain.requests.Load() + secure.requests.Load() - before; c.noCalls && calls != 0 {
				t.Fatalf("%d requests made before refusing", calls)
			}
		})
	}
}

func TestFetchLocalAndFileURL(t *testing.T) {
	dir := t.TempDir()
	body, _ := valid().Marshal()
	p := filepath.Join(dir, "manifest.json")
	if err := os.WriteFile(p, body, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{p, "file://" + p} {
		f, err := Fetch(context.Background(), u, FetchOptions{AllowLocal: true})
		if err != nil {
			t.Fatal(err)
		}
		if got := f.FileURL("metal-amd64.raw.xz"); got != filepath.Join(dir, "metal-amd64.raw.xz") {
			t.Fatalf("FileURL = %s", got)
		}
	}
	if _, err := Fetch(context.Background(), filepath.Join(dir, "missing.json"), FetchOptions{AllowLocal: true}); !errors.Is(err, ErrRejected) {
		t.Fatalf("missing file: %v", err)
	}
	os.WriteFile(p, []byte(`{"schemaVersion": 1}`), 0o644)
	if _, err := Fetch(context.Background(), p, FetchOptions{AllowLocal: true}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("invalid manifest: %v", err)
	}

	srv := newManifestServer(t, true)
	f, err := Fetch(context.Background(), srv.URL+"/talos/manifest.json?X-Amz-Signature=topsecret", FetchOptions{Client: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.FileURL("metal-amd64.raw.zst"); got != srv.URL+"/talos/metal-amd64.raw.zst" {
		t.Fatalf("FileURL = %s", got)
	}
}

func TestPick(t *testing.T) {
	m := valid()
	if f, err := m.Pick(PreferredFormats); err != nil || f.Format != FormatZstd {
		t.Fatalf("Pick(default) = %+v, %v", f, err)
	}
	if f, err := m.Pick([]string{FormatXZ}); err != nil || f.Format != FormatXZ {
		t.Fatalf("Pick(xz) = %+v, %v", f, err)
	}
	m.Files = m.Files[1:]
	if _, err := m.Pick([]string{FormatZstd}); err == nil || !strings.Contains(err.Error(), "lists xz") {
		t.Fatalf("Pick of a missing format: %v", err)
	}
}
