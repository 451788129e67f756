// Package wipe erases what a previous tenant's layout leaves on a disk for
// tools to find: partition tables (MBR, GPT and its backup), and the
// filesystem, RAID, LVM, swap, ZFS and Ceph labels at the start and end of
// the disk and of every partition the old table listed. What wipefs(8) would
// find afterwards is nothing; the data between stays (this is not an erase
// for privacy, it makes the disk blank to Talos, Rook and mkfs).
//
// Why those places: GPT has its header at LBA 1 and its backup at the end;
// ext4, XFS, LVM, LUKS, bluestore, swap and MD 1.1/1.2 superblocks sit in
// the first 64 KiB of their device, btrfs at 64 KiB, ZFS keeps two labels in
// the first 512 KiB and two in the last, MD 0.90/1.0 superblocks are in the
// last 128 KiB. One MiB at each end of the disk and of each old partition
// covers them all.
package wipe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/diskprobe"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/diskwrite"
)

// Span is how much is zeroed at each end of the disk and of each old partition.
const Span = 1 << 20

// Errors, mapped to report codes by the command.
var (
	ErrBusy  = errors.New("disk in use")
	ErrWrite = errors.New("wipe failed")
)

// Result says what was zeroed.
type Result struct {
	// OldPartitions is how many partitions the old table listed.
	OldPartitions int
	// Ranges and Bytes zeroed (ranges merged where they touch).
	Ranges int
	Bytes  int64
}

// Disk wipes the disk at path: a block device (opened exclusively, so a
// mounted or assembled disk is refused with ErrBusy) or a regular file of
// size bytes. sectorSize is the disk's logical sector size (512 when 0).
func Disk(ctx context.Context, path string, size int64, sectorSize int) (Result, error) {
	if sectorSize <= 0 {
		sectorSize = 512
	}
	f, blockDev, err := openTarget(path)
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	if size, err = targetSize(f, path, blockDev, size); err != nil {
		return Result{}, err
	}
	var res Result
	ranges, old := wipeRanges(f, size, sectorSize)
	res.OldPartitions = old
	if err := zeroRanges(ctx, f, path, ranges, &res); err != nil {
		return res, err
	}
	if err := f.Sync(); err != nil {
		return res, fmt.Errorf("%w: syncing %s: %v", ErrWrite, path, err)
	}
	if blockDev {
		// The kernel still lists the old partitions until told to re-read
		// the (now empty) table; a disk nobody holds accepts at once.
		_ = diskwrite.RereadPartitions(int(f.Fd()))
	}
	return res, nil
}

// openTarget opens path for writing, exclusively when it is a block device so a disk the kernel
// holds (mounted, swap, RAID or LVM member) is refused with ErrBusy instead of overwritten.
func openTarget(path string) (*os.File, bool, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrWrite, err)
	}
	blockDev := st.Mode()&os.ModeDevice != 0 && st.Mode()&os.ModeCharDevice == 0
	flags := os.O_RDWR
	if blockDev {
		flags |= unix.O_EXCL
	}
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		if errors.Is(err, unix.EBUSY) {
			return nil, false, fmt.Errorf("%w: %s: the kernel holds it (mounted, swap, RAID or LVM member)", ErrBusy, path)
		}
		return nil, false, fmt.Errorf("%w: opening %s: %v", ErrWrite, path, err)
	}
	return f, blockDev, nil
}

// targetSize is a block device's size as the kernel reports it; for a file, the size asked
// for, clipped to the file's length (or the whole file when none was asked for).
func targetSize(f *os.File, path string, blockDev bool, size int64) (int64, error) {
	if blockDev {
		n, err := unix.IoctlGetInt(int(f.Fd()), unix.BLKGETSIZE64)
		if err != nil {
			return 0, fmt.Errorf("%w: size of %s: %v", ErrWrite, path, err)
		}
		return int64(n), nil
	}
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrWrite, err)
	}
	if size <= 0 || size > st.Size() {
		size = st.Size()
	}
	return size, nil
}

// wipeRanges plans what to zero: both ends of the disk, plus both ends of each partition and
// the backup GPT of the old table as diskprobe reads it (GPT, its backup when the primary is
// damaged, or MBR). It returns the merged ranges and how many old partitions it found.
func wipeRanges(f *os.File, size int64, sectorSize int) ([][2]int64, int) {
	ranges := [][2]int64{{0, Span}, {size - Span, size}}
	oldParts := 0
	if old, err := diskprobe.ProbeAt(f, size, sectorSize); err == nil {
		for _, p := range old.Partitions {
			if p.Size <= 0 {
				continue
			}
			oldParts++
			end := p.Start + p.Size
			ranges = append(ranges, [2]int64{p.Start, p.Start + Span}, [2]int64{end - Span, end})
		}
		// A GPT written for a smaller disk (an image) has its backup
		// where that disk ended, not at the end of this one.
		if old.BackupGPT > 0 {
			ranges = append(ranges, [2]int64{old.BackupGPT, old.BackupGPT + Span})
		}
	}
	return MergeRanges(ranges, size, int64(sectorSize)), oldParts
}

// zeroRanges writes zeros over each range, Span bytes at a time, counting into res and
// stopping when ctx ends.
func zeroRanges(ctx context.Context, f *os.File, path string, ranges [][2]int64, res *Result) error {
	zeros := make([]byte, Span)
	for _, r := range ranges {
		for off := r[0]; off < r[1]; {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := min(int64(len(zeros)), r[1]-off)
			if _, err := f.WriteAt(zeros[:n], off); err != nil {
				return fmt.Errorf("%w: writing %s at %d: %v", ErrWrite, path, off, err)
			}
			off += n
			res.Bytes += n
		}
		res.Ranges++
	}
	return nil
}

// MergeRanges clips byte ranges to [0, size), aligns them to sectors and
// joins the ones that overlap or touch (erase uses it too).
func MergeRanges(ranges [][2]int64, size, sector int64) [][2]int64 {
	var out [][2]int64
	for _, r := range ranges {
		s := max(r[0], 0) / sector * sector
		e := min((r[1]+sector-1)/sector*sector, size)
		if e > s {
			out = append(out, [2]int64{s, e})
		}
	}
	slices.SortFunc(out, func(a, b [2]int64) int { return int(min(max(a[0]-b[0], -1), 1)) })
	var merged [][2]int64
	for _, r := range out {
		if n := len(merged); n > 0 && r[0] <= merged[n-1][1] {
			merged[n-1][1] = max(merged[n-1][1], r[1])
			continue
		}
		merged = append(merged, r)
	}
	return merged
}
