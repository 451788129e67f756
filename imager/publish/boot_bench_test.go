package publish

import (
	"bytes"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/testimage"
)

// BenchmarkESPCapture measures what reading the kernel arguments costs
// publish: every raw byte goes through espCapture (kept up to the end of the
// EFI partition, counted afterwards), then the UKI is read from the sparse
// copy. "sha256" is the hash publish computes anyway over the same bytes,
// for scale.
//
//	go test -run '^$' -bench ESPCapture -benchtime 3x ./imager/publish/
func BenchmarkESPCapture(b *testing.B) {
	img := filepath.Join(b.TempDir(), "metal-amd64.raw")
	if _, err := testimage.Write(img, testimage.Spec{Size: 256 << 20, DataBytes: 64 << 20, Seed: 1, UKICmdline: metalISOCmdline}); err != nil {
		b.Fatal(err)
	}
	raw, err := os.ReadFile(img)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("capture+read", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for range b.N {
			c, err := newESPCapture(filepath.Join(b.TempDir(), "esp.raw"), 512)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(c, bytes.NewReader(raw)); err != nil {
				b.Fatal(err)
			}
			found, err := c.finish()
			if err != nil || found.Cmdline != metalISOCmdline {
				b.Fatalf("%+v %v", found, err)
			}
		}
	})
	b.Run("sha256", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for range b.N {
			h := sha256.New()
			io.Copy(h, bytes.NewReader(raw))
		}
	})
}
