package diskwrite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/faketree"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/testimage"
)

// gptImage builds a small disk image: protective MBR, a GPT header at the
// given sector size, data runs and long zero runs.
func gptImage(size int, sector int, seed int64) []byte {
	img := make([]byte, size)
	rng := rand.New(rand.NewSource(seed))
	img[510], img[511] = 0x55, 0xAA
	copy(img[sector:], "EFI PART")
	rng.Read(img[sector+8 : sector+92])
	for off := 2 << 20; off < size; off += 3 << 20 {
		n := min(700<<10+rng.Intn(300<<10), size-off)
		rng.Read(img[off : off+n])
	}
	if size >= 2*sector {
		copy(img[size-sector:], "EFI PART") // backup header
	}
	return img
}

func digest(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func newDisk(t *testing.T, size int64, fill byte) string {
	t.Helper()
	p := filepath.Join(faketree.DirectIODir(t), "disk.img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if fill != 0 {
		b := bytes.Repeat([]byte{fill}, 1<<20)
		for off := int64(0); off < size; off += 1 << 20 {
			f.WriteAt(b[:min(int64(len(b)), size-off)], off)
		}
	}
	f.Truncate(size)
	f.Close()
	return p
}

func readDisk(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestWriteSparseAndHoles(t *testing.T) {
	img := gptImage(24<<20, 512, 1)
	disk := newDisk(t, 64<<20, 0)
	res, err := Write(context.Background(), bytes.NewReader(img), Options{Path: disk, Capacity: 64 << 20, ExpectedSHA256: digest(img), ChunkSize: 2 << 20, Readback: true})
	if err != nil {
		t.Fatal(err)
	}
	got := readDisk(t, disk)
	if !bytes.Equal(got[:len(img)], img) {
		t.Fatal("disk does not hold the image")
	}
	if !res.Direct || !res.Verified || !res.ReadbackVerified || res.RawBytes != int64(len(img)) || res.SHA256 != digest(img) {
		t.Fatalf("result %+v", res)
	}
	if res.ZeroBytesSkipped < 8<<20 {
		t.Fatalf("only %d zero bytes skipped", res.ZeroBytesSkipped)
	}
	var st syscall.Stat_t
	syscall.Stat(disk, &st)
	if st.Blocks*512 >= int64(len(img)) {
		t.Fatalf("disk file uses %d bytes: zero runs were written instead of left as holes", st.Blocks*512)
	}
}

func TestZeroRunsOverwriteOldData(t *testing.T) {
	img := gptImage(10<<20+4096+100, 512, 2) // an end not sector aligned: the tail goes through the page cache
	disk := newDisk(t, 16<<20, 0xEE)
	res, err := Write(context.Background(), bytes.NewReader(img), Options{Path: disk, Capacity: 16 << 20, ExpectedSHA256: digest(img)})
	if err != nil {
		t.Fatal(err)
	}
	got := readDisk(t, disk)
	if !bytes.Equal(got[:len(img)], img) {
		t.Fatal("zero runs of the image do not read back as zeros over old data")
	}
	if !res.Direct {
		t.Fatal("directIO false: the unaligned tail went through the page cache, but the image did not")
	}
}

// headWatcher checks, on every read after the first, that the disk's first
// MiB is still blank: the partition table must come last.
type headWatcher struct {
	t     *testing.T
	r     io.Reader
	disk  string
	reads int
}

func (h *headWatcher) Read(p []byte) (int, error) {
	h.reads++
	if h.reads > 1 {
		f, _ := os.Open(h.disk)
		b := make([]byte, HeadSize)
		f.ReadAt(b, 0)
		f.Close()
		if !bytes.Equal(b, make([]byte, HeadSize)) {
			h.t.Errorf("read %d: the first MiB was written before the image was verified", h.reads)
		}
	}
	if len(p) > 1<<20 {
		p = p[:1<<20]
	}
	return h.r.Read(p)
}

func TestHeadWrittenLast(t *testing.T) {
	img := gptImage(12<<20, 512, 3)
	disk := newDisk(t, 16<<20, 0xAB) // an old OS: its first MiB must be wiped at once
	w := &headWatcher{t: t, r: bytes.NewReader(img), disk: disk}
	if _, err := Write(context.Background(), w, Options{Path: disk, Capacity: 16 << 20, ExpectedSHA256: digest(img), ChunkSize: 1 << 20, Buffers: 2}); err != nil {
		t.Fatal(err)
	}
	if w.reads < 5 {
		t.Fatalf("only %d reads observed", w.reads)
	}
	if !bytes.Equal(readDisk(t, disk)[:len(img)], img) {
		t.Fatal("image not on disk")
	}
}

func assertWiped(t *testing.T, disk string) {
	t.Helper()
	got := readDisk(t, disk)
	if bytes.Contains(got, []byte("EFI PART")) {
		t.Fatalf("a GPT signature is left on the disk at offset %d", bytes.Index(got, []byte("EFI PART")))
	}
	if !bytes.Equal(got[:HeadSize], make([]byte, HeadSize)) || !bytes.Equal(got[len(got)-HeadSize:], make([]byte, HeadSize)) {
		t.Fatal("first or last MiB not wiped")
	}
}

func TestDigestMismatchWipes(t *testing.T) {
	img := gptImage(12<<20, 512, 4)
	disk := newDisk(t, 16<<20, 0)
	// An old install: GPT at both ends.
	old := gptImage(16<<20, 512, 9)
	os.WriteFile(disk, old, 0o644)
	res, err := Write(context.Background(), bytes.NewReader(img), Options{Path: disk, Capacity: 16 << 20, ExpectedSHA256: digest(old)})
	if !errors.Is(err, ErrDigestMismatch) || !res.Wiped || res.Verified {
		t.Fatalf("err = %v, result %+v", err, res)
	}
	assertWiped(t, disk)
}

func TestTooSmall(t *testing.T) {
	img := gptImage(12<<20, 512, 5)
	disk := newDisk(t, 8<<20, 0)
	_, err := Write(context.Background(), bytes.NewReader(img), Options{Path: disk, Capacity: 8 << 20, ExpectedSHA256: digest(img), ChunkSize: 1 << 20})
	if !errors.Is(err, ErrTooSmall) {
		t.Fatalf("err = %v", err)
	}
	assertWiped(t, disk)
	if st, _ := os.Stat(disk); st.Size() != 8<<20 {
		t.Fatalf("disk file grew to %d", st.Size())
	}
}

func TestSectorSizeMismatch(t *testing.T) {
	img := gptImage(4<<20, 512, 6)
	disk := newDisk(t, 8<<20, 0)
	_, err := Write(context.Background(), bytes.NewReader(img), Options{Path: disk, Capacity: 8 << 20, SectorSize: 4096, ExpectedSHA256: digest(img)})
	if !errors.Is(err, ErrSectorSize) {
		t.Fatalf("err = %v", err)
	}
	img4k := gptImage(4<<20, 4096, 6)
	if _, err := Write(context.Background(), bytes.NewReader(img4k), Options{Path: disk, Capacity: 8 << 20, SectorSize: 4096, ExpectedSHA256: digest(img4k)}); err != nil {
		t.Fatalf("4Kn image on a 4Kn disk: %v", err)
	}
}

type failAfter struct {
	r   io.Reader
	n   int
	err error
}

func (f *failAfter) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, f.err
	}
	p = p[:min(len(p), f.n)]
	n, err := f.r.Read(p)
	f.n -= n
	return n, err
}

func TestSourceErrorWipes(t *testing.T) {
	img := gptImage(12<<20, 512, 7)
	disk := newDisk(t, 16<<20, 0)
	boom := errors.New("connection reset")
	_, err := Write(context.Background(), &failAfter{r: bytes.NewReader(img), n: 11 << 20, err: boom}, Options{Path: disk, Capacity: 16 << 20, ExpectedSHA256: digest(img)})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	assertWiped(t, disk)
}

func TestWriteFailureAborts(t *testing.T) {
	img := gptImage(12<<20, 512, 8)
	disk := newDisk(t, 4<<20, 0)
	aborted := make(chan struct{})
	_, err := Write(context.Background(), bytes.NewReader(img), Options{Path: disk, Capacity: 4 << 20, ExpectedSHA256: digest(img), ChunkSize: 1 << 20, Abort: func() { close(aborted) }})
	if !errors.Is(err, ErrTooSmall) {
		t.Fatalf("err = %v", err)
	}
	<-aborted // the source is told to stop when the disk side fails
}

func TestBadArguments(t *testing.T) {
	disk := newDisk(t, 1<<20, 0)
	if _, err := Write(context.Background(), bytes.NewReader(nil), Options{Path: disk, Capacity: 1 << 20, ExpectedSHA256: "abc"}); err == nil {
		t.Fatal("short digest accepted")
	}
	if _, err := Write(context.Background(), bytes.NewReader(nil), Options{Path: filepath.Join(t.TempDir(), "none"), Capacity: 1 << 20, ExpectedSHA256: digest(nil)}); !errors.Is(err, ErrWrite) {
		t.Fatalf("missing disk: %v", err)
	}
}

// talosImage is a Talos-like image with a valid GPT (backup header at its
// last sector), and its digest.
func talosImage(t *testing.T, size int64, sector int, seed int64) ([]byte, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "img.raw")
	sum, err := testimage.Write(p, testimage.Spec{Size: size, DataBytes: size / 8, SectorSize: sector, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	return readDisk(t, p), sum
}

// TestRefusedBeforeWriting: what the image's first MiB says it needs (its
// sector size, its size) is checked before the first byte is written; a
// refused disk is byte for byte what it was, and the error says so.
func TestRefusedBeforeWriting(t *testing.T) {
	old, _ := talosImage(t, 16<<20, 512, 11)
	img512, sum512 := talosImage(t, 8<<20, 512, 12)
	big, sumBig := talosImage(t, 24<<20, 512, 13)
	boom := errors.New("connection reset")
	for _, c := range []struct {
		name   string
		r      io.Reader
		o      Options
		target error
	}{
		{"512-byte image on a 4Kn disk", bytes.NewReader(img512), Options{SectorSize: 4096, ExpectedSHA256: sum512}, ErrSectorSize},
		// No size given: the GPT's backup header LBA says it all.
		{"image larger than the disk", bytes.NewReader(big), Options{ExpectedSHA256: sumBig}, ErrTooSmall},
		{"declared size larger than the disk", bytes.NewReader(img512), Options{ImageSize: 17 << 20, ExpectedSHA256: sum512}, ErrTooSmall},
		{"source fails within the first MiB", &failAfter{r: bytes.NewReader(img512), n: 300 << 10, err: boom}, Options{ExpectedSHA256: sum512}, boom},
	} {
		t.Run(c.name, func(t *testing.T) {
			disk := newDisk(t, 16<<20, 0)
			os.WriteFile(disk, old, 0o644)
			o := c.o
			o.Path, o.Capacity = disk, 16<<20
			res, err := Write(context.Background(), c.r, o)
			if !errors.Is(err, c.target) || res.Written || res.Wiped {
				t.Fatalf("err = %v, result %+v", err, res)
			}
			if !bytes.Equal(readDisk(t, disk), old) {
				t.Fatal("a refused write changed the disk")
			}
		})
	}
}

// TestStaleBackupWiped: an image written earlier and never booted has its
// backup GPT where it ended, not at the end of the disk. A later failed
// write must leave no GPT header anywhere, that one included.
func TestStaleBackupWiped(t *testing.T) {
	first, sum1 := talosImage(t, 12<<20, 512, 21)
	second, sum2 := talosImage(t, 20<<20, 512, 22)
	disk := newDisk(t, 32<<20, 0)
	if _, err := Write(context.Background(), bytes.NewReader(first), Options{Path: disk, Capacity: 32 << 20, ExpectedSHA256: sum1}); err != nil {
		t.Fatal(err)
	}
	if i := bytes.LastIndex(readDisk(t, disk), []byte("EFI PART")); i != 12<<20-512 {
		t.Fatalf("the first image's backup header is at %d", i)
	}
	boom := errors.New("connection reset")
	res, err := Write(context.Background(), &failAfter{r: bytes.NewReader(second), n: 3 << 20, err: boom}, Options{Path: disk, Capacity: 32 << 20, ExpectedSHA256: sum2, ChunkSize: 1 << 20})
	if !errors.Is(err, boom) || !res.Wiped {
		t.Fatalf("err = %v, result %+v", err, res)
	}
	assertWiped(t, disk)
}

// TestResultOnFailure: a failed write still says how far it got and how.
func TestResultOnFailure(t *testing.T) {
	img, sum := talosImage(t, 20<<20, 512, 31)
	disk := newDisk(t, 32<<20, 0)
	boom := errors.New("connection reset")
	res, err := Write(context.Background(), &failAfter{r: bytes.NewReader(img), n: 18 << 20, err: boom}, Options{Path: disk, Capacity: 32 << 20, ExpectedSHA256: sum, ChunkSize: 1 << 20})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	// The stages stop at the first error: the writer got somewhere between
	// the held-back first MiB and the point the source failed.
	if res.RawBytes < HeadSize || res.RawBytes > 18<<20 || !res.Direct || !res.Written || !res.Wiped || res.SHA256 != "" || res.Verified {
		t.Fatalf("result %+v", res)
	}
}

// TestCheckPredictsWrite: Check refuses exactly what Write refuses before
// its first byte, accepts what Write writes, and never changes the disk.
func TestCheckPredictsWrite(t *testing.T) {
	old, _ := talosImage(t, 16<<20, 512, 11)
	img512, sum512 := talosImage(t, 8<<20, 512, 12)
	img4k, sum4k := talosImage(t, 12<<20, 4096, 14)
	big, sumBig := talosImage(t, 24<<20, 512, 13)
	for _, c := range []struct {
		name   string
		img    []byte
		o      Options
		target error // nil: accepted
	}{
		{"fits", img512, Options{ExpectedSHA256: sum512, ImageSize: 8 << 20}, nil},
		{"4Kn image on a 4Kn disk", img4k, Options{SectorSize: 4096, ExpectedSHA256: sum4k}, nil},
		{"512-byte image on a 4Kn disk", img512, Options{SectorSize: 4096, ExpectedSHA256: sum512}, ErrSectorSize},
		{"image larger than the disk", big, Options{ExpectedSHA256: sumBig}, ErrTooSmall},
		{"declared size larger than the disk", img512, Options{ImageSize: 17 << 20, ExpectedSHA256: sum512}, ErrTooSmall},
	} {
		t.Run(c.name, func(t *testing.T) {
			disk := newDisk(t, 16<<20, 0)
			os.WriteFile(disk, old, 0o644)
			o := c.o
			o.Path, o.Capacity = disk, 16<<20
			tg, needs, err := Check(c.img[:HeadSize], o)
			if (c.target == nil) != (err == nil) || (c.target != nil && !errors.Is(err, c.target)) {
				t.Fatalf("Check = %v, want %v", err, c.target)
			}
			if tg.Capacity != 16<<20 || tg.BlockDevice || needs.Bytes < int64(min(len(c.img), 16<<20)) {
				t.Fatalf("target %+v needs %+v", tg, needs)
			}
			if !bytes.Equal(readDisk(t, disk), old) {
				t.Fatal("Check changed the disk")
			}
			res, werr := Write(context.Background(), bytes.NewReader(c.img), o)
			if (werr == nil) != (err == nil) || (c.target != nil && (!errors.Is(werr, c.target) || res.Written)) {
				t.Fatalf("Write = %v (written %v), Check said %v", werr, res.Written, err)
			}
		})
	}
	if _, _, err := Check(img512, Options{Path: filepath.Join(t.TempDir(), "none"), ExpectedSHA256: sum512}); !errors.Is(err, ErrWrite) {
		t.Fatalf("missing disk: %v", err)
	}
	if _, _, err := Check(img512, Options{Path: newDisk(t, 1<<20, 0), ExpectedSHA256: "abc"}); err == nil {
		t.Fatal("short digest accepted")
	}
}
