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

// Images with a UKI are byte-identical for the same spec (digests in bucket
// manifests and drift tags must not change between runs), whatever
// SOURCE_DATE_EPOCH the caller has.
func TestUKIImageIsDeterministic(t *testing.T) {
	spec := Spec{Size: 32 << 20, DataBytes: 2 << 20, Seed: 4, UKICmdline: "talos.platform=metal talos.config=metal-iso"}
	a, err := Write(filepath.Join(t.TempDir(), "a"), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1")
	b, err := Write(filepath.Join(t.TempDir(), "b"), spec)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatal("the same spec gave two different images")
	}
	if os.Getenv("SOURCE_DATE_EPOCH") != "1" {
		t.Fatal("FormatEFI did not restore SOURCE_DATE_EPOCH")
	}
	spec.UKICmdline = "talos.platform=metal"
	if c, _ := Write(filepath.Join(t.TempDir(), "c"), spec); c == a {
		t.Fatal("another command line gave the same image")
	}
}
