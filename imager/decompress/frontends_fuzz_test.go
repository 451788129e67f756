package decompress

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

// frontEndMaxOut bounds what one fuzz input may decode to: a small stream
// that claims a huge size must fail or stop, not allocate it.
const frontEndMaxOut = 1 << 20

// The image is downloaded from a bucket others may write to and decoded as
// root in rescue: the zstd and gzip front-ends (xz has FuzzXZ and its
// corpus) must fail cleanly (one of the package's errors), never crash or
// hang, on any input.
func FuzzFrontEnds(f *testing.F) {
	data := sample(1<<12, 3)
	for _, c := range []struct {
		tool string
		args []string
	}{{"zstd", []string{"-1", "-q", "-c"}}, {"gzip", []string{"-1", "-c"}}} {
		if _, err := exec.LookPath(c.tool); err == nil {
			f.Add(compress(f, c.tool, data, c.args...))
		}
	}
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd})
	f.Fuzz(func(t *testing.T, b []byte) {
		timer := time.AfterFunc(10*time.Second, func() {
			buf := make([]byte, 1<<20)
			panic(fmt.Sprintf("decoding %d bytes hangs:\n%s", len(b), buf[:runtime.Stack(buf, true)]))
		})
		defer timer.Stop()
		for _, format := range []Format{FormatZstd, FormatGzip} {
			r, err := NewReader(bytes.NewReader(b), format, 2)
			if err != nil {
				continue
			}
			n, err := io.Copy(io.Discard, io.LimitReader(r, frontEndMaxOut))
			r.Close()
			if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTruncated) &&
				!errors.Is(err, ErrTrailingData) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("%s: after %d bytes, an error of no documented kind: %v", format, n, err)
			}
		}
	})
}
