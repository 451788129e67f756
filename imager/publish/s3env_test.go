package publish

import (
	"context"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

// s3env is the real S3 server of the simulated world (versitygw, started by
// test/testenv), signing for Garage's default region.
type s3env struct{ *testenv.S3 }

func startS3(t *testing.T) *s3env {
	t.Helper()
	return &s3env{testenv.StartS3WithOptions(t, testenv.S3Options{Region: "garage"})}
}

func (e *s3env) client(t *testing.T) *minio.Client {
	t.Helper()
	c, err := e.Client()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *s3env) makeBucket(t *testing.T, name string) {
	t.Helper()
	if err := e.CreateBucket(context.Background(), name); err != nil {
		t.Fatal(err)
	}
}
