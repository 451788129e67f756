// Package testimage writes Talos-like raw disk images for tests and the
// benchmark: a real GPT (protective MBR, primary and backup headers and
// entry arrays with valid CRC32s) with Talos's partition layout (EFI, BIOS,
// BOOT, META, STATE, EPHEMERAL), partitions partly filled with incompressible
// data and the rest zeros, as a sparse file; optionally an EFI system
// partition holding a unified kernel image with a kernel command line.
package testimage

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand"
	"os"
	"path/filepath"
)

// Spec says what to build.
type Spec struct {
	Size       int64 // bytes, rounded down to whole sectors
	DataBytes  int64 // random bytes spread over the partitions
	SectorSize int   // 512 (default) or 4096
	Seed       int64
	// UKICmdline, when set, makes the EFI partition a FAT32 system
	// partition holding a unified kernel image with this kernel command
	// line (see UKI), as Talos's images have.
	UKICmdline   string
	TalosVersion string // in the UKI's name (default v1.12.0)
	// UKILinux, when set, is the UKI's .linux section (the kernel) instead
	// of random bytes; UKIInitrd, when set, adds an .initrd section. Tests
	// that extract them (imager/kexec) compare with these bytes.
	UKILinux, UKIInitrd []byte
}

type part struct {
	name     string
	typeGUID string
	share    float64 // of the usable space
}

// Talos's layout; shares of the disk approximate metal-amd64.raw.
var layout = []part{
	{"EFI", "C12A7328-F81F-11D2-BA4B-00A0C93EC93B", 0.08},
	{"BIOS", "21686148-6449-6E6F-744E-656564454649", 0.001},
	{"BOOT", "0FC63DAF-8483-4772-8E79-3D69D8477DE4", 0.70},
	{"META", "0FC63DAF-8483-4772-8E79-3D69D8477DE4", 0.001},
	{"STATE", "0FC63DAF-8483-4772-8E79-3D69D8477DE4", 0.07},
	{"EPHEMERAL", "0FC63DAF-8483-4772-8E79-3D69D8477DE4", 0.14},
}

// guid encodes a GUID string in GPT's mixed-endian layout.
func guid(s string) [16]byte {
	var g [16]byte
	var b []byte
	for _, c := range s {
		if c != '-' {
			b = append(b, byte(c))
		}
	}
	raw, _ := hex.DecodeString(string(b))
	copy(g[:], raw)
	// First three fields are little endian.
	g[0], g[1], g[2], g[3] = g[3], g[2], g[1], g[0]
	g[4], g[5] = g[5], g[4]
	g[6], g[7] = g[7], g[6]
	return g
}

// Bytes builds the image in a temporary file and returns its content.
func Bytes(s Spec) ([]byte, error) {
	dir, err := os.MkdirTemp("", "testimage-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "metal-amd64.raw")
	if _, err := Write(p, s); err != nil {
		return nil, err
	}
	return os.ReadFile(p)
}

// Write creates the image at path and returns its SHA-256 (hex).
func Write(path string, s Spec) (string, error) {
	ss := int64(s.SectorSize)
	if ss == 0 {
		ss = 512
	}
	sectors := s.Size / ss
	if sectors < 2048+68 {
		return "", fmt.Errorf("image of %d bytes is too small for a GPT layout", s.Size)
	}
	rng := rand.New(rand.NewSource(s.Seed))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := f.Truncate(sectors * ss); err != nil {
		return "", err
	}
	entriesSectors := (128 * 128) / ss
	first := int64(2048) // partitions start at 1 MiB (with 512-byte sectors)
	if ss == 4096 {
		first = 256
	}
	last := sectors - 1 - entriesSectors - 1
	usable := last - first + 1
	entries := make([]byte, 128*128)
	type extent struct{ start, n int64 }
	var exts []extent
	cur := first
	for i, p := range layout {
		n := int64(float64(usable)*p.share) &^ 7
		if n < 8 {
			n = 8
		}
		if i == len(layout)-1 {
			n = last - cur + 1
		}
		e := entries[i*128:]
		tg := guid(p.typeGUID)
		copy(e[0:16], tg[:])
		rng.Read(e[16:32]) // unique partition GUID
		binary.LittleEndian.PutUint64(e[32:], uint64(cur))
		binary.LittleEndian.PutUint64(e[40:], uint64(cur+n-1))
		for j, c := range p.name {
			binary.LittleEndian.PutUint16(e[56+2*j:], uint16(c))
		}
		exts = append(exts, extent{cur, n})
		cur += n
	}
	// Fill the start of each partition with data, in proportion to its share.
	buf := make([]byte, 4<<20)
	for i, e := range exts {
		want := int64(float64(s.DataBytes) * layout[i].share)
		want = min(want, e.n*ss)
		for off := int64(0); off < want; off += int64(len(buf)) {
			k := min(int64(len(buf)), want-off)
			rng.Read(buf[:k])
			if _, err := f.WriteAt(buf[:k], e.start*ss+off); err != nil {
				return "", err
			}
		}
	}
	// Protective MBR.
	mbr := make([]byte, ss)
	mbr[446+4] = 0xEE
	binary.LittleEndian.PutUint32(mbr[446+8:], 1)
	binary.LittleEndian.PutUint32(mbr[446+12:], uint32(min(sectors-1, 0xFFFFFFFF)))
	mbr[510], mbr[511] = 0x55, 0xAA
	var diskGUID [16]byte
	rng.Read(diskGUID[:])
	entriesCRC := crc32.ChecksumIEEE(entries)
	header := func(self, other, entriesLBA int64) []byte {
		h := make([]byte, ss)
		copy(h, "EFI PART")
		binary.LittleEndian.PutUint32(h[8:], 0x00010000)
		binary.LittleEndian.PutUint32(h[12:], 92)
		binary.LittleEndian.PutUint64(h[24:], uint64(self))
		binary.LittleEndian.PutUint64(h[32:], uint64(other))
		binary.LittleEndian.PutUint64(h[40:], uint64(first))
		binary.LittleEndian.PutUint64(h[48:], uint64(last))
		copy(h[56:72], diskGUID[:])
		binary.LittleEndian.PutUint64(h[72:], uint64(entriesLBA))
		binary.LittleEndian.PutUint32(h[80:], 128)
		binary.LittleEndian.PutUint32(h[84:], 128)
		binary.LittleEndian.PutUint32(h[88:], entriesCRC)
		binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h[:92]))
		return h
	}
	writes := []struct {
		b   []byte
		lba int64
	}{
		{mbr, 0},
		{header(1, sectors-1, 2), 1},
		{entries, 2},
		{entries, sectors - 1 - entriesSectors},
		{header(sectors-1, 1, sectors-1-entriesSectors), sectors - 1},
	}
	for _, w := range writes {
		if _, err := f.WriteAt(w.b, w.lba*ss); err != nil {
			return "", err
		}
	}
	if s.UKICmdline != "" {
		version := s.TalosVersion
		if version == "" {
			version = "v1.12.0"
		}
		// The kernel stands in for the data the EFI partition had.
		linux := s.UKILinux
		if linux == nil {
			linux = make([]byte, min(int64(float64(s.DataBytes)*layout[0].share), exts[0].n*ss/2))
			rng.Read(linux)
		}
		if err := FormatEFI(path, exts[0].start*ss, exts[0].n*ss, int(ss), version, UKIWithInitrd(s.UKICmdline, version, linux, s.UKIInitrd)); err != nil {
			return "", err
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	h := sha256.New()
	if _, err := io.Copy(h, bufio.NewReaderSize(f, 4<<20)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), f.Sync()
}
