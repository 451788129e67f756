package publish

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/decompress"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/manifest"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

const (
	schematic = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	bucket    = "talos"
)

// makeRaw returns a disk-image-like blob: an MBR boot signature, runs of
// zeros (as in a real image's free space) and pseudo-random data.
func makeRaw(size int, seed uint64) []byte {
	b := make([]byte, size)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for off := 1 << 20; off < size; off += 1 << 20 {
		end := min(off+(256<<10), size)
		for i := off; i < end; i += 8 {
			v := r.Uint64()
			for j := 0; j < 8 && i+j < end; j++ {
				b[i+j] = byte(v>>(8*j)) & 0x3f // compressible but not trivially
			}
		}
	}
	copy(b[446:], []byte("EM-TEST partition table"))
	b[510], b[511] = 0x55, 0xAA
	return b
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// compress runs Debian's xz or zstd on raw and returns the output.
func compress(t *testing.T, tool string, raw []byte, args ...string) []byte {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		t.Fatalf("%s is needed (make deps installs it): %v", tool, err)
	}
	cmd := exec.Command(tool, append(args, "-c", "-q")...)
	cmd.Stdin = bytes.NewReader(raw)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return out
}

type result struct {
	code   int
	sum    Summary
	stdout string
	stderr string
}

func (e *s3env) env(over map[string]string) func(string) string {
	m := map[string]string{
		EnvEndpoint: e.Endpoint, EnvBucket: bucket, EnvRegion: e.Region,
		EnvAccessKey: e.AccessKey, EnvSecretKey: e.SecretKey,
	}
	for k, v := range over {
		m[k] = v
	}
	return func(k string) string { return m[k] }
}

func publish(t *testing.T, getenv func(string) string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := mainEnv(context.Background(), args, &out, &errb, getenv, "")
	r := result{code: code, stdout: out.String(), stderr: errb.String()}
	dec := json.NewDecoder(bytes.NewReader(out.Bytes()))
	if err := dec.Decode(&r.sum); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON object:\n%s", out.String())
	}
	return r
}

func baseArgs(input string, extra ...string) []string {
	return append([]string{"--input", input, "--schematic", schematic, "--talos-version", "v1.12.0", "--prefix", "images", "--block-size", "1MiB", "--maintenance-api"}, extra...)
}

func dir() string { return "images/" + schematic + "/v1.12.0/" }

// fetch downloads key and returns its bytes and object info.
func fetch(t *testing.T, c *minio.Client, key string) ([]byte, minio.ObjectInfo) {
	t.Helper()
	obj, err := c.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	st, err := obj.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return b, st
}

func decode(t *testing.T, format string, b []byte) []byte {
	t.Helper()
	r, err := decompress.NewReader(bytes.NewReader(b), decompress.Format(format), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("decode %s: %v", format, err)
	}
	return out
}

func listKeys(t *testing.T, c *minio.Client) []string {
	t.Helper()
	var keys []string
	for o := range c.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

func TestPublishRawThenRepublishChangesNothing(t *testing.T) {
	s3 := startS3(t)
	s3.MustCreateBucket(t, bucket)
	c := s3.MustClient(t)
	raw := makeRaw(6<<20, 1)
	in := writeFile(t, "metal-amd64.raw", raw)

	r := publish(t, s3.env(nil), baseArgs(in)...)
	if r.code != 0 || !r.sum.OK {
		t.Fatalf("publish: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if r.sum.ManifestAction != "uploaded" || len(r.sum.Objects) != 2 {
		t.Fatalf("summary: %+v", r.sum)
	}
	for _, o := range r.sum.Objects {
		if o.Action != "uploaded" {
			t.Errorf("%s: action %s", o.Key, o.Action)
		}
	}
	if r.sum.InputFormat != "raw" || r.sum.InputSHA256 != sum(raw) {
		t.Errorf("input: %s %s", r.sum.InputFormat, r.sum.InputSHA256)
	}

	// The manifest in the bucket describes exactly the objects beside it.
	mb, _ := fetch(t, c, dir()+"manifest.json")
	m, err := manifest.Parse(mb)
	if err != nil {
		t.Fatal(err)
	}
	if m.Raw.SHA256 != sum(raw) || m.Raw.Size != int64(len(raw)) || m.Arch != "amd64" || m.SchematicID != schematic || m.TalosVersion != "v1.12.0" || m.SectorSize != 512 {
		t.Fatalf("manifest: %+v", m)
	}
	if m.Tool.Name != ToolName {
		t.Errorf("tool %+v", m.Tool)
	}
	before := map[string]minio.ObjectInfo{}
	for _, format := range []string{manifest.FormatZstd, manifest.FormatXZ} {
		f, ok := m.File(format)
		if !ok {
			t.Fatalf("manifest lacks %s", format)
		}
		if f.BlockSize != 1<<20 {
			t.Errorf("%s blockSize %d", format, f.BlockSize)
		}
		b, st := fetch(t, c, dir()+f.Name)
		if int64(len(b)) != f.Size || sum(b) != f.SHA256 {
			t.Fatalf("%s: object %d bytes %s, manifest %d %s", f.Name, len(b), sum(b), f.Size, f.SHA256)
		}
		if metaSHA256(st.UserMetadata) != f.SHA256 {
			t.Errorf("%s: sha256 metadata %q", f.Name, metaSHA256(st.UserMetadata))
		}
		if got := decode(t, format, b); !bytes.Equal(got, raw) {
			t.Fatalf("%s does not decode to the raw image", f.Name)
		}
		before[f.Name] = st
	}
	_, mst := fetch(t, c, dir()+"manifest.json")
	before["manifest.json"] = mst

	// Once more: nothing is uploaded, nothing changes.
	r2 := publish(t, s3.env(nil), baseArgs(in)...)
	if r2.code != 0 || r2.sum.ManifestAction != "skipped" {
		t.Fatalf("republish: exit %d %+v\n%s", r2.code, r2.sum, r2.stderr)
	}
	for _, o := range r2.sum.Objects {
		if o.Action != "skipped" {
			t.Errorf("republish uploaded %s again", o.Key)
		}
	}
	for name, st := range before {
		_, now := fetch(t, c, dir()+name)
		if now.ETag != st.ETag || !now.LastModified.Equal(st.LastModified) {
			t.Errorf("%s changed: etag %s -> %s, modified %s -> %s", name, st.ETag, now.ETag, st.LastModified, now.LastModified)
		}
	}
	if len(listKeys(t, c)) != 3 {
		t.Errorf("bucket holds %v", listKeys(t, c))
	}
}

func TestPublishCompressedInputs(t *testing.T) {
	s3 := startS3(t)
	s3.MustCreateBucket(t, bucket)
	c := s3.MustClient(t)
	raw := makeRaw(5<<20, 2)
	xzIn := compress(t, "xz", raw, "-T2", "--block-size=1MiB")
	zstIn := compress(t, "zstd", raw, "-3")

	t.Run("xz kept unchanged", func(t *testing.T) {
		r := publish(t, s3.env(nil), baseArgs(writeFile(t, "metal-amd64.raw.xz", xzIn), "--formats", "xz", "--prefix", "kept")...)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		f, _ := r.sum.Manifest.File(manifest.FormatXZ)
		if f.SHA256 != sum(xzIn) || f.Encoder != "upstream" || f.BlockSize != 0 || r.sum.InputFormat != "xz" {
			t.Fatalf("xz entry %+v (input %s)", f, sum(xzIn))
		}
		if r.sum.Manifest.Raw.SHA256 != sum(raw) {
			t.Fatal("raw digest wrong")
		}
	})
	t.Run("xz reencoded with the go encoder", func(t *testing.T) {
		r := publish(t, s3.env(nil), baseArgs(writeFile(t, "metal-amd64.raw.xz", xzIn), "--formats", "xz", "--reencode", "--xz-encoder", "go", "--prefix", "goenc")...)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		f, _ := r.sum.Manifest.File(manifest.FormatXZ)
		if f.Encoder != "ulikunitz/xz" || f.BlockSize != 1<<20 {
			t.Fatalf("xz entry %+v", f)
		}
		b, _ := fetch(t, c, r.sum.Objects[0].Key)
		if !bytes.Equal(decode(t, "xz", b), raw) {
			t.Fatal("Go-encoded xz does not decode to the raw image")
		}
	})
	t.Run("zst from URL to both formats", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/metal-amd64.raw.zst" {
				http.NotFound(w, r)
				return
			}
			w.Write(zstIn)
		}))
		defer srv.Close()
		r := publish(t, s3.env(nil), baseArgs(srv.URL+"/metal-amd64.raw.zst?token=secret", "--formats", "zst,xz", "--prefix", "fromurl")...)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		zf, _ := r.sum.Manifest.File(manifest.FormatZstd)
		xf, _ := r.sum.Manifest.File(manifest.FormatXZ)
		if zf.SHA256 != sum(zstIn) || zf.Encoder != "upstream" {
			t.Errorf("zstd entry %+v", zf)
		}
		if xf.Encoder == "upstream" || xf.BlockSize != 1<<20 {
			t.Errorf("xz entry %+v", xf)
		}
		for _, o := range r.sum.Objects {
			b, _ := fetch(t, c, o.Key)
			if !bytes.Equal(decode(t, o.Format, b), raw) {
				t.Fatalf("%s does not decode to the raw image", o.Key)
			}
		}
		if strings.Contains(r.stdout+r.stderr, "secret") {
			t.Error("the input URL's query leaked into the output")
		}
	})
}

// Large enough that the zstd file goes up as a multipart upload (16 MiB parts).
func TestPublishMultipart(t *testing.T) {
	s3 := startS3(t)
	s3.MustCreateBucket(t, bucket)
	raw := make([]byte, 40<<20)
	rnd := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < len(raw); i += 8 {
		v := rnd.Uint64()
		for j := 0; j < 8; j++ {
			raw[i+j] = byte(v >> (8 * j))
		}
	}
	raw[510], raw[511] = 0x55, 0xAA
	r := publish(t, s3.env(nil), baseArgs(writeFile(t, "big.raw", raw), "--formats", "zst", "--block-size", "4MiB")...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	b, st := fetch(t, s3.MustClient(t), r.sum.Objects[0].Key)
	if int64(len(b)) < 32<<20 {
		t.Fatalf("zstd file is %d bytes: too small to need multipart", len(b))
	}
	// A multipart ETag is "<md5 of part md5s>-<parts>".
	if !strings.Contains(st.ETag, "-") {
		t.Errorf("ETag %q: not a multipart upload", st.ETag)
	}
	if !bytes.Equal(decode(t, "zstd", b), raw) || sum(b) != r.sum.Objects[0].SHA256 {
		t.Fatal("multipart object differs")
	}
}

func TestPublishRefusesBadInputBeforeUploading(t *testing.T) {
	s3 := startS3(t)
	s3.MustCreateBucket(t, bucket)
	c := s3.MustClient(t)
	raw := makeRaw(4<<20, 3)
	xzIn := compress(t, "xz", raw, "-T1", "--block-size=1MiB")
	zstIn := compress(t, "zstd", raw)

	corrupt := bytes.Clone(xzIn)
	corrupt[len(corrupt)/2] ^= 0xFF
	zcorrupt := bytes.Clone(zstIn)
	zcorrupt[len(zcorrupt)/2] ^= 0xFF
	noSig := bytes.Clone(raw)
	noSig[510] = 0
	cases := []struct {
		name  string
		input []byte
		code  string
		exit  int
	}{
		{"xz flipped byte", corrupt, CodeCorruptInput, 4},
		{"zstd flipped byte", zcorrupt, CodeCorruptInput, 4},
		{"xz truncated", xzIn[:len(xzIn)*2/3], CodeTruncatedInput, 4},
		{"zstd truncated", zstIn[:len(zstIn)/2], CodeTruncatedInput, 4},
		{"xz trailing garbage", append(bytes.Clone(xzIn), []byte("garbage after the stream")...), CodeCorruptInput, 4},
		{"raw not whole sectors", raw[:len(raw)-100], CodeCorruptInput, 4},
		{"not a disk image", noSig, CodeNotDiskImage, 4},
		{"empty", nil, CodeCorruptInput, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := publish(t, s3.env(nil), baseArgs(writeFile(t, "in", tc.input))...)
			if r.code != tc.exit || r.sum.OK || r.sum.Error == nil || r.sum.Error.Code != tc.code {
				t.Fatalf("exit %d, summary %+v; want exit %d code %s\n%s", r.code, r.sum, tc.exit, tc.code, r.stderr)
			}
			if keys := listKeys(t, c); len(keys) != 0 {
				t.Fatalf("bad input reached the bucket: %v", keys)
			}
		})
	}
	t.Run("unreachable URL", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		defer srv.Close()
		r := publish(t, s3.env(nil), baseArgs(srv.URL+"/nope.raw.xz")...)
		if r.code != 3 || r.sum.Error.Code != CodeInputUnreachable || !strings.Contains(r.sum.Error.Message, "404") {
			t.Fatalf("exit %d %+v", r.code, r.sum.Error)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		r := publish(t, s3.env(nil), baseArgs(filepath.Join(t.TempDir(), "absent.raw"))...)
		if r.code != 3 || r.sum.Error.Code != CodeInputUnreachable {
			t.Fatalf("exit %d %+v", r.code, r.sum.Error)
		}
	})
}

func TestPublishS3Failures(t *testing.T) {
	s3 := startS3(t)
	s3.MustCreateBucket(t, bucket)
	in := writeFile(t, "metal-amd64.raw", makeRaw(2<<20, 4))

	t.Run("wrong credentials", func(t *testing.T) {
		const wrong = "not-the-secret-XYZ"
		r := publish(t, s3.env(map[string]string{EnvSecretKey: wrong}), baseArgs(in)...)
		if r.code != 5 || r.sum.Error.Code != CodeS3AccessDenied {
			t.Fatalf("exit %d %+v", r.code, r.sum.Error)
		}
		if strings.Contains(r.stdout+r.stderr, wrong) || strings.Contains(r.stdout+r.stderr, s3.SecretKey) {
			t.Fatal("a secret key appears in the output")
		}
	})
	t.Run("unknown access key", func(t *testing.T) {
		r := publish(t, s3.env(map[string]string{EnvAccessKey: "nobody"}), baseArgs(in)...)
		if r.code != 5 || r.sum.Error.Code != CodeS3AccessDenied {
			t.Fatalf("exit %d %+v", r.code, r.sum.Error)
		}
	})
	t.Run("no such bucket", func(t *testing.T) {
		r := publish(t, s3.env(map[string]string{EnvBucket: "absent"}), baseArgs(in)...)
		if r.code != 6 || r.sum.Error.Code != CodeS3NoSuchBucket {
			t.Fatalf("exit %d %+v", r.code, r.sum.Error)
		}
	})
	t.Run("endpoint down", func(t *testing.T) {
		r := publish(t, s3.env(map[string]string{EnvEndpoint: "http://127.0.0.1:1"}), baseArgs(in)...)
		if r.code != 6 || r.sum.Error.Code != CodeS3Unreachable {
			t.Fatalf("exit %d %+v", r.code, r.sum.Error)
		}
	})
}

func TestPublishConflict(t *testing.T) {
	s3 := startS3(t)
	s3.MustCreateBucket(t, bucket)
	a := writeFile(t, "a.raw", makeRaw(2<<20, 5))
	b := writeFile(t, "b.raw", makeRaw(2<<20, 6))
	if r := publish(t, s3.env(nil), baseArgs(a)...); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	r := publish(t, s3.env(nil), baseArgs(b)...)
	if r.code != 7 || r.sum.Error.Code != CodeConflict {
		t.Fatalf("exit %d %+v", r.code, r.sum.Error)
	}
	r = publish(t, s3.env(nil), baseArgs(b, "--force")...)
	if r.code != 0 || r.sum.ManifestAction != "uploaded" {
		t.Fatalf("--force: exit %d %+v", r.code, r.sum)
	}
	mb, _ := fetch(t, s3.MustClient(t), dir()+"manifest.json")
	m, err := manifest.Parse(mb)
	if err != nil || m.Raw.SHA256 != r.sum.Manifest.Raw.SHA256 {
		t.Fatalf("manifest after --force: %v %+v", err, m)
	}
}

func TestPublishUsageErrors(t *testing.T) {
	s3 := &s3env{&testenv.S3{Endpoint: "http://127.0.0.1:1", AccessKey: "a", SecretKey: "s", Region: "garage"}}
	in := writeFile(t, "x.raw", makeRaw(1<<20, 8))
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no input", nil, []string{"--schematic", schematic, "--talos-version", "v1.12.0"}, "--input"},
		{"bad schematic", nil, []string{"--input", in, "--schematic", "xyz", "--talos-version", "v1.12.0"}, "--schematic"},
		{"bad version", nil, []string{"--input", in, "--schematic", schematic, "--talos-version", "1.12"}, "--talos-version"},
		{"bad arch", nil, baseArgs(in, "--arch", "s390x"), "--arch"},
		{"bad format", nil, baseArgs(in, "--formats", "gz"), "--formats"},
		{"bad block size", nil, baseArgs(in, "--block-size", "12KiB"), "--block-size"},
		{"bad block size syntax", nil, baseArgs(in, "--block-size", "4M"), "--block-size"},
		{"bad sector", nil, baseArgs(in, "--sector-size", "1000"), "--sector-size"},
		{"bad prefix", nil, baseArgs(in, "--prefix", "../x"), "--prefix"},
		{"bad xz encoder", nil, baseArgs(in, "--xz-encoder", "7z"), "--xz-encoder"},
		{"unknown flag", nil, baseArgs(in, "--secret", "x"), "flag provided but not defined"},
		{"extra argument", nil, append(baseArgs(in), "extra"), "unexpected arguments"},
		{"no endpoint", map[string]string{EnvEndpoint: ""}, baseArgs(in), EnvEndpoint},
		{"endpoint with path", map[string]string{EnvEndpoint: "http://h:1/bucket"}, baseArgs(in), EnvEndpoint},
		{"no bucket", map[string]string{EnvBucket: ""}, baseArgs(in), "bucket"},
		{"no secret", map[string]string{EnvSecretKey: ""}, baseArgs(in), EnvSecretKey},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := publish(t, s3.env(tc.env), tc.args...)
			if r.code != 2 || r.sum.Error == nil || r.sum.Error.Code != CodeInvalidArgument || !strings.Contains(r.sum.Error.Message, tc.want) {
				t.Fatalf("exit %d %+v, want exit 2 naming %q", r.code, r.sum.Error, tc.want)
			}
		})
	}
}

func TestPublishInterrupted(t *testing.T) {
	s3 := startS3(t)
	s3.MustCreateBucket(t, bucket)
	in := writeFile(t, "x.raw", makeRaw(2<<20, 9))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb bytes.Buffer
	code := mainEnv(ctx, baseArgs(in), &out, &errb, s3.env(nil), "")
	var s Summary
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	if code != 130 || s.Error == nil || s.Error.Code != CodeInterrupted {
		t.Fatalf("exit %d %+v", code, s.Error)
	}
	if keys := listKeys(t, s3.MustClient(t)); len(keys) != 0 {
		t.Fatalf("uploaded %v", keys)
	}
}

// --public is recorded in the manifest; changing it rewrites the manifest
// alone, the image files stay as they are.
func TestPublishPublicFlagRewritesOnlyTheManifest(t *testing.T) {
	s3 := startS3(t)
	s3.MustCreateBucket(t, bucket)
	in := writeFile(t, "x.raw", makeRaw(2<<20, 10))
	r := publish(t, s3.env(nil), baseArgs(in, "--formats", "zst")...)
	if r.code != 0 || r.sum.Manifest.Public {
		t.Fatalf("exit %d public=%v", r.code, r.sum.Manifest.Public)
	}
	r = publish(t, s3.env(nil), baseArgs(in, "--formats", "zst", "--public")...)
	if r.code != 0 || r.sum.ManifestAction != "uploaded" || r.sum.Objects[0].Action != "skipped" {
		t.Fatalf("exit %d %+v", r.code, r.sum)
	}
	mb, _ := fetch(t, s3.MustClient(t), dir()+"manifest.json")
	m, err := manifest.Parse(mb)
	if err != nil || !m.Public {
		t.Fatalf("manifest: %v public=%v", err, m != nil && m.Public)
	}
}

// Another encoder (say, another xz version) making different bytes of the
// same raw image must not replace the published object: readers of the
// current manifest would see a digest mismatch until the new one lands.
func TestRepublishWithAnotherEncoderKeepsThePublishedFile(t *testing.T) {
	s3 := startS3(t)
	s3.MustCreateBucket(t, bucket)
	c := s3.MustClient(t)
	in := writeFile(t, "x.raw", makeRaw(3<<20, 13))
	r := publish(t, s3.env(nil), baseArgs(in, "--formats", "xz", "--xz-encoder", "external")...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	first := r.sum.Objects[0]
	_, before := fetch(t, c, first.Key)

	r = publish(t, s3.env(nil), baseArgs(in, "--formats", "xz", "--xz-encoder", "go")...)
	if r.code != 0 || r.sum.Objects[0].Action != "skipped" || r.sum.Objects[0].SHA256 != first.SHA256 || r.sum.ManifestAction != "skipped" {
		t.Fatalf("exit %d %+v", r.code, r.sum)
	}
	if _, after := fetch(t, c, first.Key); after.ETag != before.ETag {
		t.Fatal("the xz object was replaced")
	}

	// --reencode asks for the new encoding explicitly.
	r = publish(t, s3.env(nil), baseArgs(in, "--formats", "xz", "--xz-encoder", "go", "--reencode")...)
	if r.code != 0 || r.sum.Objects[0].Action != "uploaded" || r.sum.ManifestAction != "uploaded" || r.sum.Manifest.Files[0].Encoder != "ulikunitz/xz" {
		t.Fatalf("--reencode: exit %d %+v", r.code, r.sum)
	}
}
