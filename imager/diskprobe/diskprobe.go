// Package diskprobe says what a disk holds now (its partition table, the
// partitions' names and filesystems) from the signatures on the disk, so
// that an operator asked to confirm a write, or reading `inspect`, sees what
// would be lost. It reads a few KiB at a few offsets and never writes.
//
// It knows GPT (primary header, else the backup at the disk's end), MBR, and
// the filesystems and containers found on servers: ext2/3/4, XFS, Btrfs,
// FAT, NTFS, swap, LUKS, LVM2, Linux RAID (md 1.x and 0.90), ISO 9660 and
// SquashFS. Anything else reads as "unrecognised", never as empty: empty
// means the probed areas are all zeros.
package diskprobe

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strings"
	"unicode/utf16"

	"golang.org/x/sys/unix"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/units"
)

// Contents is what a disk holds.
type Contents struct {
	// Table is "gpt", "mbr" or "" (none found).
	Table string
	// TableNote qualifies the table: a damaged primary GPT header, a GPT
	// found only through its backup, a protective MBR without a GPT.
	TableNote  string
	SectorSize int
	// BackupGPT is where the primary GPT header says its backup is (bytes;
	// 0 when unknown): on an image written to a bigger disk, where the
	// image ended, not at the disk's end.
	BackupGPT  int64
	Partitions []Partition
	// Filesystem and Label are those on the whole disk (no table).
	Filesystem string
	Label      string
	// Blank: every probed area (the first MiB included) is zeros.
	Blank bool
}

// Partition is one entry of the table.
type Partition struct {
	Number     int
	Name       string // GPT partition name
	Type       string // a known type's name, else the GPT type GUID or MBR type byte
	Start      int64  // bytes
	Size       int64  // bytes
	Filesystem string
	Label      string
}

// headSize is how much of the disk's start is read: the MBR, the GPT
// headers and entries at either sector size, and the whole-disk
// filesystem superblocks.
const headSize = 1 << 20

// fsProbeSize covers every superblock probed at a partition's start: the
// last is Btrfs's, at 64 KiB, and swap's header on 64 KiB pages.
const fsProbeSize = 72 << 10

// Probe reads path (a block device or a disk image file) and says what it
// holds. sectorSize is the disk's logical sector size (0: try 512 and 4096).
func Probe(path string, sectorSize int) (Contents, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Contents{}, err
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd) // a block device's size too
	if err != nil {
		return Contents{}, err
	}
	return ProbeAt(f, size, sectorSize)
}

// ProbeAt is Probe on a disk already open (size bytes long), e.g. one held
// exclusively for writing.
func ProbeAt(r io.ReaderAt, size int64, sectorSize int) (Contents, error) {
	head, err := readAt(r, 0, min(headSize, size))
	if err != nil {
		return Contents{}, err
	}
	var c Contents
	sizes := []int{512, 4096}
	if sectorSize == 4096 {
		sizes = []int{4096, 512}
	}
	for _, ss := range sizes {
		if ok, err := c.readGPT(r, head, size, ss); err != nil {
			return c, err
		} else if ok {
			return c, nil
		}
	}
	if sectorSize > 0 {
		c.SectorSize = sectorSize
	}
	// A filesystem on the whole disk first: a FAT boot sector also ends
	// in the MBR's 55 AA.
	if c.Filesystem, c.Label = detectFS(r, 0, size); c.Filesystem != "" {
		return c, nil
	}
	if c.readMBR(r, head, size) {
		return c, nil
	}
	c.Blank = allZero(head)
	return c, nil
}

// maxGPTEntries bounds the partition entry array read (128 entries of 128
// bytes is what every tool writes: 16 KiB).
const maxGPTEntries = 1 << 20

func readAt(r io.ReaderAt, off, n int64) ([]byte, error) {
	if n <= 0 {
		return nil, nil
	}
	b := make([]byte, n)
	k, err := r.ReadAt(b, off)
	if k < len(b) && err != nil && err != io.EOF {
		return nil, fmt.Errorf("reading %d bytes at %d: %w", n, off, err)
	}
	return b[:k], nil
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

type gptHeader struct {
	alternateLBA uint64
	entriesLBA   uint64
	entries      uint32
	entrySize    uint32
	crcOK        bool
}

func parseGPTHeader(b []byte) (gptHeader, bool) {
	if len(b) < 92 || !bytes.Equal(b[:8], []byte("EFI PART")) {
		return gptHeader{}, false
	}
	h := gptHeader{
		alternateLBA: binary.LittleEndian.Uint64(b[32:40]),
		entriesLBA:   binary.LittleEndian.Uint64(b[72:80]),
		entries:      binary.LittleEndian.Uint32(b[80:84]),
		entrySize:    binary.LittleEndian.Uint32(b[84:88]),
	}
	if n := binary.LittleEndian.Uint32(b[12:16]); n >= 92 && int(n) <= len(b) {
		hdr := append([]byte(nil), b[:n]...)
		want := binary.LittleEndian.Uint32(hdr[16:20])
		binary.LittleEndian.PutUint32(hdr[16:20], 0)
		h.crcOK = crc32.ChecksumIEEE(hdr) == want
	}
	return h, true
}

// readGPT looks for the primary header at LBA 1, else the backup at the
// last LBA, with sector size ss.
func (c *Contents) readGPT(r io.ReaderAt, head []byte, size int64, ss int) (bool, error) {
	h, primary, found, err := findGPTHeader(r, head, size, ss)
	if err != nil || !found {
		return false, err
	}
	c.Table, c.SectorSize = "gpt", ss
	if primary && h.alternateLBA > 1 && h.alternateLBA < uint64(size/int64(ss)) {
		c.BackupGPT = int64(h.alternateLBA) * int64(ss)
	}
	switch {
	case !primary:
		c.TableNote = "only the backup GPT header, at the disk's end: the primary was wiped"
	case !h.crcOK:
		c.TableNote = "the primary GPT header's checksum is wrong"
	}
	if !h.entriesReadable(size, ss) {
		c.addTableNote("no readable partition entries")
		return true, nil
	}
	off := int64(h.entriesLBA) * int64(ss)
	ents, err := readAt(r, off, min(int64(h.entries)*int64(h.entrySize), size-off))
	if err != nil || off >= size {
		c.addTableNote("partition entries beyond the disk's end")
		return true, nil
	}
	c.Partitions = gptPartitions(r, ents, int(h.entrySize), size, ss)
	return true, nil
}

// addTableNote appends a note to TableNote, after a "; " when there is one already.
func (c *Contents) addTableNote(note string) {
	c.TableNote = strings.TrimPrefix(c.TableNote+"; "+note, "; ")
}

// findGPTHeader looks for the primary GPT header in head, then for the backup in the disk's
// last sector; primary says which one was found.
func findGPTHeader(r io.ReaderAt, head []byte, size int64, ss int) (h gptHeader, primary, found bool, err error) {
	if len(head) >= 2*ss {
		if h, ok := parseGPTHeader(head[ss : 2*ss]); ok {
			return h, true, true, nil
		}
	}
	if size < int64(2*ss) {
		return gptHeader{}, false, false, nil
	}
	b, err := readAt(r, size-int64(ss), int64(ss))
	if err != nil {
		return gptHeader{}, false, false, err
	}
	h, ok := parseGPTHeader(b)
	return h, false, ok, nil
}

// entriesReadable reports whether the header's partition array is one the probe reads. Entries
// are 128 bytes times a power of two (UEFI 2.10, 5.3.2); a header that says otherwise, or a table
// above maxGPTEntries bytes, is not read: its sizes would make the probe allocate what they say.
func (h gptHeader) entriesReadable(size int64, ss int) bool {
	if h.entrySize < 128 || h.entrySize > 4096 || h.entrySize&(h.entrySize-1) != 0 {
		return false
	}
	if h.entries == 0 || h.entries > 1024 || int64(h.entries)*int64(h.entrySize) > maxGPTEntries {
		return false
	}
	return h.entriesLBA <= uint64(size/int64(ss))
}

// gptPartitions decodes the used entries of a GPT partition array, probing each partition
// that lies on the disk for a filesystem.
func gptPartitions(r io.ReaderAt, ents []byte, entrySize int, size int64, ss int) []Partition {
	var out []Partition
	for i := 0; (i+1)*entrySize <= len(ents); i++ {
		e := ents[i*entrySize:]
		if allZero(e[:16]) {
			continue
		}
		first := int64(binary.LittleEndian.Uint64(e[32:40]))
		last := int64(binary.LittleEndian.Uint64(e[40:48]))
		p := Partition{Number: i + 1, Name: utf16Name(e[56:128]), Type: gptType(e[:16]), Start: first * int64(ss), Size: (last - first + 1) * int64(ss)}
		if p.Start < size && p.Size > 0 {
			p.Filesystem, p.Label = detectFS(r, p.Start, min(p.Size, size-p.Start))
		}
		out = append(out, p)
	}
	return out
}

func utf16Name(b []byte) string {
	u := make([]uint16, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		v := binary.LittleEndian.Uint16(b[i:])
		if v == 0 {
			break
		}
		u = append(u, v)
	}
	return string(utf16.Decode(u))
}

// guid formats a GPT GUID (mixed-endian on disk) as text.
func guid(b []byte) string {
	return fmt.Sprintf("%08X-%04X-%04X-%X-%X", binary.LittleEndian.Uint32(b[0:4]), binary.LittleEndian.Uint16(b[4:6]),
		binary.LittleEndian.Uint16(b[6:8]), b[8:10], b[10:16])
}

var gptTypes = map[string]string{
	"C12A7328-F81F-11D2-BA4B-00A0C93EC93B": "EFI system",
	"21686148-6449-6E6F-744E-656564454649": "BIOS boot",
	"0FC63DAF-8483-4772-8E79-3D69D8477DE4": "Linux filesystem",
	"0657FD6D-A4AB-43C4-84E5-0933C84B4F4F": "Linux swap",
	"E6D6D379-F507-44C2-A23C-238F2A3DF928": "Linux LVM",
	"A19D880F-05FC-4D3B-A006-743F0F84911E": "Linux RAID",
	"4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709": "Linux root (x86-64)",
	"B921B045-1DF0-41C3-AF44-4C6F280D3FAE": "Linux root (ARM64)",
	"EBD0A0A2-B9E5-4433-87C0-68B6B72699C7": "Microsoft basic data",
	"E3C9E316-0B5C-4DB8-817D-F92DF00215AE": "Microsoft reserved",
	"DE94BBA4-06D1-4D40-A16A-BFD50179D6AC": "Windows recovery",
}

func gptType(b []byte) string {
	g := guid(b)
	if n, ok := gptTypes[g]; ok {
		return n
	}
	return g
}

var mbrTypes = map[byte]string{
	0x07: "NTFS/exFAT", 0x0b: "FAT32", 0x0c: "FAT32 (LBA)", 0x0e: "FAT16 (LBA)", 0x05: "extended", 0x0f: "extended (LBA)",
	0x82: "Linux swap", 0x83: "Linux", 0x8e: "Linux LVM", 0xfd: "Linux RAID", 0xef: "EFI system", 0xee: "GPT protective",
}

func (c *Contents) readMBR(r io.ReaderAt, head []byte, size int64) bool {
	if len(head) < 512 || head[510] != 0x55 || head[511] != 0xAA {
		return false
	}
	c.SectorSize = max(c.SectorSize, 512)
	for i := 0; i < 4; i++ {
		typ, start, n := mbrEntry(head, i)
		if typ == 0 || n == 0 {
			continue
		}
		if typ == 0xee {
			c.Table, c.TableNote = "mbr", "a protective MBR, but no GPT header at either end"
			return true
		}
		p := Partition{Number: i + 1, Type: mbrTypeName(typ), Start: start, Size: n}
		if start < size && typ != 0x05 && typ != 0x0f {
			p.Filesystem, p.Label = detectFS(r, start, min(n, size-start))
		}
		c.Partitions = append(c.Partitions, p)
	}
	if len(c.Partitions) == 0 {
		return false // 55 AA alone: a boot sector, not a table
	}
	c.Table = "mbr"
	return true
}

// mbrEntry reads the type, start and size (bytes) of primary partition
// entry i of an MBR.
func mbrEntry(head []byte, i int) (typ byte, start, size int64) {
	e := head[446+16*i : 446+16*(i+1)]
	return e[4], int64(binary.LittleEndian.Uint32(e[8:12])) * 512, int64(binary.LittleEndian.Uint32(e[12:16])) * 512
}

// mbrTypeName names an MBR partition type, or gives it in hex.
func mbrTypeName(typ byte) string {
	if name, ok := mbrTypes[typ]; ok {
		return name
	}
	return fmt.Sprintf("0x%02x", typ)
}

// detectFS names the filesystem or container whose superblock is at off
// (size bytes long), and its label.
func detectFS(r io.ReaderAt, off, size int64) (string, string) {
	b, err := readAt(r, off, min(fsProbeSize, size))
	if err != nil || len(b) < 512 {
		return "", ""
	}
	sb := superblock(b)
	for _, probe := range []func(superblock) (string, string){headSignature, lvmOrSwap, fatSignature} {
		if fs, label := probe(sb); fs != "" {
			return fs, label
		}
	}
	if raidAtEnd(r, off, size) {
		return "linux_raid_member", ""
	}
	return "", ""
}

// superblock is the start of a partition, read to find the signature of what it holds.
type superblock []byte

// at reports whether sig is at offset o.
func (b superblock) at(o int, sig string) bool {
	return len(b) >= o+len(sig) && string(b[o:o+len(sig)]) == sig
}

// label is the n-byte text field at offset o, without its padding.
func (b superblock) label(o, n int) string {
	if len(b) < o+n {
		return ""
	}
	return strings.TrimSpace(strings.TrimRight(string(b[o:o+n]), "\x00"))
}

// headSignature recognises the filesystems and containers whose magic sits at a fixed offset.
func headSignature(b superblock) (string, string) {
	switch {
	case b.at(0, "XFSB"):
		return "xfs", b.label(108, 12)
	case len(b) >= 2048 && b.at(1080, "\x53\xef"):
		return extKind(b), b.label(1024+0x78, 16)
	case b.at(0x10040, "_BHRfS_M"):
		return "btrfs", b.label(0x1012b, 256)
	case b.at(0, "LUKS\xba\xbe"):
		return "LUKS", b.label(24, 48)
	case b.at(0, "hsqs"):
		return "squashfs", ""
	case b.at(32769, "CD001"):
		return "iso9660", b.label(32808, 32)
	case b.at(3, "NTFS    "):
		return "ntfs", ""
	case b.at(0x1000, "\xfc\x4e\x2b\xa9") || b.at(0, "\xfc\x4e\x2b\xa9"): // md 1.2 / 1.1
		return "linux_raid_member", ""
	}
	return "", ""
}

// extKind tells ext4 (extents, 64bit or flex_bg), ext3 (a journal) and ext2 apart by the
// superblock's feature flags.
func extKind(b superblock) string {
	compat := binary.LittleEndian.Uint32(b[1024+0x5c:])
	incompat := binary.LittleEndian.Uint32(b[1024+0x60:])
	switch {
	case incompat&(0x40|0x80|0x200) != 0:
		return "ext4"
	case compat&0x4 != 0:
		return "ext3"
	}
	return "ext2"
}

// lvmOrSwap finds an LVM label in one of the first four sectors, or a swap signature at the end
// of the first page for the page sizes Linux uses.
func lvmOrSwap(b superblock) (string, string) {
	for s := 0; s < 4; s++ {
		if b.at(512*s, "LABELONE") && b.at(512*s+24, "LVM2 001") {
			return "LVM2_member", ""
		}
	}
	for _, page := range []int{4096, 8192, 16384, 65536} {
		if b.at(page-10, "SWAPSPACE2") || b.at(page-10, "SWAP-SPACE") {
			return "swap", b.label(1024+28, 16)
		}
	}
	return "", ""
}

// fatSignature recognises a FAT boot sector, FAT32's or FAT12/16's, by its type string.
func fatSignature(b superblock) (string, string) {
	if !b.at(510, "\x55\xaa") {
		return "", ""
	}
	switch {
	case b.at(82, "FAT32"):
		return "vfat", fatLabel(b.label(71, 11))
	case b.at(54, "FAT12") || b.at(54, "FAT16") || b.at(54, "FAT  "):
		return "vfat", fatLabel(b.label(43, 11))
	}
	return "", ""
}

// raidAtEnd finds an md 0.90 or 1.0 superblock, which sits near the end of the partition.
func raidAtEnd(r io.ReaderAt, off, size int64) bool {
	if size < 128<<10 {
		return false
	}
	for _, o := range []int64{(size &^ (64<<10 - 1)) - 64<<10, (size - 8<<10) &^ (4<<10 - 1)} {
		if t, err := readAt(r, off+o, 4); err == nil && bytes.Equal(t, []byte("\xfc\x4e\x2b\xa9")) {
			return true
		}
	}
	return false
}

func fatLabel(s string) string {
	if s == "NO NAME" {
		return ""
	}
	return s
}

// String says it in one line, e.g.
//
//	GPT, 2 partitions: 1 "EFI" 105 MB vfat, 2 "STATE" 155 MB xfs "STATE"
func (c Contents) String() string {
	var b strings.Builder
	switch {
	case c.Table != "":
		b.WriteString(strings.ToUpper(c.Table))
		if c.TableNote != "" {
			b.WriteString(" (" + c.TableNote + ")")
		}
		switch len(c.Partitions) {
		case 0:
			b.WriteString(", no partitions")
		case 1:
			b.WriteString(", 1 partition: ")
		default:
			fmt.Fprintf(&b, ", %d partitions: ", len(c.Partitions))
		}
		for i, p := range c.Partitions {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(p.String())
		}
	case c.Filesystem != "":
		b.WriteString(c.Filesystem)
		if c.Label != "" {
			fmt.Fprintf(&b, " %q", c.Label)
		}
		b.WriteString(" on the whole disk, no partition table")
	case c.Blank:
		b.WriteString("nothing: its first MiB is zeros")
	default:
		b.WriteString("no partition table or filesystem em-imager recognises (data of some kind)")
	}
	return b.String()
}

// String: 3 "BOOT" 1.07 GB xfs "BOOT" (or the type when no filesystem is known).
func (p Partition) String() string {
	s := fmt.Sprint(p.Number)
	if p.Name != "" {
		s += fmt.Sprintf(" %q", p.Name)
	}
	s += " " + units.Bytes(p.Size)
	switch {
	case p.Filesystem != "":
		s += " " + p.Filesystem
		if p.Label != "" && p.Label != p.Name {
			s += fmt.Sprintf(" %q", p.Label)
		}
	case p.Name == "":
		s += " " + p.Type
	}
	return s
}
