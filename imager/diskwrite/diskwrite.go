// Package diskwrite streams an image onto a disk (block device or regular
// file): O_DIRECT aligned writes in large chunks, hashing and writing
// overlapped with reading, runs of zeros turned into holes/zeroed ranges
// instead of writes, the first MiB held back and written only once the
// SHA-256 matched, and the partition table areas wiped on any failure so a
// half-written disk never boots.
package diskwrite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sync/errgroup"
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
	// SectorSize is the disk's logical sector size (512 when 0).
	SectorSize int
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
	// Log receives warnings that do not fail the write.
	Log func(format string, args ...any)
	// Abort, when set, is called as soon as writing fails, to unblock a
	// read of r that waits on the network (cancel the source).
	Abort func()
}

// Counters can be read while Write runs.
type Counters struct {
	Out   atomic.Int64 // raw image bytes handled (written or skipped)
	Phase atomic.Value // string: write | sync | verify | done
}

// Result says what was written.
type Result struct {
	RawBytes         int64
	SHA256           string
	ZeroBytesSkipped int64
	Direct           bool // O_DIRECT was used for the bulk of the data
	Verified         bool
	ReadbackVerified bool
	BlockDevice      bool
	WriteSeconds     float64
	SyncSeconds      float64
	Wiped            bool // on failure: the partition table areas were cleared
}

type chunk struct {
	buf []byte // aligned, cap ChunkSize
	n   int
	off int64
}

type target struct {
	f         *os.File
	fd        int
	direct    bool
	blockDev  bool
	sector    int
	punchOK   bool // fallocate punch still worth trying
	zeros     []byte
	capacity  int64
	log       func(string, ...any)
	maxOffset int64
}

func alignedBuf(n int) []byte {
	b := make([]byte, n+align)
	off := 0
	if r := int(uintptrOf(b) % align); r != 0 {
		off = align - r
	}
	return b[off : off+n : off+n]
}

// Write copies the raw image read from r onto the disk. On error the disk's
// first and last MiB (and the last MiB of what was written) are zeroed.
func Write(ctx context.Context, r io.Reader, o Options) (res Result, err error) {
	if o.SectorSize <= 0 {
		o.SectorSize = 512
	}
	if o.ChunkSize <= 0 {
		o.ChunkSize = 8 << 20
	}
	if o.ChunkSize%HeadSize != 0 {
		return res, fmt.Errorf("chunk size %d is not a multiple of 1 MiB", o.ChunkSize)
	}
	if o.Buffers <= 0 {
		o.Buffers = 6
	}
	if o.Counters == nil {
		o.Counters = &Counters{}
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	want, err := hex.DecodeString(o.ExpectedSHA256)
	if err != nil || len(want) != sha256.Size {
		return res, fmt.Errorf("expected SHA-256 %q is not 64 hex digits", o.ExpectedSHA256)
	}
	t, err := openTarget(o)
	if err != nil {
		return res, err
	}
	defer t.f.Close()
	res.BlockDevice = t.blockDev
	o.Counters.Phase.Store("write")
	start := time.Now()

	// Clear the old partition tables first: from now until the very end the
	// disk holds no bootable layout, whatever happens to this process.
	if err := t.wipe(0); err != nil {
		return res, err
	}
	t.maxOffset = 0 // from here on: how far the image reached
	defer func() {
		if err != nil {
			if werr := t.wipe(t.maxOffset); werr != nil {
				err = fmt.Errorf("%w (and wiping the disk failed: %v)", err, werr)
			} else {
				res.Wiped = true
			}
		}
	}()

	head := alignedBuf(HeadSize)
	headLen := 0
	h := sha256.New()
	var total int64
	g, gctx := errgroup.WithContext(ctx)
	free := make(chan []byte, o.Buffers)
	for i := 0; i < o.Buffers; i++ {
		free <- alignedBuf(o.ChunkSize)
	}
	go func() {
		<-gctx.Done()
		// The group's cause is its first error, or Canceled once Wait returned.
		if o.Abort != nil && !errors.Is(context.Cause(gctx), context.Canceled) {
			o.Abort()
		}
	}()
	toHash := make(chan chunk, o.Buffers)
	toWrite := make(chan chunk, o.Buffers)
	g.Go(func() error { // read
		defer close(toHash)
		var off int64
		for {
			var buf []byte
			select {
			case buf = <-free:
			case <-gctx.Done():
				return gctx.Err()
			}
			n, err := io.ReadFull(r, buf)
			if n > 0 {
				if off+int64(n) > t.capacity {
					return fmt.Errorf("%w: the image is larger than the disk's %d bytes", ErrTooSmall, t.capacity)
				}
				select {
				case toHash <- chunk{buf, n, off}:
				case <-gctx.Done():
					return gctx.Err()
				}
				off += int64(n)
			}
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return nil
			}
			if err != nil {
				return err
			}
		}
	})
	g.Go(func() error { // hash
		defer close(toWrite)
		for c := range toHash {
			h.Write(c.buf[:c.n])
			select {
			case toWrite <- c:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	g.Go(func() error { // write
		var zs, ze int64 = -1, -1 // pending zero range
		flush := func() error {
			if zs >= 0 && ze > zs {
				if err := t.zeroRange(zs, ze-zs); err != nil {
					return err
				}
				res.ZeroBytesSkipped += ze - zs
			}
			zs, ze = -1, -1
			return nil
		}
		for c := range toWrite {
			p := c.buf[:c.n]
			from := 0
			if c.off == 0 {
				if err := checkSectorSize(p, t.sector); err != nil {
					return err
				}
				headLen = copy(head, p)
				from = headLen
			}
			for s := from; s < c.n; {
				e := min(s+segment, c.n)
				// Runs of whole zero segments become holes; the unaligned
				// tail of the image is always written.
				isZero := e-s == segment && bytes.Equal(p[s:e], t.zeros[:segment])
				if isZero {
					if zs < 0 {
						zs = c.off + int64(s)
					}
					ze = c.off + int64(e)
					s = e
					continue
				}
				if err := flush(); err != nil {
					return err
				}
				// Extend the data run as far as it goes.
				for e < c.n {
					ne := min(e+segment, c.n)
					if ne-e == segment && bytes.Equal(p[e:ne], t.zeros[:segment]) {
						break
					}
					e = ne
				}
				if err := t.writeAt(p[s:e], c.off+int64(s)); err != nil {
					return err
				}
				s = e
			}
			total = c.off + int64(c.n)
			o.Counters.Out.Store(total)
			free <- c.buf
		}
		return flush()
	})
	if err := g.Wait(); err != nil {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		return res, err
	}
	res.RawBytes = total
	res.SHA256 = hex.EncodeToString(h.Sum(nil))
	res.Direct = t.direct
	res.WriteSeconds = time.Since(start).Seconds()
	if !bytes.Equal(h.Sum(nil), want) {
		return res, fmt.Errorf("%w: the image's SHA-256 is %s, expected %s", ErrDigestMismatch, res.SHA256, o.ExpectedSHA256)
	}
	res.Verified = true
	o.Counters.Phase.Store("sync")
	syncStart := time.Now()
	if err := t.sync(); err != nil {
		return res, err
	}
	// Only now does the disk get its partition table.
	if err := t.writeAt(head[:headLen], 0); err != nil {
		return res, err
	}
	if err := t.sync(); err != nil {
		return res, err
	}
	res.SyncSeconds = time.Since(syncStart).Seconds()
	if t.blockDev {
		if err := rereadPartitions(t.fd); err != nil {
			o.Log("warning: BLKRRPART: %v (the kernel sees the new partitions after a reboot)", err)
		}
	}
	if o.Readback {
		o.Counters.Phase.Store("verify")
		if err := readback(ctx, o.Path, total, want); err != nil {
			return res, err
		}
		res.ReadbackVerified = true
	}
	o.Counters.Phase.Store("done")
	return res, nil
}

func openTarget(o Options) (*target, error) {
	st, err := os.Stat(o.Path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrWrite, err)
	}
	blockDev := st.Mode()&os.ModeDevice != 0 && st.Mode()&os.ModeCharDevice == 0
	flags := os.O_RDWR | unix.O_CLOEXEC
	if blockDev {
		// O_EXCL on a block device fails with EBUSY while anything (a mount,
		// RAID, LVM) holds it: the kernel's own "in use" check.
		flags |= unix.O_EXCL
	}
	t := &target{blockDev: blockDev, sector: o.SectorSize, punchOK: true, capacity: o.Capacity, log: o.Log, zeros: alignedBuf(HeadSize)}
	f, err := os.OpenFile(o.Path, flags|unix.O_DIRECT, 0)
	if err == nil {
		t.direct = true
	} else if errors.Is(err, unix.EINVAL) {
		// tmpfs and a few others refuse O_DIRECT: fall back to buffered IO.
		o.Log("warning: %s does not support O_DIRECT; writing through the page cache", o.Path)
		f, err = os.OpenFile(o.Path, flags, 0)
	}
	if err != nil {
		if errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("%w: %v", ErrBusy, err)
		}
		return nil, fmt.Errorf("%w: opening the disk: %v", ErrWrite, err)
	}
	t.f, t.fd = f, int(f.Fd())
	if blockDev {
		var size uint64
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(t.fd), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size))); e == 0 && int64(size) < t.capacity {
			t.capacity = int64(size)
		}
	}
	return t, nil
}

// writeAt writes p at off, with O_DIRECT when both are sector aligned;
// the unaligned end of an image goes through the page cache.
func (t *target) writeAt(p []byte, off int64) error {
	if len(p) == 0 {
		return nil
	}
	if t.direct && (off%int64(t.sector) != 0 || len(p)%t.sector != 0 || uintptrOf(p)%align != 0) {
		if err := t.setDirect(false); err != nil {
			return err
		}
	}
	for len(p) > 0 {
		n, err := unix.Pwrite(t.fd, p, off)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EINVAL && t.direct {
			// Some filesystems accept O_DIRECT at open and refuse the write.
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

// zeroRange makes [off, off+n) read as zeros without writing them when the
// device or filesystem can: a hole in a file, a zeroed range on a block
// device (PUNCH_HOLE|KEEP_SIZE fails there rather than fall back to slow
// writes, so zeros are written only when the device cannot do it itself).
func (t *target) zeroRange(off, n int64) error {
	if t.punchOK {
		err := unix.Fallocate(t.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
		if err == nil {
			t.maxOffset = max(t.maxOffset, off+n)
			return nil
		}
		t.punchOK = false
		t.log("note: cannot punch holes (%v); writing zeros instead", err)
	}
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

// wipe zeroes the first and last MiB of the disk, and the last MiB below
// written (where the image's backup GPT went), then syncs.
func (t *target) wipe(written int64) error {
	ranges := [][2]int64{{0, min(HeadSize, t.capacity)}}
	if t.capacity > HeadSize {
		ranges = append(ranges, [2]int64{t.capacity - HeadSize, HeadSize})
	}
	if written > HeadSize {
		s := (written - HeadSize) &^ (align - 1)
		ranges = append(ranges, [2]int64{s, min(HeadSize+align, t.capacity-s)})
	}
	for _, r := range ranges {
		off, n := r[0], r[1]
		for n > 0 {
			k := min(n, int64(len(t.zeros)))
			if err := t.writeAt(t.zeros[:k], off); err != nil {
				return err
			}
			off, n = off+k, n-k
		}
	}
	return t.sync()
}

// checkSectorSize reads the GPT header position: at byte 512 the image was
// made for 512-byte sectors, at 4096 for 4 KiB ones.
func checkSectorSize(head []byte, diskSector int) error {
	sig := []byte("EFI PART")
	imgSector := 0
	switch {
	case len(head) >= 520 && bytes.Equal(head[512:520], sig):
		imgSector = 512
	case len(head) >= 4104 && bytes.Equal(head[4096:4104], sig):
		imgSector = 4096
	}
	if imgSector != 0 && imgSector != diskSector {
		return fmt.Errorf("%w: the image's GPT is laid out for %d-byte sectors, the disk has %d-byte logical sectors", ErrSectorSize, imgSector, diskSector)
	}
	return nil
}

func rereadPartitions(fd int) error {
	var err error
	for i := 0; i < 5; i++ {
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.BLKRRPART, 0); e == 0 {
			return nil
		} else {
			err = e
		}
		if err != unix.EBUSY {
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
