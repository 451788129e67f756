package imagesource

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// s3env is a real S3 server (versitygw) for the tests.
type s3env struct {
	Endpoint, AccessKey, SecretKey, Region string
}

func (e *s3env) client(t *testing.T) *minio.Client {
	t.Helper()
	host := e.Endpoint[len("http://"):]
	c, err := minio.New(host, &minio.Options{Creds: credentials.NewStaticV4(e.AccessKey, e.SecretKey, ""), Region: e.Region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *s3env) makeBucket(t *testing.T, name string) {
	t.Helper()
	if err := e.client(t).MakeBucket(context.Background(), name, minio.MakeBucketOptions{Region: e.Region}); err != nil {
		t.Fatal(err)
	}
}

func startS3(t *testing.T) *s3env {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	bin := filepath.Join(filepath.Dir(file), "../../bin/versitygw")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	e := &s3env{Endpoint: "http://" + addr, AccessKey: "testaccess", SecretKey: "testsecret0123456789", Region: "garage"}
	dir := t.TempDir()
	cmd := exec.Command(bin, "--port", addr, "--access", e.AccessKey, "--secret", e.SecretKey, "--region", e.Region, "--quiet", "posix", dir)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for i := 0; i < 100; i++ {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return e
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal(fmt.Sprintf("versitygw did not listen on %s", addr))
	return nil
}
