package imagesource

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/decompress"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/manifest"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/publish"
)

const (
	schematic = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	bucket    = "talos"
)

func makeRaw(size int, seed uint64) []byte {
	b := make([]byte, size)
	r := rand.New(rand.NewPCG(seed, seed+1))
	for off := 1 << 20; off < size; off += 1 << 20 {
		end := min(off+(128<<10), size)
		for i := off; i < end; i++ {
			b[i] = byte(r.Uint32()) & 0x1f
		}
	}
	b[510], b[511] = 0x55, 0xAA
	return b
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// publishImage puts raw into the bucket with the real publish code.
func publishImage(t *testing.T, e *s3env, prefix, version, arch string, raw []byte, formats ...string) *publish.Summary {
	t.Helper()
	in := filepath.Join(t.TempDir(), "metal.raw")
	if err := os.WriteFile(in, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	o := &publish.Options{
		Input: in, SchematicID: schematic, TalosVersion: version, Arch: arch, Prefix: prefix,
		Formats: formats, BlockSize: 1 << 20, SectorSize: 512, VerifyOutput: true, XZEncoder: "auto", MaintenanceAPI: true,
		S3: publish.S3Config{Endpoint: e.Endpoint, Bucket: bucket, Region: e.Region, AccessKey: e.AccessKey, SecretKey: e.SecretKey},
	}
	s, err := publish.Run(context.Background(), o, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	return s
}

func (e *s3env) config() Config {
	return Config{Endpoint: e.Endpoint, Region: e.Region, DefaultBucket: bucket, AccessKeyID: e.AccessKey, SecretAccessKey: e.SecretKey}
}

func newSource(t *testing.T, c Config) *Source {
	t.Helper()
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func settings(prefix, version string) Settings {
	return Settings{Prefix: prefix, SchematicID: schematic, TalosVersion: version}
}

func get(t *testing.T, u string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", Redact(u), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func decodeAll(t *testing.T, format string, b []byte) []byte {
	t.Helper()
	r, err := decompress.NewReader(bytes.NewReader(b), decompress.Format(format), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return out
}

func wantReason(t *testing.T, err error, sentinel *Error) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("error %v (reason %q), want %s", err, ReasonOf(err), sentinel.Reason)
	}
	if ReasonOf(err) != sentinel.Reason {
		t.Fatalf("ReasonOf = %q", ReasonOf(err))
	}
}

func TestResolvePresignedURLFetchesTheImage(t *testing.T) {
	e := startS3(t)
	e.MustCreateBucket(t, bucket)
	raw := makeRaw(4<<20, 1)
	publishImage(t, e, "talos", "v1.12.0", "amd64", raw, "zstd", "xz")

	var logs bytes.Buffer
	s := newSource(t, e.config())
	img, err := s.Resolve(context.Background(), settings("talos", "v1.12.0"))
	if err != nil {
		t.Fatal(err)
	}
	if img.Format != "zstd" || img.RawSHA256 != sum(raw) || img.RawSize != int64(len(raw)) ||
		img.SchematicID != schematic || img.TalosVersion != "v1.12.0" || img.Arch != "amd64" || img.SectorSize != 512 ||
		img.Key != "talos/"+schematic+"/v1.12.0/metal-amd64.raw.zst" || img.Manifest == nil {
		t.Fatalf("image %+v", *img)
	}
	u, err := url.Parse(img.URL)
	if err != nil || u.Query().Get("X-Amz-Signature") == "" || u.Query().Get("X-Amz-Expires") != "3600" {
		t.Fatalf("not a presigned URL with a 1h expiry: %s (%v)", Redact(img.URL), err)
	}
	if strings.Contains(img.URL, e.SecretKey) {
		t.Fatal("the secret key is in the URL")
	}
	if time.Until(img.Expires) < 59*time.Minute {
		t.Errorf("Expires %s", img.Expires)
	}
	// Printing or logging the image never shows the signature.
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("resolved", "image", img)
	for _, out := range []string{fmt.Sprint(img), fmt.Sprintf("%v", img), logs.String()} {
		if strings.Contains(out, "X-Amz-Signature") || strings.Contains(out, u.Query().Get("X-Amz-Signature")) {
			t.Fatalf("signature leaked: %s", out)
		}
	}
	if !strings.Contains(logs.String(), img.RawSHA256) {
		t.Errorf("log lacks the digest: %s", logs.String())
	}

	// What the rescue system would do: fetch without credentials, verify.
	code, body := get(t, img.URL)
	if code != 200 || int64(len(body)) != img.CompressedSize || sum(body) != img.CompressedSHA {
		t.Fatalf("GET: %d, %d bytes sha %s; want %d bytes %s", code, len(body), sum(body), img.CompressedSize, img.CompressedSHA)
	}
	if got := decodeAll(t, img.Format, body); sum(got) != img.RawSHA256 {
		t.Fatal("downloaded image does not decode to the manifest's raw digest")
	}

	// Preference picks xz when asked ("raw", allowed by the NodeClass API,
	// matches nothing).
	st := settings("talos", "v1.12.0")
	st.FormatPreference = []string{"raw", "xz", "zst"}
	img2, err := s.Resolve(context.Background(), st)
	if err != nil || img2.Format != "xz" || !strings.HasSuffix(img2.Key, ".raw.xz") {
		t.Fatalf("xz preference: %v %v", img2, err)
	}
	code, body = get(t, img2.URL)
	if code != 200 || sum(decodeAll(t, "xz", body)) != sum(raw) {
		t.Fatalf("xz GET %d", code)
	}

	// The same resolution through an explicit s3:// manifest URL.
	img3, err := s.Resolve(context.Background(), Settings{ManifestURL: "s3://" + bucket + "/talos/" + schematic + "/v1.12.0/manifest.json"})
	if err != nil || img3.Key != img.Key || img3.RawSHA256 != img.RawSHA256 {
		t.Fatalf("manifest URL: %v %v", img3, err)
	}
}

// expiredImage publishes an image, resolves it with a one-second URL expiry
// and waits until that URL has surely expired.
func expiredImage(t *testing.T, seed uint64) *Image {
	t.Helper()
	e := startS3(t)
	e.MustCreateBucket(t, bucket)
	publishImage(t, e, "", "v1.12.0", "amd64", makeRaw(2<<20, seed), "zstd")
	c := e.config()
	c.URLExpiry = time.Second
	img, err := newSource(t, c).Resolve(context.Background(), settings("", "v1.12.0"))
	if err != nil {
		t.Fatal(err)
	}
	// Presigned URLs have one-second resolution: wait until it is surely past.
	time.Sleep(2500 * time.Millisecond)
	return img
}

func TestResolveExpiredURLIsRefused(t *testing.T) {
	img := expiredImage(t, 2)
	if code, body := get(t, img.URL); code != http.StatusForbidden {
		t.Fatalf("expired URL answered %d: %.200s", code, body)
	}
}

func TestResolveFailures(t *testing.T) {
	e := startS3(t)
	e.MustCreateBucket(t, bucket)
	cl := e.MustClient(t)
	ctx := context.Background()
	raw := makeRaw(2<<20, 3)
	publishImage(t, e, "ok", "v1.12.0", "amd64", raw, "zstd", "xz")
	publishImage(t, e, "arm", "v1.12.0", "arm64", raw, "zstd")
	publishImage(t, e, "xzonly", "v1.12.0", "amd64", raw, "xz")
	for _, p := range []string{"gone", "tampered", "resized", "nometa", "invalid", "otherver"} {
		publishImage(t, e, p, "v1.12.0", "amd64", raw, "zstd")
	}
	key := func(prefix, name string) string { return prefix + "/" + schematic + "/v1.12.0/" + name }
	put := func(k string, b []byte, meta map[string]string) {
		t.Helper()
		if _, err := cl.PutObject(ctx, bucket, k, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{UserMetadata: meta}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.RemoveObject(ctx, bucket, key("gone", "metal-amd64.raw.zst"), minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	obj, _ := cl.StatObject(ctx, bucket, key("tampered", "metal-amd64.raw.zst"), minio.StatObjectOptions{})
	other := bytes.Repeat([]byte{1}, int(obj.Size))
	put(key("tampered", "metal-amd64.raw.zst"), other, map[string]string{manifest.MetaSHA256: sum(other)})
	put(key("resized", "metal-amd64.raw.zst"), []byte("short"), nil)
	put(key("nometa", "metal-amd64.raw.zst"), other, nil) // same size, no metadata: only a download shows it
	put(key("invalid", "manifest.json"), []byte(`{"schemaVersion": 1, "arch": "amd64"}`), nil)
	mb, _ := io.ReadAll(must(cl.GetObject(ctx, bucket, key("ok", "manifest.json"), minio.GetObjectOptions{})))
	put("otherver/"+schematic+"/v1.12.1/manifest.json", mb, nil)

	good := newSource(t, e.config())
	cases := []struct {
		name string
		src  *Source
		set  Settings
		want *Error
	}{
		{"manifest missing", good, settings("ok", "v1.11.0"), ErrManifestMissing},
		{"bucket missing", good, Settings{Bucket: "absent", SchematicID: schematic, TalosVersion: "v1.12.0"}, ErrBucketMissing},
		{"wrong architecture", good, settings("arm", "v1.12.0"), ErrWrongArchitecture},
		{"format unavailable", good, Settings{Prefix: "xzonly", SchematicID: schematic, TalosVersion: "v1.12.0", FormatPreference: []string{"zstd"}}, ErrFormatUnavailable},
		{"only raw accepted", good, Settings{Prefix: "ok", SchematicID: schematic, TalosVersion: "v1.12.0", FormatPreference: []string{"raw"}}, ErrFormatUnavailable},
		{"object missing", good, settings("gone", "v1.12.0"), ErrObjectMissing},
		{"digest metadata mismatch", good, settings("tampered", "v1.12.0"), ErrDigestMismatch},
		{"size mismatch", good, settings("resized", "v1.12.0"), ErrDigestMismatch},
		{"manifest invalid", good, settings("invalid", "v1.12.0"), ErrManifestInvalid},
		{"manifest for another version", good, settings("otherver", "v1.12.1"), ErrManifestInvalid},
		{"manifest URL for another schematic", good, Settings{ManifestURL: "s3://" + bucket + "/" + key("ok", "manifest.json"), SchematicID: strings.Repeat("a", 64)}, ErrManifestInvalid},
		{"wrong secret", newSource(t, Config{Endpoint: e.Endpoint, Region: e.Region, DefaultBucket: bucket, AccessKeyID: e.AccessKey, SecretAccessKey: "wrong-secret-value"}), settings("ok", "v1.12.0"), ErrAccessDenied},
		{"unknown access key", newSource(t, Config{Endpoint: e.Endpoint, Region: e.Region, DefaultBucket: bucket, AccessKeyID: "nobody", SecretAccessKey: "x"}), settings("ok", "v1.12.0"), ErrAccessDenied},
		{"endpoint down", newSource(t, Config{Endpoint: "http://127.0.0.1:1", Region: e.Region, DefaultBucket: bucket, AccessKeyID: "a", SecretAccessKey: "b"}), settings("ok", "v1.12.0"), ErrUnreachable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			img, err := tc.src.Resolve(ctx, tc.set)
			if img != nil {
				t.Fatalf("got an image: %v", img)
			}
			wantReason(t, err, tc.want)
			if strings.Contains(err.Error(), "wrong-secret-value") || strings.Contains(err.Error(), e.SecretKey) {
				t.Fatalf("secret in the error: %v", err)
			}
			if Retryable(err) != (tc.want == ErrUnreachable) {
				t.Errorf("Retryable = %v", Retryable(err))
			}
		})
	}

	// A same-size replacement without metadata passes Resolve; the digest
	// check of the download (what em-imager does) is what catches it.
	img, err := good.Resolve(ctx, settings("nometa", "v1.12.0"))
	if err != nil {
		t.Fatal(err)
	}
	if _, body := get(t, img.URL); sum(body) == img.CompressedSHA {
		t.Fatal("tampered object matches the manifest digest")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestResolveCachesTheManifest(t *testing.T) {
	e := startS3(t)
	e.MustCreateBucket(t, bucket)
	publishImage(t, e, "c", "v1.12.0", "amd64", makeRaw(2<<20, 4), "zstd")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := e.config()
	c.CacheTTL = time.Minute
	c.Now = func() time.Time { return now }
	s := newSource(t, c)
	ctx := context.Background()
	first, err := s.Resolve(ctx, settings("c", "v1.12.0"))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.MustClient(t).RemoveObject(ctx, bucket, "c/"+schematic+"/v1.12.0/manifest.json", minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(30 * time.Second)
	second, err := s.Resolve(ctx, settings("c", "v1.12.0"))
	if err != nil {
		t.Fatalf("within the TTL the cached manifest serves: %v", err)
	}
	if second.RawSHA256 != first.RawSHA256 {
		t.Fatal("cached image differs")
	}
	now = now.Add(31 * time.Second)
	_, err = s.Resolve(ctx, settings("c", "v1.12.0"))
	wantReason(t, err, ErrManifestMissing)

	// Invalidate forgets at once.
	publishImage(t, e, "c", "v1.12.0", "amd64", makeRaw(2<<20, 4), "zstd")
	if _, err := s.Resolve(ctx, settings("c", "v1.12.0")); err != nil {
		t.Fatal(err)
	}
	if err := e.MustClient(t).RemoveObject(ctx, bucket, "c/"+schematic+"/v1.12.0/manifest.json", minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	s.Invalidate()
	_, err = s.Resolve(ctx, settings("c", "v1.12.0"))
	wantReason(t, err, ErrManifestMissing)
}

func TestResolvePresignEndpoint(t *testing.T) {
	e := startS3(t)
	e.MustCreateBucket(t, bucket)
	raw := makeRaw(2<<20, 5)
	publishImage(t, e, "", "v1.12.0", "amd64", raw, "zstd")
	// The controller talks to 127.0.0.1; the rescue system is told "localhost".
	c := e.config()
	c.PresignEndpoint = strings.Replace(e.Endpoint, "127.0.0.1", "localhost", 1)
	img, err := newSource(t, c).Resolve(context.Background(), settings("", "v1.12.0"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(img.URL, c.PresignEndpoint+"/") {
		t.Fatalf("URL %s does not use the presign endpoint", Redact(img.URL))
	}
	if code, body := get(t, img.URL); code != 200 || sum(decodeAll(t, "zstd", body)) != sum(raw) {
		t.Fatalf("GET %d", code)
	}
}

func TestResolvePublicURLs(t *testing.T) {
	e := startS3(t)
	e.MustCreateBucket(t, bucket)
	raw := makeRaw(2<<20, 6)
	publishImage(t, e, "pub", "v1.12.0", "amd64", raw, "zstd")
	c := e.config()
	c.Public = true
	img, err := newSource(t, c).Resolve(context.Background(), settings("pub", "v1.12.0"))
	if err != nil {
		t.Fatal(err)
	}
	want := e.Endpoint + "/" + bucket + "/pub/" + schematic + "/v1.12.0/metal-amd64.raw.zst"
	if img.URL != want || !img.Expires.IsZero() {
		t.Fatalf("public URL %s (expires %s), want %s", img.URL, img.Expires, want)
	}
	c.PublicBaseURL = "https://{bucket}.web.garage.example/"
	img, err = newSource(t, c).Resolve(context.Background(), settings("pub", "v1.12.0"))
	if err != nil {
		t.Fatal(err)
	}
	if img.URL != "https://talos.web.garage.example/pub/"+schematic+"/v1.12.0/metal-amd64.raw.zst" {
		t.Fatalf("public base URL: %s", img.URL)
	}
}

// A manifest published on a plain web server (e.g. Garage's website
// endpoint): the images are fetched from beside it, checked with HEAD.
// webFiles serves the published manifest and its objects the way a web
// endpoint (Garage's) does, over TLS with a test CA unless plain is set.
type webFiles struct {
	files map[string][]byte
	heads atomic.Int32
	gets  atomic.Int32
}

func (w *webFiles) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	b, ok := w.files[r.URL.Path]
	if !ok {
		http.NotFound(rw, r)
		return
	}
	if r.Method == http.MethodHead {
		w.heads.Add(1)
	} else {
		w.gets.Add(1)
	}
	http.ServeContent(rw, r, "", time.Time{}, bytes.NewReader(b))
}

// publishWeb publishes raw to the bucket and copies the manifest and the
// zstd object into a webFiles.
func publishWeb(t *testing.T, raw []byte) (*webFiles, *publish.Summary) {
	t.Helper()
	e := startS3(t)
	e.MustCreateBucket(t, bucket)
	sumy := publishImage(t, e, "web", "v1.12.0", "amd64", raw, "zstd")
	cl := e.MustClient(t)
	w := &webFiles{files: map[string][]byte{}}
	for _, k := range []string{sumy.ManifestKey, sumy.Objects[0].Key} {
		w.files["/"+k] = must(io.ReadAll(must(cl.GetObject(context.Background(), bucket, k, minio.GetObjectOptions{}))))
	}
	return w, sumy
}

// caBundle is the PEM of a TLS test server's certificate.
func caBundle(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

func TestResolveHTTPManifestURL(t *testing.T) {
	raw := makeRaw(2<<20, 7)
	w, sumy := publishWeb(t, raw)
	srv := httptest.NewTLSServer(w)
	defer srv.Close()

	s := newSource(t, Config{CABundle: caBundle(srv)})
	img, err := s.Resolve(context.Background(), Settings{ManifestURL: srv.URL + "/" + sumy.ManifestKey})
	if err != nil {
		t.Fatal(err)
	}
	if img.URL != srv.URL+"/"+sumy.Objects[0].Key || img.Bucket != "" || w.heads.Load() != 1 {
		t.Fatalf("image %v (HEADs %d)", img, w.heads.Load())
	}
	if code, body := getTLS(t, srv, img.URL); code != 200 || sum(decodeAll(t, "zstd", body)) != sum(raw) {
		t.Fatalf("GET %d", code)
	}

	_, err = s.Resolve(context.Background(), Settings{ManifestURL: srv.URL + "/nothing/manifest.json"})
	wantReason(t, err, ErrManifestMissing)
	delete(w.files, "/"+sumy.Objects[0].Key)
	s.Invalidate()
	_, err = s.Resolve(context.Background(), Settings{ManifestURL: srv.URL + "/" + sumy.ManifestKey + "?sig=SECRET"})
	wantReason(t, err, ErrObjectMissing)
	if strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("query in the error: %v", err)
	}
}

func getTLS(t *testing.T, srv *httptest.Server, u string) (int, []byte) {
	t.Helper()
	resp, err := srv.Client().Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", Redact(u), err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, must(io.ReadAll(resp.Body))
}

func TestSettingsAndConfigErrors(t *testing.T) {
	s := newSource(t, Config{Endpoint: "http://127.0.0.1:1", AccessKeyID: "a", SecretAccessKey: "b"})
	for name, set := range map[string]Settings{
		"no schematic":        {TalosVersion: "v1.12.0", Bucket: "b"},
		"bad schematic":       {SchematicID: "zz", TalosVersion: "v1.12.0", Bucket: "b"},
		"bad version":         {SchematicID: schematic, TalosVersion: "latest", Bucket: "b"},
		"bad arch":            {SchematicID: schematic, TalosVersion: "v1.12.0", Bucket: "b", Arch: "x86_64"},
		"bad format":          {SchematicID: schematic, TalosVersion: "v1.12.0", Bucket: "b", FormatPreference: []string{"gzip"}},
		"bad prefix":          {SchematicID: schematic, TalosVersion: "v1.12.0", Bucket: "b", Prefix: "a/../b"},
		"no bucket":           {SchematicID: schematic, TalosVersion: "v1.12.0"},
		"bad URL scheme":      {ManifestURL: "ftp://h/manifest.json"},
		"plain http unpinned": {ManifestURL: "http://h/manifest.json"},
		"bad pin":             {ManifestURL: "http://h/manifest.json", ManifestSHA256: strings.Repeat("A", 64)},
		"s3 URL with no key":  {ManifestURL: "s3://bucket"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.Resolve(context.Background(), set)
			wantReason(t, err, ErrInvalidSettings)
		})
	}
	noS3 := newSource(t, Config{})
	_, err := noS3.Resolve(context.Background(), settings("", "v1.12.0"))
	wantReason(t, err, ErrInvalidSettings)

	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	base := map[string]string{EnvEndpoint: "http://garage:3900", EnvAccessKey: "a", EnvSecretKey: "s3cr3t-value"}
	c, err := ConfigFromEnv(env(base))
	if err != nil || c.Region != DefaultRegion || c.URLExpiry != DefaultURLExpiry || c.CacheTTL != DefaultCacheTTL || c.PresignEndpoint != "http://garage:3900" {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	if strings.Contains(c.String(), "s3cr3t-value") {
		t.Errorf("String shows secrets: %s", c)
	}
	over := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range base {
			m[a] = b
		}
		m[k] = v
		return m
	}
	for name, tc := range map[string]struct {
		env  map[string]string
		want string
	}{
		"bad public":          {over(EnvPublic, "yes please"), EnvPublic},
		"bad expiry":          {over(EnvURLExpiry, "1 hour"), EnvURLExpiry},
		"expiry too long":     {over(EnvURLExpiry, "200h"), EnvURLExpiry},
		"expiry too short":    {over(EnvURLExpiry, "10ms"), EnvURLExpiry},
		"bad ttl":             {over(EnvCacheTTL, "x"), EnvCacheTTL},
		"half credentials":    {over(EnvSecretKey, ""), EnvAccessKey},
		"presign needs creds": {map[string]string{EnvEndpoint: "http://g:1"}, EnvPublic},
		"bad endpoint":        {over(EnvEndpoint, "ftp://g"), EnvEndpoint},
		"bad presign":         {over(EnvPresignEndpoint, "http://g/path"), EnvPresignEndpoint},
		"bad public URL":      {over(EnvPublicURL, "not a url"), EnvPublicURL},
		"missing CA bundle":   {over(EnvCABundle, filepath.Join(t.TempDir(), "none.pem")), EnvCABundle},
		"CA bundle not PEM":   {over(EnvCABundle, writeFile(t, "not a certificate")), EnvCABundle},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ConfigFromEnv(env(tc.env))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one naming %s", err, tc.want)
			}
		})
	}
	pub, err := ConfigFromEnv(env(map[string]string{EnvEndpoint: "http://g:1", EnvPublic: "true", EnvURLExpiry: "2h"}))
	if err != nil || !pub.Public || pub.URLExpiry != 2*time.Hour {
		t.Fatalf("public anonymous config: %+v %v", pub, err)
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"https://s3.example/b/k?X-Amz-Signature=abc&X-Amz-Credential=AK": "https://s3.example/b/k?REDACTED",
		"https://user:pass@s3.example/b/k":                               "https://s3.example/b/k",
		"http://h/k":                                                     "http://h/k",
		"http://h/k#frag":                                                "http://h/k",
		"%zz?secret":                                                     "%zz?REDACTED",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
