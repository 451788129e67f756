package diskprobe

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/testimage"
)

// em-imager probes every disk of a rescue host before choosing one: whatever
// a disk holds (a GPT, an MBR, a filesystem someone shaped), ProbeAt must
// answer or refuse, never crash.
func FuzzProbeAt(f *testing.F) {
	img, err := testimage.Bytes(testimage.Spec{Size: 4 << 20, DataBytes: 64 << 10, Seed: 5})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(img[:64<<10], int64(len(img)), 512) // the primary GPT; the rest reads as missing
	f.Add(make([]byte, 4096), int64(4096), 4096)
	f.Fuzz(func(t *testing.T, b []byte, size int64, sectorSize int) {
		if size < 0 || size > 1<<40 {
			return
		}
		// Reads past the bytes given fail as a short disk would.
		_, _ = ProbeAt(bytes.NewReader(b), size, sectorSize)
	})
}

// largestRead is a disk of any claimed size that records its largest read.
type largestRead struct{ max int }

func (l *largestRead) ReadAt(p []byte, off int64) (int, error) {
	l.max = max(l.max, len(p))
	if off >= 4096 {
		return len(p), nil // zeroes
	}
	hdr := make([]byte, 4096)
	copy(hdr[512:], "EFI PART")
	binary.LittleEndian.PutUint64(hdr[512+72:], 2)     // entries at LBA 2
	binary.LittleEndian.PutUint32(hdr[512+80:], 1024)  // 1024 entries
	binary.LittleEndian.PutUint32(hdr[512+84:], 1<<31) // of 2 GiB each
	return copy(p, hdr[off:]), nil
}

// A GPT header that claims a huge entry array on a big disk must not make
// the probe allocate it (it read min(entries*size, disk) bytes: terabytes).
func TestHugeGPTEntryArrayIsNotRead(t *testing.T) {
	disk := &largestRead{}
	c, err := ProbeAt(disk, 8<<40, 512)
	if err != nil {
		t.Fatal(err)
	}
	if disk.max > maxGPTEntries || c.Table != "gpt" {
		t.Fatalf("largest read %d bytes (table %q), want at most %d", disk.max, c.Table, maxGPTEntries)
	}
}
