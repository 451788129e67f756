package publish

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// presign runs `em-imager presign args...` at a fixed time and decodes its
// one JSON object.
func presign(t *testing.T, getenv func(string) string, now time.Time, args ...string) (int, Presigned, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := presignEnv(context.Background(), args, &out, &errb, getenv, func() time.Time { return now })
	var p Presigned
	dec := json.NewDecoder(bytes.NewReader(out.Bytes()))
	if err := dec.Decode(&p); err != nil || dec.More() {
		t.Fatalf("stdout is not one JSON object (%v):\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	return code, p, errb.String()
}

// get downloads u without any credentials, as curl in a rescue shell does.
func get(t *testing.T, u string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestPresignGivesURLsARescueShellCanFetch: em-imager presign signs the
// manifest, its image file and em-imager of a private bucket, and the
// digests it prints are those of what the URLs serve (the manifest's own
// sha256 for --manifest-sha256, the tool's from its .sha256 file); the
// same URLs without their signature are refused. Nothing is signed for an
// image that was never published, or for longer than S3 allows.
func TestPresignGivesURLsARescueShellCanFetch(t *testing.T) {
	imager := buildImager(t, "amd64")
	s3 := startS3(t)
	s3.MustCreateBucket(t, bucket)
	now := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	args := []string{"--schematic", schematic, "--talos-version", "v1.12.0", "--prefix", "images"}

	code, p, _ := presign(t, s3.env(nil), now, args...)
	if code != ExitCode(CodeS3Error) || p.OK || p.Error == nil || !strings.Contains(p.Error.Message, "publish the image first") {
		t.Fatalf("before publish: exit %d %+v, want an S3 error saying to publish first", code, p.Error)
	}

	in := writeFile(t, "metal-amd64.raw", makeRaw(4<<20, 77))
	r := publish(t, s3.env(nil), baseArgs(in, "--imager-binary", imager)...)
	if r.code != 0 {
		t.Fatalf("publish: exit %d\n%s", r.code, r.stderr)
	}
	code, p, stderr := presign(t, s3.env(nil), now, args...)
	if code != 0 || !p.OK || p.Format != "zstd" || p.ExpiresAt != "2026-11-28T05:00:00Z" {
		t.Fatalf("presign: exit %d %+v\n%s", code, p, stderr)
	}
	if p.ManifestSHA256 != r.sum.ManifestSHA256 || p.ImagerSHA256 != r.sum.Tools[0].SHA256 {
		t.Fatalf("digests %s %s, publish printed %s %s", p.ManifestSHA256, p.ImagerSHA256, r.sum.ManifestSHA256, r.sum.Tools[0].SHA256)
	}
	for _, c := range []struct{ url, sha string }{{p.Manifest, p.ManifestSHA256}, {p.Imager, p.ImagerSHA256}} {
		status, body := get(t, c.url)
		if status != http.StatusOK || sum(body) != c.sha {
			t.Fatalf("GET %s: %d, sha256 %s, want 200 and %s", strings.SplitN(c.url, "?", 2)[0], status, sum(body), c.sha)
		}
		if status, _ := get(t, strings.SplitN(c.url, "?", 2)[0]); status != http.StatusForbidden {
			t.Fatalf("the unsigned URL of a private bucket answered %d, want 403", status)
		}
	}
	stored, _ := fetch(t, s3.MustClient(t), dir()+"metal-amd64.raw.zst")
	if status, body := get(t, p.Image); status != http.StatusOK || !bytes.Equal(body, stored) {
		t.Fatalf("GET the image: %d, not the published zstd file", status)
	}

	code, p, _ = presign(t, s3.env(nil), now, append(args, "--format", "xz")...)
	if code != 0 || p.Format != "xz" || !strings.Contains(p.Image, "metal-amd64.raw.xz?") {
		t.Fatalf("--format xz: exit %d %+v", code, p)
	}
	for _, bad := range [][]string{{"--expires", "169h"}, {"--expires", "0s"}, {"--format", "gzip"}, {"--talos-version", "1.12"}} {
		code, p, _ = presign(t, s3.env(nil), now, append(append([]string{}, args...), bad...)...)
		if code != 2 || p.Error == nil || p.Error.Code != CodeInvalidArgument {
			t.Errorf("%v: exit %d %+v, want 2 invalid_argument", bad, code, p.Error)
		}
	}
}
