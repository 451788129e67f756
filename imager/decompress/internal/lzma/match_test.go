package lzma

import (
	"bytes"
	"io"
	"math/rand"
	"testing"

	upstream "github.com/ulikunitz/xz/lzma"
)

// TestMatchesAgainstUpstream encodes data full of overlapping matches (zero
// runs, short periodic patterns) with upstream's LZMA2 writer, using a small
// dictionary so the ring buffer wraps often, and checks that the patched
// decoder gives the original bytes back.
func TestMatchesAgainstUpstream(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var data []byte
	for len(data) < 3<<20 {
		switch rng.Intn(4) {
		case 0:
			data = append(data, make([]byte, rng.Intn(200000))...)
		case 1:
			period := 1 + rng.Intn(7)
			pat := make([]byte, period)
			rng.Read(pat)
			for n := rng.Intn(50000); n > 0; n-- {
				data = append(data, pat[n%period])
			}
		case 2:
			b := make([]byte, rng.Intn(30000))
			rng.Read(b)
			data = append(data, b...)
		default:
			data = append(data, bytes.Repeat([]byte("EFI PART talos "), rng.Intn(3000))...)
		}
	}
	for _, dictCap := range []int{64 << 10, 256 << 10, 1 << 20} {
		var comp bytes.Buffer
		w, err := upstream.Writer2Config{DictCap: dictCap}.NewWriter2(&comp)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
		w.Close()
		r, err := Reader2Config{DictCap: dictCap}.NewReader2(&comp)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("dict %d: %v", dictCap, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("dict %d: decoded data differs from the original", dictCap)
		}
	}
}
