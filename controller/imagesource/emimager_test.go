package imagesource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

// writeWithEmImager runs the real em-imager binary (bin/em-imager, from
// `make build`) against url into a sparse file, as the rescue system would.
func writeWithEmImager(t *testing.T, img *Image, disk string) (int, report.Report, string) {
	t.Helper()
	bin, err := testenv.FindBinary("em-imager")
	if err != nil {
		t.Fatalf("%v (make build puts it there)", err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "write", "--image", img.URL, "--sha256", img.RawSHA256, "--format", img.Format,
		"--disk", disk, "--progress", "none", "--retries", "0")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	code := 0
	ee := &exec.ExitError{}
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var r report.Report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("em-imager stdout is not a report: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	return code, r, stdout.String() + stderr.String()
}

func sparseDisk(t *testing.T, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return p
}

// publishWithEmImager runs `em-imager publish` as an operator would.
func publishWithEmImager(t *testing.T, e *s3env, raw []byte, args ...string) {
	t.Helper()
	bin, err := testenv.FindBinary("em-imager")
	if err != nil {
		t.Fatalf("%v (make build puts it there)", err)
	}
	in := filepath.Join(t.TempDir(), "metal-amd64.raw")
	if err := os.WriteFile(in, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	// The raw test images have no kernel arguments to read.
	cmd := exec.Command(bin, append([]string{"publish", "--input", in, "--maintenance-api"}, args...)...)
	cmd.Env = append(os.Environ(), "S3_ENDPOINT="+e.Endpoint, "S3_BUCKET="+bucket, "S3_REGION="+e.Region,
		"AWS_ACCESS_KEY_ID="+e.AccessKey, "AWS_SECRET_ACCESS_KEY="+e.SecretKey)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("em-imager publish: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	var sum struct {
		OK bool `json:"ok"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil || !sum.OK {
		t.Fatalf("em-imager publish summary: %v\n%s", err, stdout.String())
	}
}

// em-imager publish -> manifest -> presigned URL -> em-imager writes and
// verifies.
func TestEmImagerWritesFromThePresignedURL(t *testing.T) {
	e := startS3(t)
	e.MustCreateBucket(t, bucket)
	raw := makeRaw(6<<20, 11)
	publishWithEmImager(t, e, raw, "--schematic", schematic, "--talos-version", "v1.12.0", "--prefix", "talos", "--formats", "zst,xz", "--block-size", "1MiB")
	s := newSource(t, e.config())
	for _, format := range []string{"zstd", "xz"} {
		t.Run(format, func(t *testing.T) {
			img, err := s.Resolve(context.Background(), Settings{Prefix: "talos", SchematicID: schematic, TalosVersion: "v1.12.0", FormatPreference: []string{format}})
			if err != nil {
				t.Fatal(err)
			}
			disk := sparseDisk(t, 16<<20)
			code, r, out := writeWithEmImager(t, img, disk)
			if code != 0 || !r.OK || r.Image == nil || !r.Image.Verified || r.Image.RawSHA256 != img.RawSHA256 {
				t.Fatalf("em-imager: exit %d, report %+v\n%s", code, r, out)
			}
			if strings.Contains(out, "X-Amz-Signature") {
				t.Fatal("em-imager printed the presigned URL's signature")
			}
			got, err := os.ReadFile(disk)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[:len(raw)], raw) {
				t.Fatal("the disk does not hold the image")
			}
		})
	}
}

func TestEmImagerRefusesAnExpiredURL(t *testing.T) {
	img := expiredImage(t, 12)
	code, r, out := writeWithEmImager(t, img, sparseDisk(t, 8<<20))
	if code == 0 || r.OK || r.Error == nil || r.Error.Code != report.CodeSourceRejected {
		t.Fatalf("expired URL: exit %d report %+v\n%s", code, r.Error, out)
	}
}
