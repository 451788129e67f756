package imagesource

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/manifest"
)

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// Plain http is refused before any request unless the NodeClass pins the
// manifest; with the pin, a manifest swapped on the way is refused.
func TestPlainHTTPManifestNeedsAPin(t *testing.T) {
	raw := makeRaw(2<<20, 11)
	w, sumy := publishWeb(t, raw)
	srv := httptest.NewServer(w)
	defer srv.Close()
	murl := srv.URL + "/" + sumy.ManifestKey
	genuine := w.files["/"+sumy.ManifestKey]
	s := newSource(t, Config{})

	_, err := s.Resolve(context.Background(), Settings{ManifestURL: murl})
	wantReason(t, err, ErrInvalidSettings)
	if !strings.Contains(err.Error(), "manifestSHA256") || w.gets.Load()+w.heads.Load() != 0 {
		t.Fatalf("unpinned http: %v (%d requests made)", err, w.gets.Load()+w.heads.Load())
	}

	img, err := s.Resolve(context.Background(), Settings{ManifestURL: murl, ManifestSHA256: sha(genuine)})
	if err != nil {
		t.Fatalf("pinned http manifest: %v", err)
	}
	if img.RawSHA256 != sum(raw) || img.URL != srv.URL+"/"+sumy.Objects[0].Key {
		t.Fatalf("image %v", img)
	}

	// An on-path attacker serves another manifest (another image digest).
	forged := bytes.Replace(genuine, []byte(sum(raw)), []byte(strings.Repeat("0", 64)), 1)
	if bytes.Equal(forged, genuine) {
		t.Fatal("the test did not change the manifest")
	}
	w.files["/"+sumy.ManifestKey] = forged
	s.Invalidate()
	_, err = s.Resolve(context.Background(), Settings{ManifestURL: murl, ManifestSHA256: sha(genuine)})
	wantReason(t, err, ErrManifestPinMismatch)
	if !strings.Contains(err.Error(), sha(forged)) || !strings.Contains(err.Error(), sha(genuine)) {
		t.Fatalf("mismatch error should name both digests: %v", err)
	}
}

// The pin works for manifests found by layout in the bucket too.
func TestManifestPinAppliesToTheBucketLayout(t *testing.T) {
	e := startS3(t)
	e.MustCreateBucket(t, bucket)
	raw := makeRaw(1<<20, 12)
	sumy := publishImage(t, e, "pinned", "v1.12.1", "amd64", raw, "zstd")
	data := must(io.ReadAll(must(e.MustClient(t).GetObject(context.Background(), bucket, sumy.ManifestKey, minio.GetObjectOptions{}))))
	s := newSource(t, e.config())
	set := settings("pinned", "v1.12.1")
	set.ManifestSHA256 = sha(data)
	if _, err := s.Resolve(context.Background(), set); err != nil {
		t.Fatalf("right pin: %v", err)
	}
	set.ManifestSHA256 = strings.Repeat("ab", 32)
	_, err := s.Resolve(context.Background(), set)
	wantReason(t, err, ErrManifestPinMismatch)
}

func TestManifestURLRedirects(t *testing.T) {
	raw := makeRaw(1<<20, 13)
	w, sumy := publishWeb(t, raw)
	other := &webFiles{files: w.files}
	elsewhere := httptest.NewTLSServer(other)
	defer elsewhere.Close()
	mux := http.NewServeMux()
	mux.Handle("/", w)
	mux.HandleFunc("/moved/", func(rw http.ResponseWriter, r *http.Request) {
		http.Redirect(rw, r, "/"+strings.TrimPrefix(r.URL.Path, "/moved/"), http.StatusFound)
	})
	mux.HandleFunc("/away/", func(rw http.ResponseWriter, r *http.Request) {
		http.Redirect(rw, r, elsewhere.URL+"/"+strings.TrimPrefix(r.URL.Path, "/away/"), http.StatusFound)
	})
	mux.HandleFunc("/loop/", func(rw http.ResponseWriter, r *http.Request) {
		http.Redirect(rw, r, r.URL.Path, http.StatusFound)
	})
	srv := httptest.NewTLSServer(mux)
	defer srv.Close()
	pool := append(caBundle(srv), caBundle(elsewhere)...)
	s := newSource(t, Config{CABundle: pool})

	if _, err := s.Resolve(context.Background(), Settings{ManifestURL: srv.URL + "/moved/" + sumy.ManifestKey}); err != nil {
		t.Fatalf("same-host redirect: %v", err)
	}
	_, err := s.Resolve(context.Background(), Settings{ManifestURL: srv.URL + "/away/" + sumy.ManifestKey})
	wantReason(t, err, ErrInvalidSettings)
	if !strings.Contains(err.Error(), "another host") || other.gets.Load() != 0 {
		t.Fatalf("cross-host redirect: %v (%d requests reached the other host)", err, other.gets.Load())
	}
	_, err = s.Resolve(context.Background(), Settings{ManifestURL: srv.URL + "/loop/" + sumy.ManifestKey})
	wantReason(t, err, ErrInvalidSettings)
	if !strings.Contains(err.Error(), "redirects") {
		t.Fatalf("redirect loop: %v", err)
	}
}

func TestSameHostRedirectsPolicy(t *testing.T) {
	req := func(u string) *http.Request { return &http.Request{URL: must(url.Parse(u))} }
	first := []*http.Request{req("https://garage.example/m.json")}
	for u, ok := range map[string]bool{
		"https://garage.example/other/m.json": true,
		"http://garage.example/m.json":        false, // downgrade
		"https://evil.example/m.json":         false,
		"https://garage.example:8443/m.json":  false, // another port is another host
	} {
		if err := manifest.CheckRedirect(req(u), first); (err == nil) != ok {
			t.Errorf("redirect to %s: %v", u, err)
		}
	}
	many := []*http.Request{first[0], first[0], first[0], first[0]}
	if err := manifest.CheckRedirect(req("https://garage.example/x"), many); err == nil {
		t.Error("a fifth request was allowed")
	}
	// From http, staying on http is not a downgrade (the manifest is pinned).
	if err := manifest.CheckRedirect(req("http://h/b"), []*http.Request{req("http://h/a")}); err != nil {
		t.Errorf("http to http: %v", err)
	}
}

// An endpoint that answers headers and then stalls ends at FetchTimeout.
func TestManifestURLTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Length", "1000")
		rw.WriteHeader(http.StatusOK)
		_, _ = rw.Write([]byte(`{"version":`))
		rw.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	s := newSource(t, Config{CABundle: caBundle(srv), FetchTimeout: 300 * time.Millisecond})
	_, err := s.Resolve(context.Background(), Settings{ManifestURL: srv.URL + "/m.json"})
	wantReason(t, err, ErrUnreachable)
	if !strings.Contains(err.Error(), "deadline") && !strings.Contains(err.Error(), "Timeout") {
		t.Fatalf("timeout error %v", err)
	}
}

func TestManifestSizeCap(t *testing.T) {
	big := bytes.Repeat([]byte(" "), manifest.MaxSize+10)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/chunked.json" {
			rw.(http.Flusher).Flush() // no Content-Length: chunked
		}
		_, _ = rw.Write(big)
	}))
	defer srv.Close()
	s := newSource(t, Config{CABundle: caBundle(srv)})
	for _, p := range []string{"/sized.json", "/chunked.json"} {
		_, err := s.Resolve(context.Background(), Settings{ManifestURL: srv.URL + p})
		wantReason(t, err, ErrManifestInvalid)
		if !strings.Contains(err.Error(), "more than") {
			t.Fatalf("%s: %v", p, err)
		}
	}
}

// A self-signed endpoint needs its CA in the bundle; without it the error
// says where to put it. The bundle also serves the S3 endpoint (here a TLS
// proxy in front of the real S3 server).
func TestCustomCABundle(t *testing.T) {
	raw := makeRaw(1<<20, 14)
	w, sumy := publishWeb(t, raw)
	srv := httptest.NewTLSServer(w)
	defer srv.Close()

	_, err := newSource(t, Config{}).Resolve(context.Background(), Settings{ManifestURL: srv.URL + "/" + sumy.ManifestKey})
	wantReason(t, err, ErrUnreachable)
	if !strings.Contains(err.Error(), EnvCABundle) {
		t.Fatalf("unknown CA: %v", err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, caBundle(srv), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := ConfigFromEnv(func(k string) string { return map[string]string{EnvCABundle: path}[k] })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newSource(t, cfg).Resolve(context.Background(), Settings{ManifestURL: srv.URL + "/" + sumy.ManifestKey}); err != nil {
		t.Fatalf("with the CA bundle: %v", err)
	}

	e := startS3(t)
	e.MustCreateBucket(t, bucket)
	publishImage(t, e, "tls", "v1.12.2", "amd64", raw, "zstd")
	target := must(url.Parse(e.Endpoint))
	proxy := httptest.NewTLSServer(httputil.NewSingleHostReverseProxy(target))
	defer proxy.Close()
	c := e.config()
	c.Endpoint = proxy.URL
	_, err = newSource(t, c).Resolve(context.Background(), settings("tls", "v1.12.2"))
	wantReason(t, err, ErrUnreachable)
	if !strings.Contains(err.Error(), EnvCABundle) {
		t.Fatalf("S3 endpoint with an unknown CA: %v", err)
	}
	c.CABundle = caBundle(proxy)
	img, err := newSource(t, c).Resolve(context.Background(), settings("tls", "v1.12.2"))
	if err != nil {
		t.Fatalf("S3 endpoint with the CA bundle: %v", err)
	}
	if !strings.HasPrefix(img.URL, proxy.URL+"/") {
		t.Fatalf("presigned URL %s", Redact(img.URL))
	}
}
