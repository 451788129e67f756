package decompress

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// rssChildEnv makes the test binary a child that decodes one file and exits
// (TestMain), so TestXZMemoryBound can read that process's peak RSS alone.
const rssChildEnv = "DECOMPRESS_RSS_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(rssChildEnv); path != "" {
		os.Exit(rssChild(path))
	}
	os.Exit(m.Run())
}

func rssChild(path string) int {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	r, err := NewReader(f, FormatXZ, 2)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	h := sha256.New()
	if _, err := io.CopyBuffer(h, r, make([]byte, 1<<20)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// VmHWM, not the parent's rusage: a child forked from a big test
	// process reports the parent's RSS as its own maximum.
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var hwm int64
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			hwm, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	fmt.Printf("%x %d\n", h.Sum(nil), hwm<<10)
	return 0
}

// TestXZMemoryBound decodes files shaped like `xz -6 -T0` (24 MiB blocks,
// 8 MiB dictionary, decoded in parallel) and `xz -9 -T0` (blocks larger
// than the budget, 64 MiB dictionary, streamed) in a child process and
// checks its peak RSS: the decoder's budget plus a fixed allowance for the
// runtime and the test binary, whatever the block size. The former decoder
// (block charges capped, dictionaries not charged) peaked at 164 MiB
// decoding the bench's 256 MiB xz -6 -T0 image alone.
func TestXZMemoryBound(t *testing.T) {
	// Mostly empty, like a disk image, so that xz compresses it quickly.
	data := make([]byte, 72<<20)
	for i := 0; i < 4; i++ {
		copy(data[i*18<<20:], sample(1<<20, int64(20+i)))
	}
	want := sha256.Sum256(data)
	dir := t.TempDir()
	const allowance = 36 << 20
	for _, c := range []struct {
		name string
		args []string
	}{
		{"xz -6 -T0 shape: 24 MiB blocks, 8 MiB dictionary", []string{"--lzma2=preset=0,dict=8MiB", "-T2", "--block-size=24MiB"}},
		{"xz -9 -T0 shape: 70 MiB block, 64 MiB dictionary", []string{"--lzma2=preset=0,dict=64MiB", "-T2", "--block-size=70MiB"}},
	} {
		comp := compress(t, "xz", data, append(c.args, "-c")...)
		path := filepath.Join(dir, "image.xz")
		if err := os.WriteFile(path, comp, 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), rssChildEnv+"="+path, "GOGC=30", fmt.Sprintf("GOMEMLIMIT=%dMiB", (decodeBudget+24<<20)>>20))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: child: %v: %s", c.name, err, out)
		}
		var sum string
		var rss int64
		if _, err := fmt.Sscan(string(out), &sum, &rss); err != nil || sum != fmt.Sprintf("%x", want) {
			t.Fatalf("%s: child printed %q (%v), want sha256 %x and its peak RSS", c.name, out, err, want)
		}
		t.Logf("%s: peak RSS %d MiB (bound %d MiB)", c.name, rss>>20, (decodeBudget+allowance)>>20)
		if rss > decodeBudget+allowance {
			t.Errorf("%s: peak RSS %d MiB, more than the %d MiB budget + %d MiB", c.name, rss>>20, decodeBudget>>20, allowance>>20)
		}

		// In process: the budget's high-water mark counts the dictionary,
		// so it is at least one block's dictionary and never above the budget.
		r, _ := NewReader(bytes.NewReader(comp), FormatXZ, 2)
		if _, err := io.Copy(io.Discard, r); err != nil {
			t.Fatal(err)
		}
		peak := r.(*xzReader).budget.peak
		if peak > decodeBudget || peak < 8<<20 {
			t.Errorf("%s: budget high-water mark %d MiB, want between the dictionary and %d MiB", c.name, peak>>20, decodeBudget>>20)
		}
	}
}

// TestXZDictionaryTooLarge: a block whose dictionary cannot fit the budget
// (sizes unknown, so it cannot be trimmed) is refused as unsupported, before
// anything is allocated for it.
func TestXZDictionaryTooLarge(t *testing.T) {
	comp := compress(t, "xz", sample(1<<20, 9), "--lzma2=preset=0,dict=96MiB", "-T1", "-c")
	_, err := decodeAll(t, comp, FormatXZ, 2)
	if !errors.Is(err, ErrUnsupported) || ReportCode(err) != "unsupported_format" {
		t.Fatalf("err = %v, want ErrUnsupported", err)
	}
	// The same dictionary in blocks with recorded sizes is trimmed to the
	// block and decodes.
	data := sample(4<<20, 10)
	comp = compress(t, "xz", data, "--lzma2=preset=0,dict=96MiB", "-T2", "--block-size=1MiB", "-c")
	got, err := decodeAll(t, comp, FormatXZ, 2)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("blocks with sizes: err = %v, output equal: %v", err, bytes.Equal(got, data))
	}
}

// zeroImage is a disk-like image: a little data, then many empty 1 MiB
// blocks, which xz -T compresses to identical bytes.
func zeroImage() []byte {
	data := make([]byte, 24<<20)
	copy(data, sample(1<<20+4096, 11))
	copy(data[20<<20:], sample(300<<10, 12))
	return data
}

// TestXZZeroBlocks: empty blocks identical to one already decoded are not
// decoded again (zeroBlocks), and a damaged copy of such a block, in its
// data or in its check, is still caught.
func TestXZZeroBlocks(t *testing.T) {
	data := zeroImage()
	comp := compress(t, "xz", data, "-0", "-T2", "--block-size=1MiB", "-c")
	r, _ := NewReader(bytes.NewReader(comp), FormatXZ, 2)
	var out bytes.Buffer
	if _, err := io.Copy(&out, r); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), data) {
		t.Fatal("output differs")
	}
	if n := len(r.(*xzReader).zeros.keys); n != 1 {
		t.Errorf("%d distinct empty blocks remembered, want 1", n)
	}

	// Find the empty blocks: the most frequent compressed block.
	empty := emptyBlock(t)
	var at []int
	for i := 0; ; {
		k := bytes.Index(comp[i:], empty)
		if k < 0 {
			break
		}
		at = append(at, i+k)
		i += k + len(empty)
	}
	if len(at) < 10 {
		t.Fatalf("found %d empty blocks, want many", len(at))
	}
	last := at[len(at)-1]
	for name, off := range map[string]int{
		"LZMA2 data": last + len(empty)/2,
		"CRC64":      last + len(empty) - 3,
	} {
		bad := append([]byte{}, comp...)
		bad[off] ^= 0x10
		if _, err := decodeAll(t, bad, FormatXZ, 2); !errors.Is(err, ErrCorrupt) {
			t.Errorf("damaged %s of the last empty block: err = %v, want ErrCorrupt", name, err)
		}
	}
}

// emptyBlock returns the bytes (header to check) of the compressed empty
// 1 MiB block: xz of 2 MiB of zeros with 1 MiB blocks holds two copies.
func emptyBlock(t *testing.T) []byte {
	t.Helper()
	two := compress(t, "xz", make([]byte, 2<<20), "-0", "-T2", "--block-size=1MiB", "-c")
	body := two[12:] // after the stream header
	n := (len(body) - 12) / 2
	for ; n > 0; n-- {
		if bytes.Equal(body[:n], body[n:2*n]) {
			return body[:n]
		}
	}
	t.Fatal("no repeated block in xz of zeros")
	return nil
}

func TestReportCode(t *testing.T) {
	for err, want := range map[error]string{
		fmt.Errorf("x: %w", ErrTruncated):    "truncated_input",
		fmt.Errorf("x: %w", ErrCorrupt):      "corrupt_input",
		fmt.Errorf("x: %w", ErrTrailingData): "corrupt_input",
		fmt.Errorf("x: %w", ErrUnsupported):  "unsupported_format",
		errors.New("connection reset"):       "",
	} {
		if got := ReportCode(err); got != want {
			t.Errorf("ReportCode(%v) = %q, want %q", err, got, want)
		}
	}
}
