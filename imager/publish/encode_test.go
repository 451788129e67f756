package publish

import (
	"bytes"
	"errors"
	"testing"
)

// Frames come out in order whatever the write sizes, each decodable alone.
func TestZstdFramesRoundTrip(t *testing.T) {
	raw := makeRaw(5<<20+4096, 21)
	var out bytes.Buffer
	z, err := newZstdFrames(&out, 1<<20, 3)
	if err != nil {
		t.Fatal(err)
	}
	for off, step := 0, 1; off < len(raw); step = step*3 + 1 {
		end := min(off+step, len(raw))
		if _, err := z.Write(raw[off:end]); err != nil {
			t.Fatal(err)
		}
		off = end
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	if got := decode(t, "zstd", out.Bytes()); !bytes.Equal(got, raw) {
		t.Fatal("frames do not decode to the input")
	}
	// 6 frames: 5 full ones and the 4 KiB rest, each starting with the magic.
	if n := bytes.Count(out.Bytes(), []byte{0x28, 0xB5, 0x2F, 0xFD}); n < 6 {
		t.Fatalf("%d frame magics, want at least 6", n)
	}
}

type failingWriter struct{ n int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, errors.New("disk full")
	}
	w.n--
	return len(p), nil
}

func TestZstdFramesReportsWriteErrors(t *testing.T) {
	raw := makeRaw(4<<20, 22)
	z, err := newZstdFrames(&failingWriter{n: 1}, 512<<10, 2)
	if err != nil {
		t.Fatal(err)
	}
	var werr error
	for off := 0; off < len(raw) && werr == nil; off += 64 << 10 {
		_, werr = z.Write(raw[off : off+64<<10])
	}
	cerr := z.Close()
	if werr == nil && cerr == nil {
		t.Fatal("a failing output went unnoticed")
	}
	if err := errors.Join(werr, cerr); !bytes.Contains([]byte(err.Error()), []byte("disk full")) {
		t.Fatalf("error %v does not say why", err)
	}
}

func TestZstdFramesAbort(t *testing.T) {
	var out bytes.Buffer
	z, err := newZstdFrames(&out, 256<<10, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := z.Write(makeRaw(1<<20+1000, 23)); err != nil { // 4 frames and a partial one
		t.Fatal(err)
	}
	z.Abort()
	z.Abort() // idempotent, and Close after Abort must not hang or panic
	if err := z.Close(); err == nil {
		t.Fatal("Close after Abort reported success")
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"4MiB": 4 << 20, "512KiB": 512 << 10, "65536": 65536} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "4M", "x", "1.5MiB", "-1 MiB"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) accepted", in)
		}
	}
}
