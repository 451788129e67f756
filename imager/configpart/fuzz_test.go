package configpart

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/testimage"
)

// A fuzz input is a sparse disk: a header (disk size in sectors, sector
// size, whether to fix the GPT headers' CRCs) then records of (sector,
// length, bytes) written at that sector; everything else reads as zeros.
// The seeds are the disks the tests produce, stored as their non-zero
// sectors, so the fuzzer mutates the GPT, the FAT's boot sector, FSInfo,
// FATs and directories of a real write-config result. Without the CRC fix
// the fuzzer would almost never get a changed GPT header past its checksum.
const (
	fuzzMaxDisk   = 256 << 20 // sparse: only the records take space
	fuzzHeaderLen = 6
)

// sparseRecords encodes the non-zero sectors of the disk file at path.
func sparseRecords(t testing.TB, path string, ss int, fixCRC bool) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := binary.LittleEndian.AppendUint32(nil, uint32(len(data)/ss))
	out = append(out, byte(ss>>9), 0)
	if fixCRC {
		out[5] = 1
	}
	zero := make([]byte, ss)
	for s := 0; s*ss < len(data); {
		if bytes.Equal(data[s*ss:(s+1)*ss], zero) {
			s++
			continue
		}
		n := 0 // a run of non-zero sectors, at most 0xffff bytes
		for (s+n)*ss < len(data) && (n+1)*ss <= 0xffff && !bytes.Equal(data[(s+n)*ss:(s+n+1)*ss], zero) {
			n++
		}
		out = binary.LittleEndian.AppendUint32(out, uint32(s))
		out = binary.LittleEndian.AppendUint16(out, uint16(n*ss))
		out = append(out, data[s*ss:(s+n)*ss]...)
		s += n
	}
	return out
}

// materialize writes the sparse disk b describes to a file in dir; ok is
// false for input that describes no disk.
func materialize(dir string, b []byte) (path string, ss int, ok bool) {
	if len(b) < fuzzHeaderLen {
		return "", 0, false
	}
	ss = int(b[4]) << 9
	if ss != 512 && ss != 4096 {
		return "", 0, false
	}
	size := int64(binary.LittleEndian.Uint32(b)) * int64(ss)
	if size < int64(2*ss) || size > fuzzMaxDisk {
		return "", 0, false
	}
	disk := make(map[int64][]byte) // records, applied in order
	var order []int64
	for r := b[fuzzHeaderLen:]; len(r) >= 6; {
		off := int64(binary.LittleEndian.Uint32(r)) * int64(ss)
		n := int(binary.LittleEndian.Uint16(r[4:]))
		r = r[6:]
		n = min(n, len(r))
		if off < size {
			if _, seen := disk[off]; !seen {
				order = append(order, off)
			}
			disk[off] = r[:min(int64(n), size-off)]
		}
		r = r[n:]
	}
	path = filepath.Join(dir, "disk.img")
	f, err := os.Create(path)
	if err != nil {
		return "", 0, false
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return "", 0, false
	}
	for _, off := range order {
		if _, err := f.WriteAt(disk[off], off); err != nil {
			return "", 0, false
		}
	}
	if b[5]&1 != 0 {
		// The header CRCs of the primary GPT (LBA 1) and of the backup
		// (last LBA), over the 92 bytes the header declares.
		for _, lba := range []int64{1, size/int64(ss) - 1} {
			hdr := make([]byte, 92)
			if _, err := f.ReadAt(hdr, lba*int64(ss)); err != nil || string(hdr[:8]) != "EFI PART" {
				continue
			}
			clear(hdr[16:20])
			binary.LittleEndian.PutUint32(hdr[16:20], crc32.ChecksumIEEE(hdr))
			if _, err := f.WriteAt(hdr[16:20], lba*int64(ss)+16); err != nil {
				return "", 0, false
			}
		}
	}
	return path, ss, true
}

// write-config reads the disk it writes to (the GPT, then the FAT of the
// metal-iso partition, to verify the config) and em-imager read-config
// reads it the same way: whatever a disk holds, Read answers or refuses,
// never panics, hangs or allocates without bound.
func FuzzRead(f *testing.F) {
	for _, ss := range []int{512, 4096} {
		p := filepath.Join(f.TempDir(), "disk.img")
		if _, err := testimage.Write(p, testimage.Spec{Size: 16 << 20, DataBytes: 16 << 10, SectorSize: ss, Seed: 3}); err != nil {
			f.Fatal(err)
		}
		if err := os.Truncate(p, 16<<20+PartitionSize+4<<20); err != nil {
			f.Fatal(err)
		}
		f.Add(sparseRecords(f, p, ss, true)) // an imaged disk without metal-iso
		if _, err := Write(context.Background(), p, config, Options{}); err != nil {
			f.Fatal(err)
		}
		f.Add(sparseRecords(f, p, ss, true))  // write-config's result
		f.Add(sparseRecords(f, p, ss, false)) // the same, CRCs as mutated
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		path, ss, ok := materialize(t.TempDir(), b)
		if !ok {
			return
		}
		// A hang is a failure too: the fuzzing engine has no per-input
		// timeout, so a Read that loops would stall it silently.
		done := make(chan struct{})
		var (
			got []byte
			err error
		)
		go func() {
			defer close(done)
			got, _, err = Read(path, ss)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Read did not return within 10 s")
		}
		if err == nil && len(got) > MaxConfigSize {
			t.Fatalf("Read returned %d bytes, more than %d", len(got), MaxConfigSize)
		}
	})
}

// The seed encoding round-trips: a write-config result, stored as its
// non-zero sectors, reads back the config, so the fuzzer starts from disks
// Read accepts.
func TestFuzzSeedIsAReadableDisk(t *testing.T) {
	p := filepath.Join(t.TempDir(), "disk.img")
	if _, err := testimage.Write(p, testimage.Spec{Size: 16 << 20, DataBytes: 16 << 10, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 16<<20+PartitionSize+4<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(context.Background(), p, config, Options{}); err != nil {
		t.Fatal(err)
	}
	seed := sparseRecords(t, p, 512, true)
	path, ss, ok := materialize(t.TempDir(), seed)
	if !ok {
		t.Fatal("the seed describes no disk")
	}
	got, _, err := Read(path, ss)
	if err != nil || !bytes.Equal(got, config) {
		t.Fatalf("Read of the seed disk: %q, %v", got, err)
	}
	t.Logf("seed of %d bytes", len(seed))
}

// allocated is how many bytes f allocated on the heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func writtenDisk(t *testing.T) (string, Result) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk.img")
	if _, err := testimage.Write(p, testimage.Spec{Size: 16 << 20, DataBytes: 16 << 10, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 16<<20+PartitionSize+4<<20); err != nil {
		t.Fatal(err)
	}
	res, err := Write(context.Background(), p, config, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p, res
}

func patch(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// A GPT header (with a valid checksum) that declares a huge partition entry
// array is refused before anything allocates it: go-diskfs allocated what
// the header said (the FuzzRead crasher asked for 28 TB).
func TestHugeGPTEntryArrayIsRefused(t *testing.T) {
	disk, _ := writtenDisk(t)
	hdr := make([]byte, 92)
	f, err := os.Open(disk)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.ReadAt(hdr, 512)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(hdr[80:84], 8192)  // entries
	binary.LittleEndian.PutUint32(hdr[84:88], 65536) // of 64 KiB: 512 MiB
	clear(hdr[16:20])
	binary.LittleEndian.PutUint32(hdr[16:20], crc32.ChecksumIEEE(hdr))
	patch(t, disk, 512, hdr)
	var rerr, werr error
	n := allocated(func() {
		_, _, rerr = Read(disk, 0)
		_, werr = Write(context.Background(), disk, config, Options{})
	})
	if !errors.Is(rerr, ErrNotFound) || !errors.Is(werr, ErrNotImaged) {
		t.Errorf("Read: %v; Write: %v; want not found and not imaged", rerr, werr)
	}
	if n > 64<<20 {
		t.Errorf("Read and Write allocated %d MiB for a header declaring 512 MiB of entries", n>>20)
	}
}

// A FAT boot sector that declares a huge FAT is refused before anything
// allocates it: go-diskfs allocated what the boot sector said.
func TestHugeFATIsRefused(t *testing.T) {
	disk, res := writtenDisk(t)
	// Sectors per FAT (FAT32 BPB, offset 36): 2 Mi sectors of 512 bytes, 1 GiB.
	patch(t, disk, res.StartBytes+36, binary.LittleEndian.AppendUint32(nil, 2<<20))
	var err error
	n := allocated(func() { _, _, err = Read(disk, 0) })
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("Read: %v, want not found", err)
	}
	if n > 64<<20 {
		t.Errorf("Read allocated %d MiB for a boot sector declaring a 1 GiB FAT", n>>20)
	}
}
