// Package diskwrite streams an image onto a disk (block device or regular
// file): every check that can refuse the disk (exclusive open, the device's
// own size and sector size against the image's first MiB) before the first
// byte is written, O_DIRECT aligned writes in large chunks, hashing and
// writing overlapped with reading, runs of zeros turned into holes/zeroed
// ranges instead of writes, the first MiB held back and written only once the
// SHA-256 matched, and every GPT header (the disk's, an earlier image's
// backup, this image's) wiped on any failure so a half-written disk never
// boots.
package diskwrite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Sentinel errors, mapped to report codes by the command.
var (
	ErrDigestMismatch = errors.New("digest mismatch")
	ErrTooSmall       = errors.New("disk too small")
	ErrWrite          = errors.New("write failed")
	ErrReadback       = errors.New("read-back verification failed")
	ErrSectorSize     = errors.New("image sector size does not match the disk")
	ErrBusy           = errors.New("disk busy")
)

const (
	// HeadSize is the part held back and written last: it holds the
	// protective MBR and the primary GPT (and the boot loader stage).
	HeadSize = 1 << 20
	align    = 4096
	segment  = 64 << 10 // zero-detection granularity
)

// Options describe the target and the expected result.
type Options struct {
	// Path is the file to open (already mapped through the sysroot).
	Path string
	// Capacity is the usable size of the disk in bytes.
	Capacity int64
	// SectorSize is the disk's logical sector size (512 when 0); a block
	// device's own answer (BLKSSZGET) wins.
	SectorSize int
	// ImageSize is the raw image size when known (manifest, --image-size,
	// the compressed file's metadata): checked against the disk before the
	// first byte is written, like the size the image's GPT declares.
	ImageSize int64
	// ExpectedSHA256 is the raw image digest (hex); required.
	ExpectedSHA256 string
	// Readback re-reads the written image with O_DIRECT and compares digests.
	Readback bool
	// ChunkSize is the write size (a multiple of 1 MiB, default 8 MiB), and
	// Buffers the number of chunks in flight (default 6).
	ChunkSize int
	Buffers   int
	// Progress counters, updated while writing (may be nil).
	Counters *Counters
	// Log receives warnings that do not fail the write; nil discards them.
	Log *slog.Logger
	// Abort, when set, is called as soon as writing fails, to unblock a
	// read of r that waits on the network (cancel the source).
	Abort func()
}

// Counters can be read while Write runs.
type Counters struct {
	Out   atomic.Int64 // raw image bytes handled (written or skipped)
	Phase atomic.Value // string: write | sync | verify | done; unset until the disk is first written
}

// Result says what was written; on failure, how far it got.
type Result struct {
	RawBytes         int64 // image bytes handled (written, or zeroed without writing)
	SHA256           string
	ZeroBytesSkipped int64 // zero runs the device zeroed itself (holes, WRITE ZEROES), never written
	Direct           bool  // the image went to the disk with O_DIRECT (an unaligned tail excepted)
	Verified         bool
	ReadbackVerified bool
	BlockDevice      bool
	WriteSeconds     float64
	SyncSeconds      float64
	// Written: the disk was modified. False on a failure means it was
	// refused before the first byte and is exactly as it was.
	Written bool
	Wiped   bool // on failure: every GPT header area was cleared
}

type target struct {
	f         *os.File
	fd        int
	direct    bool // O_DIRECT is set on fd right now
	fellBack  bool // O_DIRECT was refused: buffered IO from then on
	blockDev  bool
	sector    int
	punchOK   bool // fallocate punch still worth trying
	zeros     []byte
	capacity  int64
	log       *slog.Logger
	maxOffset int64
	oldGPT    [][2]int64 // an earlier layout's backup GPT headers, wiped with the ends of the disk
}

func alignedBuf(n int) []byte {
	b := make([]byte, n+align)
	off := 0
	if r := int(uintptrOf(b) % align); r != 0 {
		off = align - r
	}
	return b[off : off+n : off+n]
}

func expectedDigest(s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != sha256.Size {
		return nil, fmt.Errorf("expected SHA-256 %q is not 64 hex digits", s)
	}
	return b, nil
}

// Needs is what an image's first MiB asks of the disk.
type Needs struct {
	// Bytes is how far the image reaches: its GPT's backup header or
	// last usable LBA, or the declared image size, whichever is larger.
	Bytes int64
	// SectorSize is the sector size its GPT is laid out for; 0 when the
	// first MiB holds no GPT.
	SectorSize int
}

// Target is the disk as the device itself describes it.
type Target struct {
	Capacity    int64
	SectorSize  int
	BlockDevice bool
	// DirectIO: the disk accepted O_DIRECT.
	DirectIO bool
}

// withDefaults fills the Options fields Write and Check default.
func (o Options) withDefaults() Options {
	if o.SectorSize <= 0 {
		o.SectorSize = 512
	}
	if o.ChunkSize <= 0 {
		o.ChunkSize = 8 << 20
	}
	if o.Buffers <= 0 {
		o.Buffers = 6
	}
	if o.Counters == nil {
		o.Counters = &Counters{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// Check makes every check Write makes before its first byte, on head (the
// image's first MiB, or all of a smaller image), and writes nothing: it
// opens the disk the way Write does (exclusively, for writing), asks the
// device its size and sector size, and compares them with what head's GPT
// and o.ImageSize need. A nil error means Write would start writing.
func Check(head []byte, o Options) (Target, Needs, error) {
	o = o.withDefaults()
	if _, err := expectedDigest(o.ExpectedSHA256); err != nil {
		return Target{}, Needs{}, err
	}
	t, err := openTarget(o)
	if err != nil {
		return Target{}, Needs{}, err
	}
	defer t.f.Close()
	tg := Target{Capacity: t.capacity, SectorSize: t.sector, BlockDevice: t.blockDev, DirectIO: !t.fellBack}
	if len(head) > HeadSize {
		head = head[:HeadSize]
	}
	n, err := imageNeeds(head, o.ImageSize, t.sector, t.capacity)
	return tg, n, err
}

// Write copies the raw image read from r onto the disk. It opens the disk
// exclusively and reads the image's first MiB before writing anything: a
// disk that is busy, too small or of the wrong sector size is refused as it
// was. From the first write on, a failure zeroes every GPT header area.
func Write(ctx context.Context, r io.Reader, o Options) (Result, error) {
	var res Result
	o = o.withDefaults()
	if o.ChunkSize%HeadSize != 0 {
		return res, fmt.Errorf("chunk size %d is not a multiple of 1 MiB", o.ChunkSize)
	}
	want, err := expectedDigest(o.ExpectedSHA256)
	if err != nil {
		return res, err
	}
	t, err := openTarget(o)
	if err != nil {
		return res, err
	}
	defer t.f.Close()
	res.BlockDevice = t.blockDev

	// The image's first MiB (protective MBR, primary GPT) is held back and
	// written last; it also says what the image needs from the disk.
	head, err := readHead(r)
	if err != nil {
		return res, err
	}
	if err := checkImage(head, o.ImageSize, t.sector, t.capacity); err != nil {
		return res, err
	}
	t.oldGPT = t.findOldBackups()
	rest := r
	if len(head) < HeadSize {
		// The image ended within its first MiB: r is not read again.
		rest = bytes.NewReader(nil)
	}

	res.Written = true
	err = writeImage(ctx, t, head, rest, want, o, &res)
	res.Direct = !t.fellBack
	return res, err
}

// readHead reads the image's first MiB, or all of a smaller image, into an
// aligned buffer.
func readHead(r io.Reader) ([]byte, error) {
	head := alignedBuf(HeadSize)
	n, err := io.ReadFull(r, head)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, err
	}
	return head[:n], nil
}

// writeImage writes the image onto a disk that passed every check: it
// clears the old partition tables, streams the rest of the image, checks
// its digest, and only then writes head (the partition table). Any failure
// after the first wipe wipes the disk again (abandon), so a half-written
// disk never boots.
func writeImage(ctx context.Context, t *target, head []byte, rest io.Reader, want []byte, o Options, res *Result) error {
	// From now until the very end the disk holds no bootable layout,
	// whatever happens to this process.
	o.Counters.Phase.Store("write")
	start := time.Now()
	if err := t.wipe(0); err != nil {
		return err
	}
	t.maxOffset = 0 // from here on: how far the image reached
	w := &imageWriter{t: t, handled: int64(len(head)), progress: &o.Counters.Out}
	o.Counters.Out.Store(w.handled)
	h := sha256.New()
	h.Write(head)
	err := stream(ctx, rest, h, w, o)
	res.RawBytes, res.ZeroBytesSkipped = w.handled, w.skipped
	if err == nil {
		err = finish(ctx, t, head, h.Sum(nil), want, w.handled, start, o, res)
	}
	if err != nil {
		res.Wiped, err = t.abandon(err)
	}
	return err
}

// finish checks the image's digest, syncs, writes the held-back head and
// syncs again, then (optionally) reads the whole image back.
func finish(ctx context.Context, t *target, head, sum, want []byte, total int64, start time.Time, o Options, res *Result) error {
	res.SHA256 = hex.EncodeToString(sum)
	res.WriteSeconds = time.Since(start).Seconds()
	if !bytes.Equal(sum, want) {
		return fmt.Errorf("%w: the image's SHA-256 is %s, expected %s", ErrDigestMismatch, res.SHA256, o.ExpectedSHA256)
	}
	res.Verified = true
	o.Counters.Phase.Store("sync")
	syncStart := time.Now()
	if err := t.commitHead(head); err != nil {
		return err
	}
	res.SyncSeconds = time.Since(syncStart).Seconds()
	if t.blockDev {
		if err := RereadPartitions(t.fd); err != nil {
			o.Log.Warn("BLKRRPART failed; the kernel sees the new partitions after a reboot", "error", err)
		}
	}
	if o.Readback {
		o.Counters.Phase.Store("verify")
		if err := readback(ctx, o.Path, total, want); err != nil {
			return err
		}
		res.ReadbackVerified = true
	}
	o.Counters.Phase.Store("done")
	return nil
}

// commitHead makes the image bootable: everything else reaches the disk
// first, then the partition table.
func (t *target) commitHead(head []byte) error {
	if err := t.sync(); err != nil {
		return err
	}
	if err := t.writeAt(head, 0); err != nil {
		return err
	}
	return t.sync()
}

// abandon wipes the disk after a failure (see wipe) and says whether the
// wipe succeeded. The failure is returned as it is; when the wipe fails
// too, that is added to its message (the failure stays the one errors.Is
// matches).
func (t *target) abandon(failure error) (wiped bool, err error) {
	if werr := t.wipe(t.maxOffset); werr != nil {
		return false, fmt.Errorf("%w (and wiping the disk failed: %v)", failure, werr)
	}
	if t.blockDev {
		_ = RereadPartitions(t.fd) // best effort: the kernel forgets the old partitions
	}
	return true, failure
}

func openTarget(o Options) (*target, error) {
	st, err := os.Stat(o.Path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrWrite, err)
	}
	blockDev := st.Mode()&os.ModeDevice != 0 && st.Mode()&os.ModeCharDevice == 0
	t := &target{blockDev: blockDev, sector: o.SectorSize, punchOK: true, capacity: o.Capacity, log: o.Log, zeros: alignedBuf(HeadSize)}
	f, err := t.open(o.Path)
	switch {
	case errors.Is(err, unix.EBUSY):
		return nil, fmt.Errorf("%w: %s: the kernel refuses an exclusive open (mounted, or held by RAID/LVM/device-mapper): %v", ErrBusy, o.Path, err)
	case errors.Is(err, unix.EPERM) && blockDev:
		// Kernels built without CONFIG_BLK_DEV_WRITE_MOUNTED refuse writes to a mounted device this way.
		return nil, fmt.Errorf("%w: %s: the kernel refuses writes to it (EPERM: mounted?): %v", ErrBusy, o.Path, err)
	case err != nil:
		return nil, fmt.Errorf("%w: opening the disk: %v", ErrWrite, err)
	}
	t.f, t.fd = f, int(f.Fd())
	if blockDev {
		t.askDevice()
	}
	return t, nil
}

// open opens path for writing, with O_DIRECT when the filesystem takes it,
// and exclusively when it is a block device.
func (t *target) open(path string) (*os.File, error) {
	flags := os.O_RDWR | unix.O_CLOEXEC
	if t.blockDev {
		// O_EXCL on a block device fails with EBUSY while anything (a mount,
		// RAID, LVM) holds it: the kernel's own "in use" check.
		flags |= unix.O_EXCL
	}
	f, err := os.OpenFile(path, flags|unix.O_DIRECT, 0)
	if err == nil {
		t.direct = true
	} else if errors.Is(err, unix.EINVAL) {
		// tmpfs and a few others refuse O_DIRECT: fall back to buffered IO.
		t.log.Warn("target does not support O_DIRECT; writing through the page cache", "path", path)
		t.fellBack = true
		f, err = os.OpenFile(path, flags, 0)
	}
	return f, err
}

// askDevice takes the block device's own size and sector size, not sysfs's
// or the caller's. A size the caller gave is kept when it is smaller.
func (t *target) askDevice() {
	var size uint64
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(t.fd), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size))); e == 0 && (t.capacity <= 0 || int64(size) < t.capacity) {
		t.capacity = int64(size)
	}
	if ss, err := unix.IoctlGetInt(t.fd, unix.BLKSSZGET); err == nil && ss > 0 {
		t.sector = ss
	}
}

// writeAt writes p at off, with O_DIRECT when both are sector aligned;
// the unaligned end of an image goes through the page cache.
func (t *target) writeAt(p []byte, off int64) error {
	if len(p) == 0 {
		return nil
	}
	if t.direct && !t.aligned(p, off) {
		// The unaligned end of an image: through the page cache, then back to O_DIRECT.
		if err := t.setDirect(false); err != nil {
			return err
		}
		defer t.restoreDirect()
	}
	return t.pwriteAll(p, off)
}

// aligned reports whether O_DIRECT can write p at off: offset and length
// whole sectors, the buffer aligned in memory.
func (t *target) aligned(p []byte, off int64) bool {
	return off%int64(t.sector) == 0 && len(p)%t.sector == 0 && uintptrOf(p)%align == 0
}

// restoreDirect turns O_DIRECT back on after an unaligned write, unless it
// was given up; if it cannot be, it is given up from then on.
func (t *target) restoreDirect() {
	if t.fellBack {
		return
	}
	if err := t.setDirect(true); err != nil {
		t.fellBack = true
	}
}

// pwriteAll writes all of p at off, falling back to the page cache for good
// when the filesystem refuses an O_DIRECT write it accepted at open.
func (t *target) pwriteAll(p []byte, off int64) error {
	for len(p) > 0 {
		n, err := unix.Pwrite(t.fd, p, off)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EINVAL && t.direct {
			// Some filesystems accept O_DIRECT at open and refuse the write.
			t.log.Warn("O_DIRECT write refused; writing through the page cache", "error", err)
			t.fellBack = true
			if err := t.setDirect(false); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("%w: writing %d bytes at offset %d: %v", ErrWrite, len(p), off, err)
		}
		if n == 0 {
			return fmt.Errorf("%w: short write at offset %d", ErrWrite, off)
		}
		p, off = p[n:], off+int64(n)
		t.maxOffset = max(t.maxOffset, off)
	}
	return nil
}

func (t *target) setDirect(on bool) error {
	fl, err := unix.FcntlInt(uintptr(t.fd), unix.F_GETFL, 0)
	if err != nil {
		return fmt.Errorf("%w: fcntl: %v", ErrWrite, err)
	}
	if on {
		fl |= unix.O_DIRECT
	} else {
		fl &^= unix.O_DIRECT
	}
	if _, err := unix.FcntlInt(uintptr(t.fd), unix.F_SETFL, fl); err != nil {
		return fmt.Errorf("%w: fcntl: %v", ErrWrite, err)
	}
	t.direct = on
	return nil
}

// zeroRange makes [off, off+n) read as zeros, without writing them when the
// device or filesystem can (punched reports that): a hole in a file, a
// zeroed range on a block device (PUNCH_HOLE|KEEP_SIZE fails there rather
// than fall back to slow writes, so zeros are written only when the device
// cannot do it itself).
func (t *target) zeroRange(off, n int64) (punched bool, err error) {
	if t.punchOK {
		err := unix.Fallocate(t.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
		if err == nil {
			t.maxOffset = max(t.maxOffset, off+n)
			return true, nil
		}
		t.punchOK = false
		t.log.Info("cannot punch holes; writing zeros instead", "error", err)
	}
	return false, t.writeZeros(off, n)
}

func (t *target) writeZeros(off, n int64) error {
	for n > 0 {
		k := min(n, int64(len(t.zeros)))
		if err := t.writeAt(t.zeros[:k], off); err != nil {
			return err
		}
		off, n = off+k, n-k
	}
	return nil
}

func (t *target) sync() error {
	if err := unix.Fdatasync(t.fd); err != nil {
		return fmt.Errorf("%w: fdatasync: %v", ErrWrite, err)
	}
	return nil
}

// wipe zeroes the first and last MiB of the disk, the backup GPT headers an
// earlier layout left inside the disk, and the last MiB below written (where
// this image's backup GPT went), then syncs.
func (t *target) wipe(written int64) error {
	ranges := [][2]int64{{0, min(HeadSize, t.capacity)}}
	if t.capacity > HeadSize {
		ranges = append(ranges, [2]int64{t.capacity - HeadSize, HeadSize})
	}
	ranges = append(ranges, t.oldGPT...)
	if written > HeadSize {
		s := (written - HeadSize) &^ (align - 1)
		ranges = append(ranges, [2]int64{s, min(HeadSize+align, t.capacity-s)})
	}
	for _, r := range ranges {
		if err := t.writeZeros(r[0], r[1]); err != nil {
			return err
		}
	}
	return t.sync()
}

// findOldBackups reads the disk's current primary GPT header (at either
// sector size) for the place of its backup header: an image written by an
// earlier run, and never booted, has it where that image ended, not at the
// end of the disk, so wiping the ends alone would leave it behind.
func (t *target) findOldBackups() [][2]int64 {
	buf := alignedBuf(2 * align)
	if n, _ := unix.Pread(t.fd, buf, 0); n < len(buf) {
		return nil
	}
	var out [][2]int64
	for _, sector := range []int64{512, 4096} {
		h, ok := parseGPTHeader(buf[sector:], sector)
		if !ok || h.alternateLBA <= 1 {
			continue
		}
		off := int64(h.alternateLBA) * sector
		if off+sector > t.capacity {
			continue
		}
		start := off &^ (align - 1)
		end := min((off+sector+align-1)&^(align-1), t.capacity)
		out = append(out, [2]int64{start, end - start})
	}
	return out
}

// gptHeader is what em-imager reads from a GPT header.
type gptHeader struct {
	myLBA, alternateLBA, lastUsableLBA uint64
}

// parseGPTHeader reads a GPT header at the start of b: signature, size and
// CRC32 must hold, or it is not one.
func parseGPTHeader(b []byte, sector int64) (gptHeader, bool) {
	if len(b) < 92 || !bytes.Equal(b[:8], []byte("EFI PART")) {
		return gptHeader{}, false
	}
	size := binary.LittleEndian.Uint32(b[12:16])
	if size < 92 || int64(size) > sector || int(size) > len(b) {
		return gptHeader{}, false
	}
	hdr := append([]byte(nil), b[:size]...)
	want := binary.LittleEndian.Uint32(hdr[16:20])
	binary.LittleEndian.PutUint32(hdr[16:20], 0)
	if crc32.ChecksumIEEE(hdr) != want {
		return gptHeader{}, false
	}
	return gptHeader{
		myLBA:         binary.LittleEndian.Uint64(b[24:32]),
		alternateLBA:  binary.LittleEndian.Uint64(b[32:40]),
		lastUsableLBA: binary.LittleEndian.Uint64(b[48:56]),
	}, true
}

// checkImage refuses, before anything is written, an image the disk cannot
// hold. Its first MiB's GPT header says the sector size it was laid out for
// (at byte 512 for 512-byte sectors, 4096 for 4 KiB ones) and how far the
// image reaches (its backup header's LBA); the caller may know the raw size.
func checkImage(head []byte, imageSize int64, diskSector int, capacity int64) error {
	_, err := imageNeeds(head, imageSize, diskSector, capacity)
	return err
}

// imageNeeds is checkImage that also says what the image needs.
func imageNeeds(head []byte, imageSize int64, diskSector int, capacity int64) (Needs, error) {
	imgSector := int64(0)
	need := imageSize
	for _, s := range []int64{512, 4096} {
		if int64(len(head)) < s+8 || !bytes.Equal(head[s:s+8], []byte("EFI PART")) {
			continue
		}
		imgSector = s
		if h, ok := parseGPTHeader(head[s:], s); ok && h.myLBA == 1 {
			last := max(h.alternateLBA, h.lastUsableLBA)
			if last >= uint64(math.MaxInt64/s) {
				// More sectors than any disk has (and an overflow below).
				return Needs{Bytes: math.MaxInt64, SectorSize: int(s)}, fmt.Errorf("%w: the image's GPT reaches LBA %d", ErrTooSmall, last)
			}
			need = max(need, int64(last+1)*s)
		}
		break
	}
	n := Needs{Bytes: need, SectorSize: int(imgSector)}
	if imgSector != 0 && imgSector != int64(diskSector) {
		return n, fmt.Errorf("%w: the image's GPT is laid out for %d-byte sectors, the disk has %d-byte logical sectors", ErrSectorSize, imgSector, diskSector)
	}
	if need > capacity {
		return n, fmt.Errorf("%w: the image needs %d bytes (its GPT or its declared size), the disk has %d", ErrTooSmall, need, capacity)
	}
	return n, nil
}

// RereadPartitions asks the kernel to read the disk's partition table again
// (BLKRRPART), retrying while udev briefly holds the disk.
func RereadPartitions(fd int) error {
	var err error
	for i := 0; i < 5; i++ {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.BLKRRPART, 0)
		if e == 0 {
			return nil
		}
		err = e
		if !errors.Is(err, unix.EBUSY) {
			return err
		}
		time.Sleep(200 * time.Millisecond) // udev may still hold the disk briefly
	}
	return err
}

// readback hashes the first n bytes of the disk again, bypassing the page cache.
func readback(ctx context.Context, path string, n int64, want []byte) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		f, err = os.Open(path)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrReadback, err)
	}
	defer f.Close()
	buf := alignedBuf(8 << 20)
	h := sha256.New()
	var off int64
	for off < n {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// O_DIRECT reads whole sectors; hash only the image's bytes.
		k, err := f.ReadAt(buf, off)
		if k == 0 && err != nil {
			return fmt.Errorf("%w: reading at offset %d: %v", ErrReadback, off, err)
		}
		k = int(min(int64(k), n-off))
		h.Write(buf[:k])
		off += int64(k)
	}
	if !bytes.Equal(h.Sum(nil), want) {
		return fmt.Errorf("%w: the disk reads back with SHA-256 %x, expected %x", ErrReadback, h.Sum(nil), want)
	}
	return nil
}
