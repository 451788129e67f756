package diskwrite

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/testimage"
)

// BenchmarkWrite writes a 256 MiB Talos-like image (64 MiB of random data,
// the rest zero runs) from a file onto a file on the test's disk: the
// pipeline's own cost, without the network or decompression that the
// end-to-end bench (imager/bench) measures.
func BenchmarkWrite(b *testing.B) {
	dir := b.TempDir()
	img := filepath.Join(dir, "image.raw")
	sum, err := testimage.Write(img, testimage.Spec{Size: 256 << 20, DataBytes: 64 << 20, Seed: 7})
	if err != nil {
		b.Fatal(err)
	}
	disk := filepath.Join(dir, "disk")
	if err := os.WriteFile(disk, nil, 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.Truncate(disk, 300<<20); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(256 << 20)
	b.ResetTimer()
	for range b.N {
		f, err := os.Open(img)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Write(context.Background(), f, Options{Path: disk, Capacity: 300 << 20, ExpectedSHA256: sum}); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
