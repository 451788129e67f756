package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/manifest"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/publish"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

// The --manifest tests publish the fixture image with em-imager publish
// into a real S3 server (versitygw, test/testenv) whose bucket reads
// anonymously, as a public Garage bucket's web endpoint does, and write it
// from the manifest's plain http URL, pinned.

const (
	testSchematic = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	testBucket    = "talos-images"
	manifestKey   = "talos/" + testSchematic + "/v1.12.4/manifest.json"
)

type bucket struct {
	s3  *testenv.S3
	c   *minio.Client
	url string // the manifest's URL
	pin string // its sha256
}

func publishedBucket(t *testing.T) *bucket {
	t.Helper()
	fixtures(t)
	s := testenv.StartS3WithOptions(t, testenv.S3Options{Region: "garage"})
	s.MustCreateBucket(t, testBucket)
	in := filepath.Join(t.TempDir(), "metal-amd64.raw")
	if err := os.WriteFile(in, rawImage, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := publish.Run(context.Background(), &publish.Options{
		Input: in, SchematicID: testSchematic, TalosVersion: "v1.12.4", Arch: "amd64", Prefix: "talos",
		Formats: []string{manifest.FormatZstd, manifest.FormatXZ}, BlockSize: 1 << 20, SectorSize: 512, VerifyOutput: true, XZEncoder: "auto", MaintenanceAPI: true,
		S3: publish.S3Config{Endpoint: s.Endpoint, Bucket: testBucket, Region: s.Region, AccessKey: s.AccessKey, SecretKey: s.SecretKey},
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	b := &bucket{s3: s, c: s.MustClient(t), url: s.Endpoint + "/" + testBucket + "/" + manifestKey}
	policy := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":["s3:GetObject"],"Resource":["arn:aws:s3:::` + testBucket + `/*"]}]}`
	if err := b.c.SetBucketPolicy(context.Background(), testBucket, policy); err != nil {
		t.Fatal(err)
	}
	b.pin = digestOf(b.get(t, b.url))
	return b
}

func digestOf(p []byte) string {
	s := sha256.Sum256(p)
	return hex.EncodeToString(s[:])
}

// get reads url anonymously, as the rescue system does.
func (b *bucket) get(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("anonymous GET %s: HTTP %d %s", url, resp.StatusCode, body)
	}
	return body
}

func (b *bucket) put(t *testing.T, key string, data []byte) {
	t.Helper()
	if _, err := b.c.PutObject(context.Background(), testBucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestManifestEndToEnd(t *testing.T) {
	b := publishedBucket(t)
	pinned := []string{"--manifest", b.url, "--manifest-sha256", b.pin}

	t.Run("pinned http, zstd preferred", func(t *testing.T) {
		root := host(t)
		r := write(t, root, pinned...)
		wantCode(t, r, "")
		im := r.rep.Image
		if im.Format != "zstd" || !strings.HasSuffix(im.URL, "/talos/"+testSchematic+"/v1.12.4/metal-amd64.raw.zst") ||
			im.Manifest != b.url || im.ManifestSHA256 != b.pin || im.ExpectedSHA256 != rawSHA || !im.Verified {
			t.Fatalf("image %+v", im)
		}
		// The manifest's raw size chose the disk, as --image-size does.
		if r.rep.Disk.Path != "/dev/nvme0n1" || r.rep.Disk.Rule != report.RuleAutoSmallestFit {
			t.Fatalf("disk %+v", r.rep.Disk)
		}
		assertImage(t, root, "nvme0n1")
		ins := inspect(t, root, "--manifest", b.url, "--manifest-sha256", b.pin)
		if ins.Disk.Path != r.rep.Disk.Path || ins.Image.RawBytes != int64(len(rawImage)) || ins.Image.Manifest != b.url {
			t.Fatalf("inspect --manifest: disk %+v image %+v", ins.Disk, ins.Image)
		}
	})
	t.Run("xz chosen", func(t *testing.T) {
		root := host(t)
		r := write(t, root, append(pinned, "--format", "xz", "--dry-run")...)
		wantCode(t, r, "")
		if !r.rep.DryRun || r.rep.Image.Format != "xz" || r.rep.Image.RawBytes != int64(len(rawImage)) {
			t.Fatalf("dry run %+v", r.rep.Image)
		}
		r = write(t, root, append(pinned, "--format", "xz")...)
		wantCode(t, r, "")
		assertImage(t, root, "nvme0n1")
	})
	t.Run("the operator's own URL for a manifest's file", func(t *testing.T) {
		u, err := b.c.PresignedGetObject(context.Background(), testBucket, "talos/"+testSchematic+"/v1.12.4/metal-amd64.raw.xz", time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		root := host(t)
		r := write(t, root, append(pinned, "--image", u.String())...)
		wantCode(t, r, "")
		if r.rep.Image.Format != "xz" || strings.Contains(r.stdout+r.stderr, u.Query().Get("X-Amz-Signature")) {
			t.Fatalf("image %+v, or the signature leaked", r.rep.Image)
		}
		assertImage(t, root, "nvme0n1")
	})

	// Refusals before anything is written: the disk keeps its old install.
	refusal := func(t *testing.T, code string, args ...string) run {
		t.Helper()
		root := host(t)
		oldInstall(t, filepath.Join(root, "dev", "nvme0n1"))
		before := snapshot(t, root)
		r := write(t, root, args...)
		wantCode(t, r, code)
		if !sameDisks(before, snapshot(t, root)) {
			t.Fatalf("refused (%s), yet a disk changed", r.rep.Error.Message)
		}
		return r
	}
	t.Run("plain http without a pin", func(t *testing.T) {
		r := refusal(t, report.CodeInvalidArgument, "--manifest", b.url)
		if !strings.Contains(r.rep.Error.Message, "plain http") {
			t.Fatal(r.rep.Error.Message)
		}
	})
	t.Run("wrong pin", func(t *testing.T) {
		refusal(t, report.CodeDigestMismatch, "--manifest", b.url, "--manifest-sha256", strings.Repeat("0", 64))
	})
	t.Run("conflicting --sha256", func(t *testing.T) {
		refusal(t, report.CodeInvalidArgument, append(pinned, "--sha256", strings.Repeat("a", 64))...)
	})
	t.Run("no manifest there", func(t *testing.T) {
		refusal(t, report.CodeSourceRejected, "--manifest", strings.Replace(b.url, "v1.12.4", "v1.12.5", 1), "--manifest-sha256", b.pin)
	})

	// The bucket changed under the operator: an altered manifest (another
	// raw digest) no longer matches the pin; a replaced image object no
	// longer matches the manifest.
	t.Run("altered manifest over http", func(t *testing.T) {
		orig := b.get(t, b.url)
		t.Cleanup(func() { b.put(t, manifestKey, orig) })
		m, err := manifest.Parse(orig)
		if err != nil {
			t.Fatal(err)
		}
		m.Raw.SHA256 = strings.Repeat("e", 64)
		altered, _ := m.Marshal()
		b.put(t, manifestKey, altered)
		r := refusal(t, report.CodeDigestMismatch, pinned...)
		if !strings.Contains(r.rep.Error.Message, "pinned") {
			t.Fatal(r.rep.Error.Message)
		}
		// Pinned to the altered manifest, it is read, and its digest is
		// what the image must match: the run fails, the disk wiped.
		r = write(t, host(t), "--manifest", b.url, "--manifest-sha256", digestOf(altered))
		wantCode(t, r, report.CodeDigestMismatch)
	})
	t.Run("replaced image object", func(t *testing.T) {
		key := "talos/" + testSchematic + "/v1.12.4/metal-amd64.raw.zst"
		orig := b.get(t, b.s3.Endpoint+"/"+testBucket+"/"+key)
		t.Cleanup(func() { b.put(t, key, orig) })
		b.put(t, key, orig[:len(orig)-4096])
		r := refusal(t, report.CodeDigestMismatch, pinned...)
		if !strings.Contains(r.rep.Error.Message, "the manifest says") {
			t.Fatal(r.rep.Error.Message)
		}
	})
}
