package publish

import (
	"bytes"
	"io"
	"os/exec"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/decompress"
)

// Benchmarks of the layouts publish can produce, decoded the way em-imager
// decodes them (imager/decompress with all cores). b.SetBytes is the raw
// size, so MB/s is raw throughput; "ratio" is compressed/raw.
//
//	go test -run '^$' -bench . -benchtime 1x ./imager/publish/

const benchRaw = 32 << 20

func benchImage() []byte { return makeRaw(benchRaw, 42) }

type layout struct {
	name   string
	format string
	encode func(b *testing.B, raw []byte) []byte
}

var layouts = []layout{
	{"zstd-frames-4MiB", "zstd", func(b *testing.B, raw []byte) []byte {
		return encodeAll(b, raw, func(out io.Writer) (io.WriteCloser, error) { return newZstdFrames(out, 4<<20, 0) })
	}},
	{"zstd-single-frame", "zstd", func(b *testing.B, raw []byte) []byte {
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBetterCompression))
		if err != nil {
			b.Fatal(err)
		}
		return enc.EncodeAll(raw, nil)
	}},
	{"xz-external-blocks-4MiB", "xz", func(b *testing.B, raw []byte) []byte {
		bin, err := exec.LookPath("xz")
		if err != nil {
			b.Fatal("xz not on PATH (make deps)")
		}
		return encodeAll(b, raw, func(out io.Writer) (io.WriteCloser, error) {
			return newXZExternal(b.Context(), bin, out, 4<<20, 0)
		})
	}},
	{"xz-go-blocks-4MiB", "xz", func(b *testing.B, raw []byte) []byte {
		return encodeAll(b, raw, func(out io.Writer) (io.WriteCloser, error) { return newXZGo(out, 4<<20) })
	}},
}

// encodeAll writes raw through the encoder open makes on a buffer, closes it
// and returns what it wrote.
func encodeAll(b *testing.B, raw []byte, open func(out io.Writer) (io.WriteCloser, error)) []byte {
	var out bytes.Buffer
	w, err := open(&out)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := w.Write(raw); err != nil {
		b.Fatal(err)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	return out.Bytes()
}

func BenchmarkEncode(b *testing.B) {
	raw := benchImage()
	for _, l := range layouts {
		b.Run(l.name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			var out []byte
			for b.Loop() {
				out = l.encode(b, raw)
			}
			b.ReportMetric(float64(len(out))/float64(len(raw)), "ratio")
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	raw := benchImage()
	for _, l := range layouts {
		b.Run(l.name, func(b *testing.B) {
			enc := l.encode(b, raw)
			b.SetBytes(int64(len(raw)))
			b.ResetTimer()
			for b.Loop() {
				r, err := decompress.NewReader(bytes.NewReader(enc), decompress.Format(l.format), runtime.GOMAXPROCS(0))
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, r)
				r.Close()
				if err != nil || n != int64(len(raw)) {
					b.Fatalf("decoded %d bytes: %v", n, err)
				}
			}
			b.ReportMetric(float64(len(enc))/float64(len(raw)), "ratio")
		})
	}
}
