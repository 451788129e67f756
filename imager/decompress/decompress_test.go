package decompress

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// requireTool fails (never skips) when a command-line tool the tests use to
// build real compressed files is missing: `make deps` installs them.
func requireTool(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s not found in PATH: run `make deps` (Debian packages xz-utils, zstd)", name)
	}
}

// sample builds n bytes that look like a disk image: random runs, text, zeros.
func sample(n int, seed int64) []byte {
	rng := rand.New(rand.NewSource(seed))
	b := make([]byte, n)
	for off := 0; off < n; {
		l := 1 + rng.Intn(300<<10)
		if off+l > n {
			l = n - off
		}
		switch rng.Intn(3) {
		case 0:
			rng.Read(b[off : off+l])
		case 1:
			for i := off; i < off+l; i++ {
				b[i] = "talos linux kernel initramfs "[i%29]
			}
		}
		off += l
	}
	return b
}

// compress runs a real compressor with args on data and returns its output.
func compress(t testing.TB, tool string, data []byte, args ...string) []byte {
	t.Helper()
	requireTool(t, tool)
	cmd := exec.Command(tool, args...)
	cmd.Stdin = bytes.NewReader(data)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v: %s", tool, args, err, errb.String())
	}
	return out.Bytes()
}

func decodeAll(t *testing.T, comp []byte, f Format, conc int) ([]byte, error) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(comp), f, conc)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out bytes.Buffer
	// Small odd reads exercise the reader's bookkeeping.
	_, err = io.CopyBuffer(&out, r, make([]byte, 77777))
	return out.Bytes(), err
}

func TestDetect(t *testing.T) {
	data := sample(1<<16, 1)
	cases := []struct {
		name   string
		header []byte
		want   Format
	}{
		{"xz", compress(t, "xz", data, "-0", "-c"), FormatXZ},
		{"zstd", compress(t, "zstd", data, "-1", "-c"), FormatZstd},
		{"gzip", compress(t, "gzip", data, "-1", "-c"), FormatGzip},
		{"zstd skippable frame", []byte{0x5A, 0x2A, 0x4D, 0x18, 4, 0}, FormatZstd},
		{"gpt disk", append(make([]byte, 510), 0x55, 0xAA), FormatRaw},
		{"empty", nil, FormatRaw},
		{"short xz prefix", []byte{0xFD, '7', 'z'}, FormatRaw},
	}
	for _, c := range cases {
		h := c.header
		if len(h) > HeaderLen {
			h = h[:HeaderLen]
		}
		if got := Detect(h); got != c.want {
			t.Errorf("%s: Detect = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	data := sample(3<<20+123, 2)
	twice := append(append([]byte{}, data...), data...)
	cases := []struct {
		name string
		f    Format
		comp []byte
		want []byte
	}{
		{"xz multi-block like Talos (xz -0 -T2, 1 MiB blocks)", FormatXZ, compress(t, "xz", data, "-0", "-T2", "--block-size=1MiB", "-c"), data},
		{"xz single block, streaming (xz -0 -T1)", FormatXZ, compress(t, "xz", data, "-0", "-T1", "-c"), data},
		{"xz crc32 check", FormatXZ, compress(t, "xz", data, "-1", "-T2", "--block-size=512KiB", "--check=crc32", "-c"), data},
		{"xz sha256 check", FormatXZ, compress(t, "xz", data, "-0", "-T2", "--block-size=2MiB", "--check=sha256", "-c"), data},
		{"xz no check", FormatXZ, compress(t, "xz", data, "-0", "-T1", "--check=none", "-c"), data},
		{"xz -6 multi-block", FormatXZ, compress(t, "xz", data, "-6", "-T2", "--block-size=1MiB", "-c"), data},
		{"xz two streams with padding", FormatXZ, append(append(compress(t, "xz", data, "-0", "-T2", "--block-size=1MiB", "-c"), 0, 0, 0, 0), compress(t, "xz", data, "-0", "-c")...), twice},
		{"zstd -18 -T0 (Talos)", FormatZstd, compress(t, "zstd", data, "-18", "-T0", "-c"), data},
		{"zstd -3 two frames", FormatZstd, append(compress(t, "zstd", data, "-3", "-c"), compress(t, "zstd", data, "-1", "-c")...), twice},
		{"gzip two members", FormatGzip, append(compress(t, "gzip", data, "-1", "-c"), compress(t, "gzip", data, "-6", "-c")...), twice},
		{"raw", FormatRaw, data, data},
	}
	for _, c := range cases {
		for _, conc := range []int{1, 4} {
			got, err := decodeAll(t, c.comp, c.f, conc)
			if err != nil {
				t.Errorf("%s (concurrency %d): %v", c.name, conc, err)
				continue
			}
			if sha256.Sum256(got) != sha256.Sum256(c.want) {
				t.Errorf("%s (concurrency %d): output differs (%d bytes, want %d)", c.name, conc, len(got), len(c.want))
			}
		}
	}
}

func TestDamagedInput(t *testing.T) {
	data := sample(3<<20, 3)
	xzMulti := compress(t, "xz", data, "-0", "-T2", "--block-size=1MiB", "-c")
	xzSingle := compress(t, "xz", data, "-0", "-T1", "-c")
	zst := compress(t, "zstd", data, "-12", "-T0", "-c")
	gz := compress(t, "gzip", data, "-c")
	flip := func(b []byte, at int) []byte {
		c := append([]byte{}, b...)
		c[at] ^= 0x40
		return c
	}
	cut := func(b []byte, n int) []byte { return append([]byte{}, b[:n]...) }
	plus := func(b []byte, tail ...byte) []byte { return append(append([]byte{}, b...), tail...) }
	cases := []struct {
		name string
		f    Format
		comp []byte
		want error
	}{
		{"xz multi-block byte flipped", FormatXZ, flip(xzMulti, len(xzMulti)/2), ErrCorrupt},
		{"xz single block byte flipped", FormatXZ, flip(xzSingle, len(xzSingle)/2), ErrCorrupt},
		{"xz index flipped", FormatXZ, flip(xzMulti, len(xzMulti)-20), ErrCorrupt},
		{"xz stream header flipped", FormatXZ, flip(xzMulti, 7), ErrCorrupt},
		{"xz multi-block truncated mid-block", FormatXZ, cut(xzMulti, len(xzMulti)/2), ErrTruncated},
		{"xz single block truncated", FormatXZ, cut(xzSingle, len(xzSingle)/2), ErrTruncated},
		{"xz truncated in footer", FormatXZ, cut(xzMulti, len(xzMulti)-3), ErrTruncated},
		{"xz trailing garbage", FormatXZ, plus(xzMulti, []byte("garbage!")...), ErrTrailingData},
		{"xz padding not a multiple of 4", FormatXZ, plus(xzMulti, 0, 0, 'x', 'z'), ErrTrailingData},
		{"xz cut inside stream padding", FormatXZ, plus(xzMulti, 0, 0), ErrTruncated},
		{"xz cut inside a second stream's magic", FormatXZ, plus(xzMulti, 0, 0, 0, 0, 0xFD, '7'), ErrTruncated},
		{"xz x86 BCJ filter", FormatXZ, compress(t, "xz", data, "--x86", "--lzma2=preset=0", "-c"), ErrUnsupported},
		{"zstd byte flipped", FormatZstd, flip(zst, len(zst)/2), ErrCorrupt},
		{"zstd checksum flipped", FormatZstd, flip(zst, len(zst)-2), ErrCorrupt},
		{"zstd truncated", FormatZstd, cut(zst, len(zst)/2), ErrTruncated},
		{"zstd trailing garbage", FormatZstd, plus(zst, []byte("garbage!")...), ErrTrailingData},
		{"gzip byte flipped", FormatGzip, flip(gz, len(gz)/2), ErrCorrupt},
		{"gzip truncated", FormatGzip, cut(gz, len(gz)/2), ErrTruncated},
		{"gzip trailing garbage", FormatGzip, plus(gz, []byte("garbage!")...), ErrTrailingData},
	}
	for _, c := range cases {
		for _, conc := range []int{1, 3} {
			_, err := decodeAll(t, c.comp, c.f, conc)
			if !errors.Is(err, c.want) {
				t.Errorf("%s (concurrency %d): err = %v, want %v", c.name, conc, err, c.want)
			}
		}
	}
}

// failingReader returns data then a network-like error.
type failingReader struct {
	r   io.Reader
	n   int
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, f.err
	}
	if len(p) > f.n {
		p = p[:f.n]
	}
	n, err := f.r.Read(p)
	f.n -= n
	return n, err
}

func TestInputErrorIsKept(t *testing.T) {
	data := sample(3<<20, 4)
	netErr := errors.New("connection reset by peer")
	inputs := map[Format][]byte{
		FormatXZ:   compress(t, "xz", data, "-0", "-T2", "--block-size=1MiB", "-c"),
		FormatZstd: compress(t, "zstd", data, "-3", "-c"),
		FormatGzip: compress(t, "gzip", data, "-c"),
	}
	inputs["xz-single"] = compress(t, "xz", data, "-0", "-T1", "-c")
	for name, comp := range inputs {
		f := Format(name)
		if name == "xz-single" {
			f = FormatXZ
		}
		r, err := NewReader(&failingReader{r: bytes.NewReader(comp), n: len(comp) / 2, err: netErr}, f, 2)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_, err = io.Copy(io.Discard, r)
		r.Close()
		if !errors.Is(err, netErr) {
			t.Errorf("%s: err = %v, want the input's own error", name, err)
		}
		if errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: a network error was reported as corrupt data: %v", name, err)
		}
	}
}

func TestCloseMidStream(t *testing.T) {
	data := sample(4<<20, 5)
	comp := compress(t, "xz", data, "-0", "-T2", "--block-size=128KiB", "-c")
	r, err := NewReader(bytes.NewReader(comp), FormatXZ, 2)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1000)
	if _, err := io.ReadFull(r, buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, data[:1000]) {
		t.Fatal("first bytes differ")
	}
	r.Close()
	// After Close the reader may hand out what was already decoded, but it
	// must not hang nor deliver the whole image.
	n, _ := io.Copy(io.Discard, r)
	if n+1000 >= int64(len(data)) {
		t.Fatalf("reader delivered %d bytes after Close", n)
	}
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]Format{"auto": "", "xz": FormatXZ, "zst": FormatZstd, "zstd": FormatZstd, "raw": FormatRaw, "gz": FormatGzip} {
		got, err := ParseFormat(in)
		if err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseFormat("bz2"); err == nil {
		t.Error("ParseFormat(bz2) accepted")
	}
}

// BenchmarkXZParallel decodes a Talos-like multi-block file; run with
// `go test -bench XZ ./imager/decompress` to compare concurrency levels.
func BenchmarkXZParallel(b *testing.B) {
	data := sample(64<<20, 6)
	comp := compress(b, "xz", data, "-0", "-T0", "--block-size=1MiB", "-c")
	dir := b.TempDir()
	os.WriteFile(filepath.Join(dir, "x"), comp, 0o600)
	for _, conc := range []int{1, 2} {
		b.Run(map[int]string{1: "1-worker", 2: "2-workers"}[conc], func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for i := 0; i < b.N; i++ {
				r, _ := NewReader(bytes.NewReader(comp), FormatXZ, conc)
				if _, err := io.Copy(io.Discard, r); err != nil {
					b.Fatal(err)
				}
				r.Close()
			}
		})
	}
}

func TestRawSize(t *testing.T) {
	data := sample(3<<20+77, 7)
	xzMulti := compress(t, "xz", data, "-0", "-T2", "--block-size=1MiB", "-c")
	xzSingle := compress(t, "xz", data, "-0", "-T1", "-c")
	// From a file, zstd records the content size; --stream-size does the same on a pipe.
	zst := compress(t, "zstd", data, "-9", "-T0", "-c", fmt.Sprintf("--stream-size=%d", len(data)))
	for name, c := range map[string]struct {
		f    Format
		comp []byte
	}{"xz multi": {FormatXZ, xzMulti}, "xz single": {FormatXZ, xzSingle}, "zstd": {FormatZstd, zst}, "raw": {FormatRaw, data}} {
		got, err := RawSize(c.f, c.comp[:min(len(c.comp), 64)], bytes.NewReader(c.comp), int64(len(c.comp)))
		if err != nil || got != int64(len(data)) {
			t.Errorf("%s: RawSize = %d, %v; want %d", name, got, err, len(data))
		}
	}
	twoStreams := append(append([]byte{}, xzMulti...), xzSingle...)
	if _, err := RawSize(FormatXZ, twoStreams, bytes.NewReader(twoStreams), int64(len(twoStreams))); !errors.Is(err, ErrSizeUnknown) {
		t.Errorf("two streams: err = %v, want ErrSizeUnknown (the last stream alone is not the size)", err)
	}
	piped := compress(t, "zstd", data, "-3", "-c", "--no-content-size")
	if _, err := RawSize(FormatZstd, piped[:18], nil, int64(len(piped))); !errors.Is(err, ErrSizeUnknown) {
		t.Errorf("zstd without content size: err = %v", err)
	}
}
