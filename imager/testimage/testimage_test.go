package testimage

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

func TestGPTIsValid(t *testing.T) {
	for _, ss := range []int{512, 4096} {
		p := filepath.Join(t.TempDir(), "img")
		sum, err := Write(p, Spec{Size: 64 << 20, DataBytes: 8 << 20, SectorSize: ss, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(p)
		if len(sum) != 64 || b[510] != 0x55 || b[511] != 0xAA || b[450] != 0xEE {
			t.Fatalf("sector %d: bad MBR or digest %q", ss, sum)
		}
		for _, off := range []int{ss, len(b) - ss} {
			h := b[off : off+ss]
			if !bytes.Equal(h[:8], []byte("EFI PART")) {
				t.Fatalf("sector %d: no GPT header at %d", ss, off)
			}
			stored := binary.LittleEndian.Uint32(h[16:])
			c := append([]byte{}, h[:92]...)
			binary.LittleEndian.PutUint32(c[16:], 0)
			if crc32.ChecksumIEEE(c) != stored {
				t.Fatalf("sector %d: header CRC wrong at %d", ss, off)
			}
			entries := b[int(binary.LittleEndian.Uint64(h[72:]))*ss:][:128*128]
			if crc32.ChecksumIEEE(entries) != binary.LittleEndian.Uint32(h[88:]) {
				t.Fatalf("sector %d: entries CRC wrong", ss)
			}
		}
		zeros := 0
		for _, c := range b {
			if c == 0 {
				zeros++
			}
		}
		if float64(zeros)/float64(len(b)) < 0.8 {
			t.Fatalf("only %d of %d bytes are zero", zeros, len(b))
		}
	}
}
