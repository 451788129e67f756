package testenv

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Options configures NewS3. The zero value is ready to use.
type S3Options struct {
	// Dir holds the buckets (posix backend: a bucket is a directory) and the
	// server log. Default: a new temporary directory removed by Stop.
	Dir string
	// Region the server signs for. Default "us-east-1".
	Region string
	// AccessKey and SecretKey of the root user. Default: random per server.
	AccessKey, SecretKey string
	// StartTimeout bounds the wait for the server to answer. Default 60s.
	StartTimeout time.Duration
}

// S3 is a running versitygw server (real SigV4 verification, presigned URLs
// included) on 127.0.0.1.
type S3 struct {
	// Endpoint is the base URL, e.g. http://127.0.0.1:40123.
	Endpoint string
	// Host is Endpoint without the scheme (what minio.New takes).
	Host string
	// AccessKey and SecretKey of the root user; Region the server signs for.
	AccessKey, SecretKey, Region string
	// DataDir holds one directory per bucket.
	DataDir string
	// LogPath is the server's log file.
	LogPath string

	proc    *process
	tempDir string
}

// NewS3 starts versitygw with a posix backend and waits until it answers.
// Call Stop when done.
func NewS3(ctx context.Context, opts S3Options) (*S3, error) {
	bin, err := FindBinary(BinVersityGW)
	if err != nil {
		return nil, err
	}
	s := &S3{Region: cmp.Or(opts.Region, "us-east-1"), AccessKey: opts.AccessKey, SecretKey: opts.SecretKey}
	if s.AccessKey == "" {
		s.AccessKey = "TESTKEY" + randomHex(8)
	}
	if s.SecretKey == "" {
		s.SecretKey = randomHex(20)
	}
	dir, temp, err := workDir(opts.Dir, "testenv-s3-")
	if err != nil {
		return nil, err
	}
	s.tempDir = temp
	s.DataDir = filepath.Join(dir, "data")
	s.LogPath = filepath.Join(dir, "versitygw.log")
	if err := os.MkdirAll(s.DataDir, 0o700); err != nil {
		s.cleanup()
		return nil, err
	}
	timeout := cmp.Or(opts.StartTimeout, 60*time.Second)
	if err := retryStart(ctx, func() error { return s.start(ctx, bin, timeout) }); err != nil {
		s.cleanup()
		return nil, err
	}
	return s, nil
}

func (s *S3) start(ctx context.Context, bin string, timeout time.Duration) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	s.Host = hostPort(port)
	s.Endpoint = "http://" + s.Host
	args := []string{
		"--port", s.Host,
		"--region", s.Region,
		"--health", "/healthz",
		"--quiet",
		"posix", s.DataDir,
	}
	// Credentials go through the environment, never argv (visible in ps).
	env := []string{"ROOT_ACCESS_KEY_ID=" + s.AccessKey, "ROOT_SECRET_ACCESS_KEY=" + s.SecretKey}
	p, err := startProcess("versitygw", bin, args, env, s.LogPath)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hc := &http.Client{}
	err = p.waitReady(cctx, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint+"/healthz", nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("health: HTTP %d", resp.StatusCode)
		}
		return nil
	})
	if err != nil {
		_ = p.stop(5 * time.Second)
		return err
	}
	s.proc = p
	return nil
}

// Client returns a minio-go client signed with the root credentials.
func (s *S3) Client() (*minio.Client, error) {
	return minio.New(s.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Secure:       false,
		Region:       s.Region,
		BucketLookup: minio.BucketLookupPath,
	})
}

// CreateBucket creates a bucket (an error if it exists already).
func (s *S3) CreateBucket(ctx context.Context, name string) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	if err := c.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: s.Region}); err != nil {
		return fmt.Errorf("create bucket %q: %w", name, err)
	}
	return nil
}

// Stop stops the server and removes its directory if NewS3 created it.
func (s *S3) Stop() error {
	var err error
	if s.proc != nil {
		err = s.proc.stop(10 * time.Second)
	}
	return errors.Join(err, s.cleanup())
}

func (s *S3) cleanup() error {
	if s.tempDir == "" {
		return nil
	}
	return os.RemoveAll(s.tempDir)
}

// MustClient is Client for tests: a failure fails t.
func (s *S3) MustClient(t testing.TB) *minio.Client {
	t.Helper()
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// MustCreateBucket is CreateBucket for tests: a failure fails t.
func (s *S3) MustCreateBucket(t testing.TB, name string) {
	t.Helper()
	if err := s.CreateBucket(context.Background(), name); err != nil {
		t.Fatal(err)
	}
}

// StartS3 starts an S3 server for the test with fresh root credentials and a
// data directory under t.TempDir(); it stops on cleanup.
func StartS3(t testing.TB) *S3 {
	t.Helper()
	return StartS3WithOptions(t, S3Options{})
}

// StartS3WithOptions is StartS3 with options; Dir defaults to t.TempDir().
func StartS3WithOptions(t testing.TB, opts S3Options) *S3 {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	s, err := NewS3(context.Background(), opts)
	if err != nil {
		t.Fatalf("testenv: start S3 server: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: versitygw log tail (%s):\n%s", s.LogPath, fileTail(s.LogPath, 40))
		}
		if err := s.Stop(); err != nil {
			t.Errorf("testenv: stop S3 server: %v", err)
		}
	})
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}
