// Package configpart puts a Talos machine config on the install disk from the
// rescue system, where Talos's metal platform reads it at first boot when the
// image's kernel arguments carry talos.config=metal-iso: a GPT partition
// named metal-iso after the image's last partition, formatted FAT32, holding
// config.yaml. Talos then never opens its maintenance API (see
// docs/config-delivery.md for the Talos code this relies on).
//
// The partition table and the filesystem are written with
// github.com/diskfs/go-diskfs; this package only decides where the partition
// goes and in which order things reach the disk:
//
//  1. the primary GPT must be valid (em-imager write verified the image and
//     wrote its first MiB last; a failed write wiped it);
//  2. the partition's extent is zeroed (no stale signature from an earlier
//     install survives) and formatted, and config.yaml written and synced,
//     while the partition is not yet in the table;
//  3. the table is rewritten (backup GPT moved to the end of the disk, then
//     the primary): the partition appears only once it is complete;
//  4. the config is read back through the library and its sha256 compared;
//  5. on a block device the kernel re-reads the partition table.
//
// Running it again replaces the content of the existing metal-iso partition
// (it must still be the last one); it never adds a second one.
package configpart

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/diskfs/go-diskfs/backend"
	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem/fat32"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"golang.org/x/sys/unix"
)

const (
	// PartitionName is the GPT partition name (and FAT label) Talos looks
	// for: constants.MetalConfigISOLabel in Talos's machinery.
	PartitionName = "metal-iso"
	// FileName is the file Talos reads from it: constants.ConfigFilename.
	FileName = "config.yaml"
	// PartitionSize gives FAT32 more than the 65525 clusters its
	// specification asks for on 512-byte sectors. Not 64 MiB: for that size
	// go-diskfs v1.9.4 sizes the FAT two entries short of the clusters
	// (Linux would mount it, fsck.fat and mtools refuse it); the tests
	// check the result with both.
	PartitionSize = 48 << 20
	// MaxConfigSize bounds what is read from stdin, so a wrong input
	// cannot fill the rescue system's memory.
	MaxConfigSize = 4 << 20
	// Filesystem is the filesystem type as Talos's block discovery names it.
	Filesystem = "vfat"

	alignBytes = 1 << 20 // partitions start on MiB boundaries, like Talos's own
)

// Sentinel errors, mapped to report codes by the command.
var (
	// ErrNotImaged: no valid primary GPT or boot signature, so the disk
	// does not hold a verified image (a failed em-imager write wipes them).
	ErrNotImaged = errors.New("the disk holds no verified image")
	// ErrChanged: a metal-iso partition exists but is not the last one, so
	// the disk was booted or repartitioned since it was imaged.
	ErrChanged = errors.New("the disk changed since it was imaged")
	ErrNoSpace = errors.New("no room for the config partition")
	ErrBusy    = errors.New("disk busy")
	// ErrSectorSize: the GPT is laid out for other sectors than the disk's.
	ErrSectorSize = errors.New("sector size mismatch")
	ErrConfig     = errors.New("invalid config input")
	ErrWrite      = errors.New("write failed")
	// ErrNotFound: no metal-iso volume (Read), what Talos fails on.
	ErrNotFound = errors.New("no metal-iso volume")
)

// Options tune Write.
type Options struct {
	// SectorSize is the disk's logical sector size; 0 reads it from the
	// device (block devices) or from where the GPT header is (files).
	SectorSize int
	// Log receives warnings that do not fail the write; nil discards them.
	Log *slog.Logger
}

// Result says what Write did. It never holds the config itself.
type Result struct {
	SHA256          string
	Bytes           int
	PartitionNumber int
	StartBytes      int64
	SizeBytes       int64
	SectorSize      int
	// Replaced: an existing metal-iso partition got the new content.
	Replaced bool
	// Verified: the config read back through the library matched.
	Verified    bool
	BlockDevice bool
}

// Write puts config into the metal-iso partition of the disk at path.
func Write(ctx context.Context, path string, config []byte, o Options) (res Result, err error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if err := CheckConfig(config); err != nil {
		return res, err
	}
	sum := sha256.Sum256(config)
	res.SHA256, res.Bytes = hex.EncodeToString(sum[:]), len(config)
	if err := ctx.Err(); err != nil {
		return res, err
	}

	d, err := open(path, false, o.SectorSize)
	if err != nil {
		return res, err
	}
	defer d.Close()
	ss := int(d.LogicalBlocksize)
	res.SectorSize, res.BlockDevice = ss, d.blockDevice
	t, err := d.table()
	if err != nil {
		return res, err
	}
	var target *gpt.Partition
	var oldBackupLBA uint64
	target, res.Replaced, oldBackupLBA, err = planTable(t, ss, d.Size)
	if err != nil {
		return res, err
	}
	res.PartitionNumber = target.Index
	res.StartBytes = int64(target.Start) * int64(ss)
	res.SizeBytes = int64(target.End-target.Start+1) * int64(ss)

	if err := d.fill(res.StartBytes, res.SizeBytes, config); err != nil {
		return res, err
	}
	if err := ctx.Err(); err != nil && !res.Replaced {
		// Nothing is visible yet: the partition is not in the table.
		return res, err
	}
	if err := d.commit(t, oldBackupLBA, o.Log); err != nil {
		return res, err
	}
	if err := d.verify(config); err != nil {
		return res, err
	}
	res.Verified = true
	return res, nil
}

// planTable grows the image's table to the disk and finds or adds the config partition in it;
// replaced says the partition was there already. It returns the LBA of the image's backup GPT,
// which sits at the end of the image, not of the disk.
func planTable(t *gpt.Table, ss int, diskSize int64) (target *gpt.Partition, replaced bool, oldBackupLBA uint64, err error) {
	target, last, err := findTarget(t)
	if err != nil {
		return nil, false, 0, err
	}
	oldBackupLBA = t.TotalSize()/uint64(ss) - 1
	t.Resize(uint64(diskSize))
	// Leave the image's MBR as it is (boot code, bootable flag): Talos
	// rewrites it with its first partition table change.
	t.ProtectiveMBR = false
	if target != nil {
		return target, true, oldBackupLBA, nil
	}
	target, err = addPartition(t, last, ss, diskSize)
	return target, false, oldBackupLBA, err
}

// findTarget finds the partition to rewrite (named PartitionName; nil when there is none yet)
// and the last partition on the disk. The config partition must be the last one, and unique.
func findTarget(t *gpt.Table) (target, last *gpt.Partition, err error) {
	for _, p := range t.Partitions {
		if last == nil || p.End > last.End {
			last = p
		}
		if p.Name == PartitionName {
			if target != nil {
				return nil, nil, fmt.Errorf("%w: two partitions are named %s", ErrChanged, PartitionName)
			}
			target = p
		}
	}
	if last == nil {
		return nil, nil, fmt.Errorf("%w: the GPT lists no partition", ErrNotImaged)
	}
	if target != nil && target != last {
		return nil, nil, fmt.Errorf("%w: partition %d (%s) is not the last one; re-image the disk first", ErrChanged, target.Index, PartitionName)
	}
	return target, last, nil
}

// addPartition adds the config partition to the (resized) table, aligned after the last one,
// when the table has a free entry and the disk room for it.
func addPartition(t *gpt.Table, last *gpt.Partition, ss int, diskSize int64) (*gpt.Partition, error) {
	per := uint64(alignBytes / ss)
	start := (last.End + per) / per * per
	target := &gpt.Partition{
		Index: freeIndex(t),
		Start: start,
		End:   start + PartitionSize/uint64(ss) - 1,
		Type:  gpt.MicrosoftBasicData,
		Name:  PartitionName,
	}
	if target.Index == 0 {
		return nil, fmt.Errorf("%w: the partition table has no free entry", ErrNoSpace)
	}
	if target.End > t.LastDataSector() {
		return nil, fmt.Errorf("%w: %d bytes after the image's last partition, %d needed (disk of %d bytes)",
			ErrNoSpace, int64(t.LastDataSector()+1-start)*int64(ss), PartitionSize, diskSize)
	}
	t.Partitions = append(t.Partitions, target)
	return target, nil
}

// fill zeroes the partition's extent, formats it holding config, and syncs.
func (d *partitionDisk) fill(start, size int64, config []byte) error {
	if err := d.zero(start, size); err != nil {
		return err
	}
	if err := d.format(start, size, config); err != nil {
		return err
	}
	return d.sync()
}

// commit writes the table (the commit point: go-diskfs writes and syncs the backup, then the
// primary GPT), wipes the image's stale backup, reads the table back and asks the kernel to
// re-read it.
func (d *partitionDisk) commit(t *gpt.Table, oldBackupLBA uint64, log *slog.Logger) error {
	w, err := d.Backend.Writable()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrWrite, err)
	}
	if err := t.Write(w, d.Size); err != nil {
		return fmt.Errorf("%w: partition table: %v", ErrWrite, err)
	}
	if err := d.wipeStaleBackup(t, oldBackupLBA); err != nil {
		return err
	}
	// BLKRRPART, else per-partition BLKPG (no-op on regular files), from
	// the table as read back: go-diskfs knows a partition's sector size
	// only for partitions it read.
	if d.Table, err = d.readGPT(); err != nil {
		return fmt.Errorf("%w: reading the partition table back: %v", ErrWrite, err)
	}
	if err := d.ReReadPartitionTable(); err != nil {
		log.Warn("the kernel did not re-read the partition table; Talos reads the disk at boot", "error", err)
	}
	return nil
}

// verify reads the config back through the table and filesystem, as Talos will.
func (d *partitionDisk) verify(config []byte) error {
	got, _, err := d.read()
	if err != nil {
		return fmt.Errorf("%w: reading the config back: %v", ErrWrite, err)
	}
	if !bytes.Equal(got, config) {
		return fmt.Errorf("%w: the config read back differs from the one written", ErrWrite)
	}
	return nil
}

// CheckConfig refuses input that cannot be a machine config: empty, larger
// than MaxConfigSize, or not text.
func CheckConfig(config []byte) error {
	switch {
	case len(bytes.TrimSpace(config)) == 0:
		return fmt.Errorf("%w: the config on stdin is empty", ErrConfig)
	case len(config) > MaxConfigSize:
		return fmt.Errorf("%w: the config has more than %d bytes", ErrConfig, MaxConfigSize)
	case bytes.IndexByte(config, 0) >= 0:
		return fmt.Errorf("%w: the config holds NUL bytes (not YAML)", ErrConfig)
	}
	return nil
}

// Volume is where Read found the config.
type Volume struct {
	PartitionNumber int
	StartBytes      int64
	SizeBytes       int64
	Label           string // the FAT volume label
}

// Read returns config.yaml from the disk's metal-iso volume the way Talos
// finds it: a partition whose GPT name or FAT label is metal-iso and that
// holds a filesystem. Errors wrap ErrNotFound when there is none.
func Read(path string, sectorSize int) ([]byte, Volume, error) {
	d, err := open(path, true, sectorSize)
	if err != nil {
		return nil, Volume{}, err
	}
	defer d.Close()
	return d.read()
}

// Imaged checks, read-only, that the disk at path holds what a verified
// `em-imager write` leaves (a valid primary GPT and a boot signature: a
// failed write wipes them) and returns its sector size (sectorSize, or
// the GPT's when 0). Errors wrap ErrNotImaged as Write's do.
func Imaged(path string, sectorSize int) (int, error) {
	d, err := open(path, true, sectorSize)
	if err != nil {
		return 0, err
	}
	defer d.Close()
	if _, err := d.table(); err != nil {
		return 0, err
	}
	return int(d.LogicalBlocksize), nil
}

// partitionDisk is an open disk: go-diskfs's Disk and how it was opened.
type partitionDisk struct {
	*disk.Disk
	f           *os.File
	blockDevice bool
}

func open(path string, readOnly bool, sectorSize int) (*partitionDisk, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotImaged, err)
	}
	blockDev := st.Mode()&os.ModeDevice != 0 && st.Mode()&os.ModeCharDevice == 0
	if !blockDev && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is neither a block device nor a regular file", ErrNotImaged, path)
	}
	// O_EXCL on a block device: the kernel refuses while anything holds it.
	b, err := file.OpenFromPathWithExclusive(path, readOnly, blockDev)
	if err != nil {
		if errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("%w: %v", ErrBusy, err)
		}
		return nil, fmt.Errorf("%w: opening %s: %v", ErrWrite, path, err)
	}
	f, _ := b.Sys()
	d := &partitionDisk{f: f, blockDevice: blockDev, Disk: &disk.Disk{Backend: b, Size: st.Size()}}
	if blockDev {
		size, err := unix.IoctlGetInt(int(f.Fd()), unix.BLKGETSIZE64)
		if err != nil {
			b.Close()
			return nil, fmt.Errorf("%w: size of %s: %v", ErrWrite, path, err)
		}
		d.Size = int64(size)
	}
	ss, err := d.sectorSize(sectorSize)
	if err != nil {
		b.Close()
		return nil, err
	}
	d.LogicalBlocksize, d.PhysicalBlocksize = int64(ss), int64(ss)
	d.Size -= d.Size % int64(ss)
	return d, nil
}

// sectorSize is the device's logical sector size, checked against where
// the GPT header is (LBA 1 is byte 512 or byte 4096).
func (d *partitionDisk) sectorSize(want int) (int, error) {
	if d.blockDevice {
		ss, err := d.deviceSectorSize(want)
		if err != nil {
			return 0, err
		}
		want = ss
	}
	var at []int
	for _, ss := range []int{512, 4096} {
		sig := make([]byte, 8)
		if _, err := d.f.ReadAt(sig, int64(ss)); err == nil && string(sig) == "EFI PART" {
			at = append(at, ss)
		}
	}
	return gptSectorSize(at, want)
}

// deviceSectorSize is the block device's logical sector size, which want
// (when set) must match.
func (d *partitionDisk) deviceSectorSize(want int) (int, error) {
	ss, err := unix.IoctlGetInt(int(d.f.Fd()), unix.BLKSSZGET)
	if err != nil {
		return 0, fmt.Errorf("%w: logical sector size: %v", ErrWrite, err)
	}
	if want != 0 && want != ss {
		return 0, fmt.Errorf("%w: the device has %d-byte sectors, %d given", ErrSectorSize, ss, want)
	}
	return ss, nil
}

// gptSectorSize picks the sector size from where GPT headers were found
// (at: 512 and/or 4096): the one that matches want, or with want unknown
// the only one found, 512 when both were.
func gptSectorSize(at []int, want int) (int, error) {
	switch {
	case len(at) == 0:
		return 0, fmt.Errorf("%w: no GPT header at byte 512 or 4096", ErrNotImaged)
	case want == 0 && len(at) == 1:
		return at[0], nil
	case want == 0:
		return 512, nil
	}
	for _, ss := range at {
		if ss == want {
			return ss, nil
		}
	}
	return 0, fmt.Errorf("%w: the GPT is laid out for %d-byte sectors, the disk has %d-byte sectors", ErrSectorSize, at[0], want)
}

// table reads the primary GPT, which must be valid and come with a boot
// signature: what `em-imager write` leaves only after verifying the image.
func (d *partitionDisk) table() (*gpt.Table, error) {
	mbr := make([]byte, 512)
	if _, err := d.f.ReadAt(mbr, 0); err != nil || mbr[510] != 0x55 || mbr[511] != 0xAA {
		return nil, fmt.Errorf("%w: no boot signature in the MBR", ErrNotImaged)
	}
	t, err := d.readGPT()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotImaged, err)
	}
	if t.RecoveredFromBackup {
		return nil, fmt.Errorf("%w: the primary GPT is damaged (only the backup is valid)", ErrNotImaged)
	}
	d.Table = t
	return t, nil
}

// maxGPTEntryBytes bounds a GPT's partition entry array: every tool writes
// 128 entries of 128 bytes (16 KiB); UEFI allows more, nothing needs 1 MiB.
const maxGPTEntryBytes = 1 << 20

// readGPT reads the disk's GPT with go-diskfs once the headers it may parse
// (the primary at LBA 1, and the backup at the last LBA, which it falls
// back to when the primary is damaged) have sane entry arrays: go-diskfs
// v1.9.4 allocates the array a header declares before checking anything
// (FuzzRead found 28 TB from a 60 KB disk), and loops forever on entries
// of size 0.
func (d *partitionDisk) readGPT() (*gpt.Table, error) {
	ss := int64(d.LogicalBlocksize)
	for _, lba := range []int64{1, d.Size/ss - 1} {
		hdr := make([]byte, 92)
		if _, err := d.f.ReadAt(hdr, lba*ss); err != nil || string(hdr[:8]) != "EFI PART" {
			continue // go-diskfs refuses it before reading any entry
		}
		entries := binary.LittleEndian.Uint32(hdr[80:84])
		size := binary.LittleEndian.Uint32(hdr[84:88])
		// Entries are 128 bytes times a power of two (UEFI 2.10, 5.3.2).
		if size < 128 || size > 4096 || size&(size-1) != 0 || uint64(entries)*uint64(size) > maxGPTEntryBytes {
			return nil, fmt.Errorf("the GPT header at LBA %d declares %d partition entries of %d bytes", lba, entries, size)
		}
	}
	return gpt.Read(d.Backend, int(ss), int(ss))
}

func freeIndex(t *gpt.Table) int {
	used := map[int]bool{}
	for _, p := range t.Partitions {
		used[p.Index] = true
	}
	for i := 1; i <= 128; i++ {
		if !used[i] {
			return i
		}
	}
	return 0
}

// zero makes [off, off+n) read as zeros: a hole in a file, a zeroed range on
// a block device (the kernel uses WRITE ZEROES or discard), else written zeros.
func (d *partitionDisk) zero(off, n int64) error {
	err := unix.Fallocate(int(d.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if err == nil {
		return nil
	}
	buf := make([]byte, alignBytes)
	for n > 0 {
		k := min(n, int64(len(buf)))
		if _, err := d.f.WriteAt(buf[:k], off); err != nil {
			return fmt.Errorf("%w: zeroing the partition: %v", ErrWrite, err)
		}
		off, n = off+k, n-k
	}
	return nil
}

func (d *partitionDisk) format(off, size int64, config []byte) error {
	fs, err := fat32.Create(d.Backend, size, off, d.LogicalBlocksize, PartitionName, false)
	if err != nil {
		return fmt.Errorf("%w: formatting FAT32: %v", ErrWrite, err)
	}
	f, err := fs.OpenFile("/"+FileName, os.O_CREATE|os.O_RDWR|os.O_TRUNC)
	if err != nil {
		return fmt.Errorf("%w: creating %s: %v", ErrWrite, FileName, err)
	}
	if _, err := f.Write(config); err != nil {
		return fmt.Errorf("%w: writing %s: %v", ErrWrite, FileName, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%w: closing %s: %v", ErrWrite, FileName, err)
	}
	return nil
}

func (d *partitionDisk) sync() error {
	if err := d.f.Sync(); err != nil {
		return fmt.Errorf("%w: fsync: %v", ErrWrite, err)
	}
	return nil
}

// wipeStaleBackup zeroes the image's old backup GPT header, now in free
// space, so no tool mistakes it for the disk's.
func (d *partitionDisk) wipeStaleBackup(t *gpt.Table, lba uint64) error {
	if lba == t.TotalSize()/uint64(d.LogicalBlocksize)-1 {
		return nil
	}
	for _, p := range t.Partitions {
		if lba >= p.Start && lba <= p.End {
			return nil
		}
	}
	if _, err := d.f.WriteAt(make([]byte, d.LogicalBlocksize), int64(lba)*d.LogicalBlocksize); err != nil {
		return fmt.Errorf("%w: clearing the image's old backup GPT: %v", ErrWrite, err)
	}
	return d.sync()
}

// read finds the metal-iso volume in the table on disk and reads the config.
// A partition named metal-iso comes first; else a FAT volume labelled so.
func (d *partitionDisk) read() ([]byte, Volume, error) {
	ss := int(d.LogicalBlocksize)
	t, err := d.readGPT()
	if err != nil {
		return nil, Volume{}, fmt.Errorf("%w: no readable GPT: %v", ErrNotFound, err)
	}
	p, fs, err := d.findConfigPartition(t, ss)
	if err != nil {
		return nil, Volume{}, err
	}
	v := Volume{PartitionNumber: p.Index, StartBytes: int64(p.Start) * int64(ss), SizeBytes: int64(p.End-p.Start+1) * int64(ss), Label: strings.TrimSpace(fs.Label())}
	b, err := readConfigFile(fs)
	return b, v, err
}

// findConfigPartition finds the config partition: the one named PartitionName (which must then
// hold a FAT filesystem), else the first whose FAT filesystem is labelled PartitionName.
func (d *partitionDisk) findConfigPartition(t *gpt.Table, ss int) (*gpt.Partition, *fat32.FileSystem, error) {
	for _, c := range t.Partitions {
		if c.Name != PartitionName {
			continue
		}
		fs, err := readFAT(d.Backend, c, ss)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: partition %d is named %s but holds no filesystem Talos would mount: %v", ErrNotFound, c.Index, PartitionName, err)
		}
		return c, fs, nil
	}
	for _, c := range t.Partitions {
		if f, err := readFAT(d.Backend, c, ss); err == nil && strings.TrimSpace(f.Label()) == PartitionName {
			return c, f, nil
		}
	}
	return nil, nil, fmt.Errorf("%w: no partition named or labelled %s", ErrNotFound, PartitionName)
}

// readConfigFile reads FileName from the partition's filesystem, refusing one over MaxConfigSize.
func readConfigFile(fs *fat32.FileSystem) ([]byte, error) {
	st, err := fs.Stat(FileName)
	if err != nil || st.IsDir() {
		return nil, fmt.Errorf("read config: %s: %w", FileName, os.ErrNotExist)
	}
	if st.Size() > MaxConfigSize {
		return nil, fmt.Errorf("read config: %s has %d bytes, more than %d", FileName, st.Size(), MaxConfigSize)
	}
	f, err := fs.OpenFile("/"+FileName, os.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("read config: %s: %w", FileName, os.ErrNotExist)
	}
	// One read of exactly the file's size: go-diskfs v1.9.4 reads past the
	// end of a file when a read starts inside a cluster (io.ReadAll does).
	b := make([]byte, st.Size())
	if _, err := io.ReadFull(f, b); err != nil && !(err == io.EOF && len(b) == 0) {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return b, nil
}

// maxFATBytes bounds one file allocation table: the metal-iso volume's is
// under 400 KiB; 16 MiB is a FAT32 of 4 million clusters.
const maxFATBytes = 16 << 20

func readFAT(b backend.Storage, p *gpt.Partition, ss int) (*fat32.FileSystem, error) {
	size, start := int64(p.End-p.Start+1)*int64(ss), int64(p.Start)*int64(ss)
	// go-diskfs v1.9.4 allocates the FAT the boot sector declares (up to
	// 4 GiB, twice) before checking it against anything.
	bs := make([]byte, 512)
	if _, err := b.ReadAt(bs, start); err != nil {
		return nil, fmt.Errorf("reading the boot sector: %w", err)
	}
	fat := uint64(binary.LittleEndian.Uint32(bs[36:40])) * uint64(binary.LittleEndian.Uint16(bs[11:13]))
	if fat > maxFATBytes || fat > uint64(size) {
		return nil, fmt.Errorf("the boot sector declares a FAT of %d bytes in a partition of %d", fat, size)
	}
	return fat32.Read(b, size, start, int64(ss))
}
