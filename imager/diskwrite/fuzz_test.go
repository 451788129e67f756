package diskwrite

import (
	"encoding/binary"
	"hash/crc32"
	"testing"
)

// The image's first MiB comes from a download: whatever its GPT header
// says, imageNeeds must not accept an image larger than the disk, nor say
// it needs a negative size.
func FuzzImageNeeds(f *testing.F) {
	head := make([]byte, 8192)
	f.Add(head, int64(0), int64(1<<30))
	f.Add(gptHead(512, 1, 1<<20, (1<<20)-34), int64(0), int64(1<<30))
	f.Add(gptHead(512, 1, 1<<62, 1<<62), int64(0), int64(1<<40))
	f.Fuzz(func(t *testing.T, head []byte, imageSize, capacity int64) {
		if capacity <= 0 || imageSize < 0 {
			return
		}
		n, err := imageNeeds(head, imageSize, 512, capacity)
		if err == nil && (n.Bytes > capacity || n.Bytes < 0) {
			t.Fatalf("accepted an image needing %d bytes on a disk of %d", n.Bytes, capacity)
		}
	})
}

// gptHead is a first MiB's start with a valid GPT header at LBA 1.
func gptHead(sector int, myLBA, alternateLBA, lastUsable uint64) []byte {
	b := make([]byte, 2*sector)
	h := b[sector:]
	copy(h, "EFI PART")
	binary.LittleEndian.PutUint32(h[12:], 92)
	binary.LittleEndian.PutUint64(h[24:], myLBA)
	binary.LittleEndian.PutUint64(h[32:], alternateLBA)
	binary.LittleEndian.PutUint64(h[48:], lastUsable)
	binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h[:92]))
	return b
}

// A header whose LBAs overflow a byte count is refused, not read as a small
// (or negative) image.
func TestImageNeedsOverflowingGPT(t *testing.T) {
	for _, lba := range []uint64{1 << 62, 1<<55 + 3, ^uint64(0)} {
		n, err := imageNeeds(gptHead(512, 1, lba, lba), 0, 512, 1<<40)
		if err == nil || n.Bytes < 0 {
			t.Errorf("GPT reaching LBA %d: needs %d, %v; want refused", lba, n.Bytes, err)
		}
	}
}
