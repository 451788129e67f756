package testenv

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

func TestS3PutGetPresigned(t *testing.T) {
	s := StartS3(t)
	ctx := context.Background()
	if err := s.CreateBucket(ctx, "images"); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateBucket(ctx, "images"); err == nil {
		t.Fatal("creating an existing bucket succeeded")
	}
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("talos-raw-"), 100_000) // 1 MB
	if _, err := c.PutObject(ctx, "images", "a/b/metal-amd64.raw", bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
		t.Fatalf("put: %v", err)
	}
	obj, err := c.GetObject(ctx, "images", "a/b/metal-amd64.raw", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if !bytes.Equal(got, body) {
		t.Fatalf("get returned %d bytes, want the %d put", len(got), len(body))
	}

	u, err := c.PresignedGetObject(ctx, "images", "a/b/metal-amd64.raw", time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	status, got := httpGet(t, u.String(), "")
	if status != http.StatusOK || !bytes.Equal(got, body) {
		t.Fatalf("presigned GET: HTTP %d, %d bytes; want 200 and %d bytes", status, len(got), len(body))
	}
	// A Range request on the presigned URL (em-imager resumes this way).
	status, got = httpGet(t, u.String(), "bytes=10-19")
	if status != http.StatusPartialContent || string(got) != string(body[10:20]) {
		t.Fatalf("presigned ranged GET: HTTP %d %q", status, got)
	}

	// The server really verifies the signature: a tampered one is refused.
	q := u.Query()
	sig := q.Get("X-Amz-Signature")
	q.Set("X-Amz-Signature", strings.Repeat("0", len(sig)))
	bad := *u
	bad.RawQuery = q.Encode()
	if status, _ := httpGet(t, bad.String(), ""); status != http.StatusForbidden {
		t.Fatalf("tampered presigned GET: HTTP %d, want 403", status)
	}
	// And so is an unsigned request.
	plain := url.URL{Scheme: "http", Host: s.Host, Path: "/images/a/b/metal-amd64.raw"}
	if status, _ := httpGet(t, plain.String(), ""); status != http.StatusForbidden {
		t.Fatalf("anonymous GET: HTTP %d, want 403", status)
	}
}

func TestS3RefusesWrongCredentials(t *testing.T) {
	s := StartS3(t)
	ctx := context.Background()
	if err := s.CreateBucket(ctx, "images"); err != nil {
		t.Fatal(err)
	}
	for name, creds := range map[string][2]string{
		"wrong secret": {s.AccessKey, s.SecretKey + "x"},
		"unknown key":  {"NOSUCHKEY", s.SecretKey},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := minio.New(s.Host, &minio.Options{
				Creds: credentials.NewStaticV4(creds[0], creds[1], ""), Region: s.Region,
				BucketLookup: minio.BucketLookupPath,
			})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.PutObject(ctx, "images", "x", strings.NewReader("x"), 1, minio.PutObjectOptions{})
			if err == nil {
				t.Fatal("put with wrong credentials succeeded")
			}
			// AWS answers 403 for both; versitygw answers an unknown key with
			// 404 XAdminUserNotFound. Either way the request is refused.
			if code := minio.ToErrorResponse(err).StatusCode; code != http.StatusForbidden && code != http.StatusNotFound {
				t.Fatalf("put with wrong credentials: HTTP %d (%v), want 403 or 404", code, err)
			}
			root, err := s.Client()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := root.StatObject(ctx, "images", "x", minio.StatObjectOptions{}); minio.ToErrorResponse(err).Code != "NoSuchKey" {
				t.Fatalf("object written by a refused request? stat: %v", err)
			}
		})
	}
}

func TestS3LogHoldsNoSecret(t *testing.T) {
	s := StartS3(t)
	if err := s.CreateBucket(context.Background(), "logs"); err != nil {
		t.Fatal(err)
	}
	c, err := minio.New(s.Host, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, "wrong", ""), Region: s.Region})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListBuckets(context.Background()); err == nil {
		t.Fatal("list with a wrong secret succeeded")
	}
	log, err := os.ReadFile(s.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(log, []byte(s.SecretKey)) {
		t.Fatal("versitygw log contains the root secret key")
	}
}

func TestS3CredentialsArePerServer(t *testing.T) {
	a, b := StartS3(t), StartS3(t)
	if a.AccessKey == b.AccessKey || a.SecretKey == b.SecretKey || a.Endpoint == b.Endpoint {
		t.Fatalf("two servers share credentials or endpoint: %s %s", a.Endpoint, b.Endpoint)
	}
}

func httpGet(t *testing.T, u, rng string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := http.DefaultClient.Do(req)
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
