// Package erase removes a former node's data from a disk before the server
// idles as a spare: the machine config in STATE and metal-iso, the kubelet's
// key in EPHEMERAL, user volumes. Unlike imager/wipe (which only removes
// signatures so tools see a blank disk) it is meant for privacy.
//
// Two methods:
//
//   - discard: BLKSECDISCARD where the device offers it, else BLKDISCARD, over
//     the whole device (a regular file gets its blocks punched out). An
//     NVMe/SSD unmaps every block in seconds. Discard is only a hint to many
//     devices, so the result is read back: every block of the old table's
//     areas (first and last MiB of the disk, of the backup GPT and of each
//     old partition) and sampled blocks spread over the whole device must be
//     zeroes.
//   - overwrite: zeroes written with O_DIRECT where the device takes it. By
//     default every old partition up to WholeBelow bytes (STATE, META,
//     metal-iso, EFI, BOOT) is written whole and larger ones (EPHEMERAL, big
//     user volumes) at their first and last MiB, where LUKS, XFS, ext4 and
//     ISO metadata live; Full writes the whole device. The same areas are
//     read back.
//
// Method auto tries discard and falls back to overwrite when the device
// refuses discard or does not read back zeroes. Overwrite writes the table
// areas last, so a run that stops half way can be repeated and still finds
// the old partitions.
package erase

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/diskprobe"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/diskwrite"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/wipe"
)

// Methods, as the report names them.
const (
	MethodAuto          = "auto"
	MethodDiscard       = "discard"
	MethodSecureDiscard = "secure-discard"
	MethodOverwrite     = "overwrite"
	MethodOverwriteFull = "overwrite-full"
)

// Span is how much is read back (and, for large partitions, overwritten) at
// each end of the disk and of each old partition: the areas imager/wipe
// names, where every common label and superblock lives.
const Span = 1 << 20

// DefaultWholeBelow: overwrite writes old partitions up to this size whole.
// Talos's STATE (100 MiB), META, EFI, BOOT and metal-iso (48 MiB) are all
// below; EPHEMERAL, which spans the rest of the disk, is not.
const DefaultWholeBelow = 1 << 30

// Errors, mapped to report codes by the command.
var (
	ErrBusy        = errors.New("disk in use")
	ErrUnsupported = errors.New("discard not supported")
	ErrWrite       = errors.New("erase failed")
	ErrUnverified  = errors.New("erase not verified")
)

// Options say how to erase.
type Options struct {
	// Method: MethodAuto (default), MethodDiscard or MethodOverwrite.
	Method string
	// Full: overwrite writes the whole device (discard always covers it).
	Full bool
	// SectorSize is the disk's logical sector size (512 when 0).
	SectorSize int
	// WholeBelow: old partitions up to this size are overwritten whole
	// (DefaultWholeBelow when 0).
	WholeBelow int64
	// Samples is how many blocks spread over the erased ranges are read
	// back besides the table areas (1024 when 0).
	Samples int
	// Log receives notices (fallback reasons at Info, O_DIRECT refused at
	// Warn); nil discards them.
	Log *slog.Logger

	// discard replaces the device's discard in tests (a device that
	// accepts discard and keeps its data).
	discard func(f *os.File, blockDev bool, secure bool, off, n int64) error
}

// Result says what was done to one disk.
type Result struct {
	Method string
	// Fallback says why discard was not used, when it was tried.
	Fallback string
	// Bytes discarded or zeroed; VerifiedBytes read back as zeroes.
	Bytes, VerifiedBytes int64
	Seconds              float64
	Verified             bool
	// Complete: no byte of the device still holds what was there before
	// (a verified discard, or a full overwrite).
	Complete bool
	// OldPartitions is how many partitions the old table listed.
	OldPartitions int
	// Left says, in words, what the method leaves on the disk ("" when
	// Complete).
	Left string
}

// disk is the open device and what is known of its old layout.
type disk struct {
	f        *os.File
	path     string
	blockDev bool
	size     int64
	sector   int64
	// table: the disk's ends and the backup GPT; parts: each old
	// partition's extent.
	table [][2]int64
	parts [][2]int64
}

// Disk erases the disk at path: a block device (opened exclusively, so a
// mounted or assembled disk is refused with ErrBusy) or a regular file of
// size bytes.
func Disk(ctx context.Context, path string, size int64, o Options) (res Result, err error) {
	started := time.Now()
	o = o.withDefaults()
	d, err := open(path, size, o.SectorSize)
	if err != nil {
		return Result{}, err
	}
	defer d.f.Close()
	res.OldPartitions = len(d.parts)
	defer func() { res.Seconds = time.Since(started).Seconds() }()

	if o.Method == MethodAuto || o.Method == MethodDiscard {
		err := d.discardAll(ctx, &o, &res)
		if err == nil {
			return res, nil
		}
		if o.Method == MethodDiscard || ctx.Err() != nil {
			return res, err
		}
		res.Fallback = err.Error()
		o.Log.Info("discard failed; overwriting instead", "path", path, "error", err)
	}
	err = d.overwrite(ctx, &o, &res)
	return res, err
}

// withDefaults fills the options left zero.
func (o Options) withDefaults() Options {
	if o.Method == "" {
		o.Method = MethodAuto
	}
	if o.SectorSize <= 0 {
		o.SectorSize = 512
	}
	if o.WholeBelow <= 0 {
		o.WholeBelow = DefaultWholeBelow
	}
	if o.Samples <= 0 {
		o.Samples = 1024
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.discard == nil {
		o.discard = discard
	}
	return o
}

func open(path string, size int64, sectorSize int) (*disk, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrWrite, err)
	}
	d := &disk{path: path, blockDev: st.Mode()&os.ModeDevice != 0 && st.Mode()&os.ModeCharDevice == 0, sector: int64(sectorSize)}
	flags := os.O_RDWR | unix.O_CLOEXEC
	if d.blockDev {
		flags |= unix.O_EXCL
	}
	if d.f, err = os.OpenFile(path, flags, 0); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("%w: %s: the kernel holds it (mounted, swap, RAID or LVM member)", ErrBusy, path)
		}
		return nil, fmt.Errorf("%w: opening %s: %v", ErrWrite, path, err)
	}
	if d.size, err = d.sizeOf(size, st.Size()); err != nil {
		d.f.Close()
		return nil, err
	}
	d.readOldTable()
	return d, nil
}

// sizeOf is the device's size (a block device's from the kernel, a file's
// as asked, at most its length), whole sectors.
func (d *disk) sizeOf(asked, fileSize int64) (int64, error) {
	size := asked
	if d.blockDev {
		n, err := unix.IoctlGetInt(int(d.f.Fd()), unix.BLKGETSIZE64)
		if err != nil {
			return 0, fmt.Errorf("%w: size of %s: %v", ErrWrite, d.path, err)
		}
		size = int64(n)
	} else if size <= 0 || size > fileSize {
		size = fileSize
	}
	size = size / d.sector * d.sector
	if size == 0 {
		return 0, fmt.Errorf("%w: %s is empty", ErrWrite, d.path)
	}
	return size, nil
}

// readOldTable records the table areas and the old partitions as diskprobe
// reads them (GPT, its backup when the primary is damaged, or MBR): what
// the erase must reach.
func (d *disk) readOldTable() {
	d.table = [][2]int64{{0, Span}, {d.size - Span, d.size}}
	if old, err := diskprobe.ProbeAt(d.f, d.size, int(d.sector)); err == nil {
		for _, p := range old.Partitions {
			if p.Size > 0 && p.Start < d.size {
				d.parts = append(d.parts, [2]int64{p.Start, min(p.Start+p.Size, d.size)})
			}
		}
		// A GPT written for a smaller disk (an image) has its backup
		// where that disk ended.
		if old.BackupGPT > 0 {
			d.table = append(d.table, [2]int64{old.BackupGPT, old.BackupGPT + Span})
		}
	}
}

// headers are the table areas and each old partition's first and last MiB:
// every block of them is read back.
func (d *disk) headers() [][2]int64 {
	out := slices.Clone(d.table)
	for _, p := range d.parts {
		out = append(out, [2]int64{p[0], p[0] + Span}, [2]int64{p[1] - Span, p[1]})
	}
	return wipe.MergeRanges(out, d.size, d.sector)
}

// chunk bounds one discard call, so that a cancel is seen between calls.
const chunk = 1 << 30

func (d *disk) discardAll(ctx context.Context, o *Options, res *Result) error {
	secure := d.blockDev
	method := MethodSecureDiscard
	for off := int64(0); off < d.size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(chunk, d.size-off)
		err := o.discard(d.f, d.blockDev, secure, off, n)
		if secure && err != nil {
			// Most devices offer no secure discard: plain discard then,
			// from the start of the same range.
			secure, method = false, MethodDiscard
			err = o.discard(d.f, d.blockDev, false, off, n)
		}
		if err != nil {
			if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("%w: %s refuses discard (%v)", ErrUnsupported, d.path, err)
			}
			return fmt.Errorf("%w: discarding %s at %d: %v", ErrWrite, d.path, off, err)
		}
		if !d.blockDev {
			method = MethodDiscard
		}
		off += n
	}
	res.Method = method
	res.Bytes = d.size
	n, err := d.verify(ctx, [][2]int64{{0, d.size}}, o.Samples)
	res.VerifiedBytes = n
	if err != nil {
		return err
	}
	res.Verified, res.Complete = true, true
	return nil
}

// discard is BLKSECDISCARD or BLKDISCARD on a block device, a punched hole
// in a regular file.
func discard(f *os.File, blockDev, secure bool, off, n int64) error {
	if !blockDev {
		return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	}
	req := uint(unix.BLKDISCARD)
	if secure {
		req = unix.BLKSECDISCARD
	}
	r := [2]uint64{uint64(off), uint64(n)}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), uintptr(req), uintptr(unsafe.Pointer(&r[0])))
	if errno != 0 {
		return errno
	}
	return nil
}

// overwrite zeroes the old partitions (whole, or their ends when large) or
// the whole device, and the table areas last.
// overwriteRanges are the byte ranges an overwrite zeroes beside the
// partition tables, the method it reports and, unless full, what it leaves:
// whole partitions up to wholeBelow bytes, the first and last Span of larger
// ones, the first and last Span of a disk without partitions.
func overwriteRanges(parts [][2]int64, size, wholeBelow int64, full bool) (data [][2]int64, method, left string) {
	if full {
		return [][2]int64{{0, size}}, MethodOverwriteFull, ""
	}
	large := 0
	for _, p := range parts {
		if p[1]-p[0] <= wholeBelow {
			data = append(data, p)
			continue
		}
		large++
		data = append(data, [2]int64{p[0], p[0] + Span}, [2]int64{p[1] - Span, p[1]})
	}
	switch {
	case len(parts) == 0:
		left = "no partition table was found: only the disk's first and last MiB were overwritten, everything between is left (erase with --full)"
	case large > 0:
		left = fmt.Sprintf("the data between the first and last MiB of %d partition(s) larger than %d MiB (e.g. EPHEMERAL: files, the kubelet's key unless encrypted) and the space outside the partitions (erase with --full)", large, wholeBelow>>20)
	default:
		left = "the space outside the old partitions (erase with --full)"
	}
	return data, MethodOverwrite, left
}

func (d *disk) overwrite(ctx context.Context, o *Options, res *Result) error {
	var data [][2]int64
	data, res.Method, res.Left = overwriteRanges(d.parts, d.size, o.WholeBelow, o.Full)
	table := wipe.MergeRanges(d.table, d.size, d.sector)
	data = subtract(wipe.MergeRanges(data, d.size, d.sector), table)
	w, err := newWriter(d, o)
	if err != nil {
		return err
	}
	defer w.close()
	for _, r := range append(data, table...) {
		if err := w.zero(ctx, r, res); err != nil {
			return err
		}
	}
	if err := w.sync(); err != nil {
		return err
	}
	if d.blockDev {
		// The kernel still lists the old partitions until it re-reads the
		// (now empty) table; a disk nobody holds accepts at once.
		_ = diskwrite.RereadPartitions(int(d.f.Fd()))
	}
	n, err := d.verify(ctx, append(data, table...), o.Samples)
	res.VerifiedBytes = n
	if err != nil {
		return err
	}
	res.Verified = true
	res.Complete = o.Full
	if res.Complete {
		res.Left = ""
	}
	return nil
}

// writer writes zeroes, with O_DIRECT where the device takes it, so the
// figures are the disk's and the page cache is not filled with zeroes.
type writer struct {
	d      *disk
	f      *os.File
	direct bool
	buf    []byte
}

const bufSize = 8 << 20

func newWriter(d *disk, o *Options) (*writer, error) {
	w := &writer{d: d, f: d.f, buf: aligned(bufSize)}
	if d.blockDev {
		// A second descriptor: the exclusive one stays open, and O_DIRECT
		// may be refused without losing the disk.
		if f, err := os.OpenFile(d.path, os.O_WRONLY|unix.O_CLOEXEC|unix.O_DIRECT, 0); err == nil {
			w.f, w.direct = f, true
		} else {
			o.Log.Warn("disk refuses O_DIRECT; writing through the page cache", "path", d.path, "error", err)
		}
	}
	return w, nil
}

func (w *writer) zero(ctx context.Context, r [2]int64, res *Result) error {
	for off := r[0]; off < r[1]; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(int64(len(w.buf)), r[1]-off)
		if _, err := w.f.WriteAt(w.buf[:n], off); err != nil {
			return fmt.Errorf("%w: writing %s at %d: %v", ErrWrite, w.d.path, off, err)
		}
		off += n
		res.Bytes += n
	}
	return nil
}

func (w *writer) sync() error {
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("%w: syncing %s: %v", ErrWrite, w.d.path, err)
	}
	if w.f != w.d.f {
		if err := w.d.f.Sync(); err != nil {
			return fmt.Errorf("%w: syncing %s: %v", ErrWrite, w.d.path, err)
		}
	}
	return nil
}

func (w *writer) close() {
	if w.f != w.d.f {
		w.f.Close()
	}
}

// verify reads back every block of the table and partition header areas
// that lie in erased, and samples blocks spread over erased (evenly, each
// at a random place in its stretch, so a device that zeroes only fixed
// places is caught), and returns how many bytes it read.
func (d *disk) verify(ctx context.Context, erased [][2]int64, samples int) (int64, error) {
	// What was written through a buffered descriptor or discarded may still
	// be cached: read what the device holds.
	_ = unix.Fadvise(int(d.f.Fd()), 0, 0, unix.FADV_DONTNEED)
	areas := intersect(d.headers(), erased)
	var total int64
	for _, e := range erased {
		total += e[1] - e[0]
	}
	block := max(d.sector, 4096)
	if total > 0 {
		stride := max(total/int64(samples), block)
		for _, e := range erased {
			for off := e[0]; off+block <= e[1]; off += stride {
				s := off + rand.Int64N(max(min(stride, e[1]-off)-block, 0)+1)
				s = s / d.sector * d.sector
				areas = append(areas, [2]int64{s, min(s+block, e[1])})
			}
		}
	}
	areas = wipe.MergeRanges(areas, d.size, d.sector)
	buf := make([]byte, Span)
	var read int64
	for _, a := range areas {
		for off := a[0]; off < a[1]; {
			if err := ctx.Err(); err != nil {
				return read, err
			}
			n := min(int64(len(buf)), a[1]-off)
			if _, err := d.f.ReadAt(buf[:n], off); err != nil {
				return read, fmt.Errorf("%w: reading %s back at %d: %v", ErrUnverified, d.path, off, err)
			}
			for i, b := range buf[:n] {
				if b != 0 {
					return read, fmt.Errorf("%w: %s reads back data at byte %d after the erase", ErrUnverified, d.path, off+int64(i))
				}
			}
			read += n
			off += n
		}
	}
	return read, nil
}

func aligned(n int) []byte {
	const align = 4096
	b := make([]byte, n+align)
	off := int(align-uintptr(unsafe.Pointer(&b[0]))%align) % align
	return b[off : off+n : off+n]
}

// subtract removes cut (merged) from ranges (merged).
func subtract(ranges, cut [][2]int64) [][2]int64 {
	var out [][2]int64
	for _, r := range ranges {
		pieces := [][2]int64{r}
		for _, c := range cut {
			var next [][2]int64
			for _, p := range pieces {
				if c[1] <= p[0] || c[0] >= p[1] {
					next = append(next, p)
					continue
				}
				if c[0] > p[0] {
					next = append(next, [2]int64{p[0], c[0]})
				}
				if c[1] < p[1] {
					next = append(next, [2]int64{c[1], p[1]})
				}
			}
			pieces = next
		}
		out = append(out, pieces...)
	}
	return out
}

// intersect is the part of a that lies in b (both merged).
func intersect(a, b [][2]int64) [][2]int64 {
	var out [][2]int64
	for _, x := range a {
		for _, y := range b {
			if s, e := max(x[0], y[0]), min(x[1], y[1]); e > s {
				out = append(out, [2]int64{s, e})
			}
		}
	}
	return out
}
