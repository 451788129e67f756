package decompress

import (
	"bytes"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The seed corpus of FuzzXZ is testdata/fuzz/FuzzXZ: small files written
// by xz-utils covering each path of the reader (blocks with and without
// sizes, every check type, uncompressed LZMA2 chunks, repeated empty blocks,
// several streams with padding, an empty stream) and a few damaged ones.
// `go test` runs it; `go test -fuzz FuzzXZ ./imager/decompress` explores
// from it. -update-seeds rewrites it with the xz on PATH.
var updateSeeds = flag.Bool("update-seeds", false, "rewrite testdata/fuzz/FuzzXZ with xz-utils")

// fuzzMaxOut stops decoding inputs that expand beyond it (LZMA2 can turn a
// few bytes into megabytes): they are about speed, not correctness.
const fuzzMaxOut = 64 << 20

const seedDir = "testdata/fuzz/FuzzXZ"

// seedInput is a small disk-like input: data, text and zeros.
func seedInput(n int, seed int64) []byte {
	b := sample(n, seed)
	clear(b[n/2 : n/2+n/4])
	return b
}

func xzSeeds(t testing.TB) map[string][]byte {
	data := seedInput(24<<10, 30)
	zeros := make([]byte, 40<<10)
	copy(zeros[8<<10:], data[:1000])
	random := sample(12<<10, 31)
	multi := compress(t, "xz", data, "-0", "-T2", "--block-size=4KiB", "-c")
	single := compress(t, "xz", data, "-0", "-T1", "-c")
	seeds := map[string][]byte{
		"multi-block-crc64":          multi,
		"single-block-streaming":     single,
		"multi-block-crc32":          compress(t, "xz", data, "-1", "-T2", "--block-size=6KiB", "--check=crc32", "-c"),
		"multi-block-sha256":         compress(t, "xz", data, "-0", "-T2", "--block-size=8KiB", "--check=sha256", "-c"),
		"single-block-no-check":      compress(t, "xz", data, "-0", "-T1", "--check=none", "-c"),
		"repeated-empty-blocks":      compress(t, "xz", zeros, "-0", "-T2", "--block-size=4KiB", "-c"),
		"uncompressed-chunks":        compress(t, "xz", random, "-0", "-T2", "--block-size=4KiB", "-c"),
		"empty-stream":               compress(t, "xz", nil, "-0", "-c"),
		"two-streams-padding":        append(append(append([]byte{}, multi...), 0, 0, 0, 0), single...),
		"damaged-truncated-in-block": multi[:len(multi)/2],
		"damaged-trailing-garbage":   append(append([]byte{}, single...), "garbage!"...),
	}
	flipped := append([]byte{}, multi...)
	flipped[len(flipped)/3] ^= 0x08
	seeds["damaged-flipped-bit"] = flipped
	return seeds
}

// readSeeds loads the committed corpus (go test fuzz v1, one []byte each).
func readSeeds(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(seedDir, "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no seed corpus in %s (%v): run go test -run FuzzXZ -update-seeds", seedDir, err)
	}
	seeds := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(strings.TrimSpace(string(b)), "\n", 2)
		if len(lines) != 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "[]byte(") {
			t.Fatalf("%s: not a go test fuzz v1 []byte file", f)
		}
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		seeds[filepath.Base(f)] = []byte(s)
	}
	return seeds
}

func writeSeeds(t testing.TB) {
	if err := os.MkdirAll(seedDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range xzSeeds(t) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(seedDir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// xzUtils decodes with the reference implementation: ok and the sha256 of
// the output.
func xzUtils(in []byte) (bool, [32]byte) {
	cmd := exec.Command("xz", "-dc")
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.Output()
	return err == nil, sha256.Sum256(out)
}

// FuzzXZ decodes arbitrary bytes as xz. Every outcome must be either the
// same image xz-utils decodes, or an error whose report code is
// corrupt_input or truncated_input (truncated_input for any strict prefix of
// a valid seed); never a panic, a hang (the reader's goroutines must all
// exit after Close) or memory beyond the decoder's budget.
func FuzzXZ(f *testing.F) {
	requireTool(f, "xz")
	if *updateSeeds {
		writeSeeds(f)
	}
	valid := validSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		if err := checkXZ(in, valid); err != nil {
			t.Fatal(err)
		}
	})
}

// validSeeds are the undamaged seeds: their strict prefixes are truncations.
func validSeeds(t testing.TB) map[string][]byte {
	valid := map[string][]byte{}
	for name, b := range readSeeds(t) {
		if !strings.HasPrefix(name, "damaged-") {
			valid[name] = b
		}
	}
	return valid
}

// checkXZ is FuzzXZ's oracle for one input: it says what is wrong, if anything.
func checkXZ(in []byte, valid map[string][]byte) error {
	r, err := NewReader(bytes.NewReader(in), FormatXZ, 2)
	if err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(r, fuzzMaxOut))
	r.Close()
	x := r.(*xzReader)
	for range x.queue { // returns once the parser and the workers exited
	}
	if peak := x.budget.peak; peak > decodeBudget {
		return fmt.Errorf("budget high-water mark %d above %d", peak, decodeBudget)
	}
	if n >= fuzzMaxOut {
		return nil
	}
	if err == nil {
		ok, want := xzUtils(in)
		var got [32]byte
		copy(got[:], h.Sum(nil))
		if !ok || got != want {
			return fmt.Errorf("decoded %d bytes without error, but xz-utils ok=%v and output equal=%v", n, ok, got == want)
		}
		return nil
	}
	code := ReportCode(err)
	if code != "corrupt_input" && code != "truncated_input" {
		return fmt.Errorf("error %w has report code %q, want corrupt_input or truncated_input", err, code)
	}
	for name, v := range valid {
		if len(in) < len(v) && bytes.HasPrefix(v, in) && code != "truncated_input" {
			return fmt.Errorf("the first %d bytes of seed %s (%d bytes): %w has code %q, want truncated_input", len(in), name, len(v), err, code)
		}
	}
	return nil
}

// TestXZSeedMutations runs FuzzXZ's oracle on systematic mutations of the
// seeds in every `go test`: prefixes (truncated downloads) and single bit
// flips, densely in the headers and at a stride in the data.
func TestXZSeedMutations(t *testing.T) {
	requireTool(t, "xz")
	valid := validSeeds(t)
	for name, seed := range valid {
		for cut := 0; cut < len(seed); cut += stride(cut) {
			if err := checkXZ(seed[:cut], valid); err != nil {
				t.Errorf("seed %s cut to %d bytes: %v", name, cut, err)
			}
		}
		for at := 0; at < len(seed); at += stride(at) {
			in := append([]byte{}, seed...)
			in[at] ^= 1 << (at % 8)
			if err := checkXZ(in, valid); err != nil {
				t.Errorf("seed %s, bit %d of byte %d flipped: %v", name, at%8, at, err)
			}
		}
	}
}

// stride: every byte of the first 64 (stream and block headers), then
// every 37th.
func stride(at int) int {
	if at < 64 {
		return 1
	}
	return 37
}
