package publish

import (
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

// s3env is the real S3 server of the simulated world (versitygw, started by
// test/testenv), signing for Garage's default region.
type s3env struct{ *testenv.S3 }

func startS3(t *testing.T) *s3env {
	return &s3env{testenv.StartS3WithOptions(t, testenv.S3Options{Region: "garage"})}
}
