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
	g, err := planGPT(s)
	if err != nil {
		return "", err
	}
	// One random stream, read in a fixed order (partition GUIDs, data, disk GUID, kernel), so a
	// seed always gives the same image.
	rng := rand.New(rand.NewSource(s.Seed))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := f.Truncate(g.sectors * g.ss); err != nil {
		return "", err
	}
	entries, exts := g.partitionEntries(rng)
	if err := fillPartitions(f, rng, exts, s.DataBytes, g.ss); err != nil {
		return "", err
	}
	var diskGUID [16]byte
	rng.Read(diskGUID[:])
	if err := g.writeTables(f, entries, diskGUID); err != nil {
		return "", err
	}
	if s.UKICmdline != "" {
		if err := writeUKI(path, s, rng, exts[0], g.ss); err != nil {
			return "", err
		}
	}
	sum, err := fileSHA256(f)
	if err != nil {
		return "", err
	}
	return sum, f.Sync()
}

// gptPlan is the geometry of the image: its sector size and count, the first and last usable
// sectors, and how many sectors each copy of the 128-entry partition array takes.
type gptPlan struct {
	ss, sectors, first, last, entriesSectors int64
}

// extent is a partition's first sector and length in sectors.
type extent struct{ start, n int64 }

// planGPT works out the geometry from the spec, refusing a disk too small for a GPT layout.
func planGPT(s Spec) (gptPlan, error) {
	ss := int64(s.SectorSize)
	if ss == 0 {
		ss = 512
	}
	sectors := s.Size / ss
	if sectors < 2048+68 {
		return gptPlan{}, fmt.Errorf("image of %d bytes is too small for a GPT layout", s.Size)
	}
	entriesSectors := (128 * 128) / ss
	first := int64(2048) // partitions start at 1 MiB (with 512-byte sectors)
	if ss == 4096 {
		first = 256
	}
	return gptPlan{ss: ss, sectors: sectors, first: first, last: sectors - 1 - entriesSectors - 1, entriesSectors: entriesSectors}, nil
}

// partitionEntries lays the partitions of layout out over the usable sectors, each by its
// share (the last takes the rest), and returns the GPT partition array and their extents.
func (g gptPlan) partitionEntries(rng *rand.Rand) ([]byte, []extent) {
	usable := g.last - g.first + 1
	entries := make([]byte, 128*128)
	var exts []extent
	cur := g.first
	for i, p := range layout {
		n := max(int64(float64(usable)*p.share)&^7, 8)
		if i == len(layout)-1 {
			n = g.last - cur + 1
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
	return entries, exts
}

// fillPartitions fills the start of each partition with random data, in proportion to its share.
func fillPartitions(f *os.File, rng *rand.Rand, exts []extent, dataBytes, ss int64) error {
	buf := make([]byte, 4<<20)
	for i, e := range exts {
		want := min(int64(float64(dataBytes)*layout[i].share), e.n*ss)
		for off := int64(0); off < want; off += int64(len(buf)) {
			k := min(int64(len(buf)), want-off)
			rng.Read(buf[:k])
			if _, err := f.WriteAt(buf[:k], e.start*ss+off); err != nil {
				return err
			}
		}
	}
	return nil
}

// protectiveMBR is the MBR a GPT disk carries: one 0xEE partition over the whole disk.
func (g gptPlan) protectiveMBR() []byte {
	mbr := make([]byte, g.ss)
	mbr[446+4] = 0xEE
	binary.LittleEndian.PutUint32(mbr[446+8:], 1)
	binary.LittleEndian.PutUint32(mbr[446+12:], uint32(min(g.sectors-1, 0xFFFFFFFF)))
	mbr[510], mbr[511] = 0x55, 0xAA
	return mbr
}

// header is a GPT header at self pointing at its twin at other and at the partition array at
// entriesLBA, with its CRC.
func (g gptPlan) header(self, other, entriesLBA int64, diskGUID [16]byte, entriesCRC uint32) []byte {
	h := make([]byte, g.ss)
	copy(h, "EFI PART")
	binary.LittleEndian.PutUint32(h[8:], 0x00010000)
	binary.LittleEndian.PutUint32(h[12:], 92)
	binary.LittleEndian.PutUint64(h[24:], uint64(self))
	binary.LittleEndian.PutUint64(h[32:], uint64(other))
	binary.LittleEndian.PutUint64(h[40:], uint64(g.first))
	binary.LittleEndian.PutUint64(h[48:], uint64(g.last))
	copy(h[56:72], diskGUID[:])
	binary.LittleEndian.PutUint64(h[72:], uint64(entriesLBA))
	binary.LittleEndian.PutUint32(h[80:], 128)
	binary.LittleEndian.PutUint32(h[84:], 128)
	binary.LittleEndian.PutUint32(h[88:], entriesCRC)
	binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h[:92]))
	return h
}

// writeTables writes the protective MBR, the primary GPT at the start and the backup at the end.
func (g gptPlan) writeTables(f *os.File, entries []byte, diskGUID [16]byte) error {
	crc := crc32.ChecksumIEEE(entries)
	backupEntries := g.sectors - 1 - g.entriesSectors
	writes := []struct {
		b   []byte
		lba int64
	}{
		{g.protectiveMBR(), 0},
		{g.header(1, g.sectors-1, 2, diskGUID, crc), 1},
		{entries, 2},
		{entries, backupEntries},
		{g.header(g.sectors-1, 1, backupEntries, diskGUID, crc), g.sectors - 1},
	}
	for _, w := range writes {
		if _, err := f.WriteAt(w.b, w.lba*g.ss); err != nil {
			return err
		}
	}
	return nil
}

// writeUKI formats the EFI partition (the first extent) with a UKI booting s.UKICmdline.
func writeUKI(path string, s Spec, rng *rand.Rand, efi extent, ss int64) error {
	version := s.TalosVersion
	if version == "" {
		version = "v1.12.0"
	}
	// The kernel stands in for the data the EFI partition had.
	linux := s.UKILinux
	if linux == nil {
		linux = make([]byte, min(int64(float64(s.DataBytes)*layout[0].share), efi.n*ss/2))
		rng.Read(linux)
	}
	return FormatEFI(path, efi.start*ss, efi.n*ss, int(ss), version, UKIWithInitrd(s.UKICmdline, version, linux, s.UKIInitrd))
}

// fileSHA256 hashes f from its start, as hex.
func fileSHA256(f *os.File) (string, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	h := sha256.New()
	if _, err := io.Copy(h, bufio.NewReaderSize(f, 4<<20)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
