package diskimage

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf16"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/kernelargs"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/testimage"
)

const (
	// SectorSize is the logical sector size the image is laid out for.
	SectorSize = 512
	// MinImageSize is the smallest image WriteTalosLikeImage makes.
	MinImageSize = 8 << 20
	// BootMarker starts the BOOT partition of a bootable image; the Talos
	// version follows it up to a newline.
	BootMarker = "KARPENTER-SCALEWAY-EM TALOS-LIKE BOOT v1\n"
	// DefaultTalosVersion is the version written when none is given.
	DefaultTalosVersion = "v1.12.0"
	// DefaultKernelArgs is what Talos's metal images boot with when the
	// schematic adds nothing: no talos.config, so Talos waits for its
	// config in maintenance mode.
	DefaultKernelArgs = "talos.platform=metal console=tty0 init_on_alloc=1 slab_nomerge pti=on consoleblank=0 nvme_core.io_timeout=4294967295 printk.devkmsg=on"
	// MetalISOKernelArgs adds what a schematic with customization.extraKernelArgs
	// [talos.config=metal-iso] adds: Talos reads config.yaml from the
	// metal-iso partition and never opens the maintenance API.
	MetalISOKernelArgs = DefaultKernelArgs + " talos.config=metal-iso"

	mib          = 1 << 20
	entryCount   = 128
	entrySize    = 128
	entrySectors = entryCount * entrySize / SectorSize // 32
	stateMagic   = "SIMSTATE"
)

// Partition type GUIDs (textual form).
const (
	typeBIOS  = "21686148-6449-6E6F-744E-656564454649"
	typeEFI   = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
	typeLinux = "0FC63DAF-8483-4772-8E79-3D69D8477DE4"
)

// Partition is one GPT partition, in bytes from the start of the disk.
type Partition struct {
	Name   string
	Offset int64
	Size   int64
}

// Layout is what Inspect found on a bootable disk.
type Layout struct {
	TalosVersion string
	// KernelArgs is the command line of the UKI the firmware boots (set by
	// InspectFile, which reads the EFI partition).
	KernelArgs string
	Partitions []Partition
}

// Partition returns the partition with that name.
func (l *Layout) Partition(name string) (Partition, bool) {
	for _, p := range l.Partitions {
		if p.Name == name {
			return p, true
		}
	}
	return Partition{}, false
}

type imageOptions struct {
	version    string
	kernelArgs string
}

// ImageOption changes what WriteTalosLikeImage writes.
type ImageOption func(*imageOptions)

// WithTalosVersion sets the Talos version recorded in the boot marker (and so
// the image's digest), e.g. "v1.12.1".
func WithTalosVersion(v string) ImageOption { return func(o *imageOptions) { o.version = v } }

// WithKernelArgs sets the kernel command line of the image's UKI
// (DefaultKernelArgs when not given), e.g. MetalISOKernelArgs.
func WithKernelArgs(cmdline string) ImageOption {
	return func(o *imageOptions) { o.kernelArgs = cmdline }
}

// BuildTalosLikeImage writes a bootable Talos-like raw image of size bytes to path.
func BuildTalosLikeImage(path string, size int64, opts ...ImageOption) (err error) {
	o, err := options(size, opts)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	parts := layoutFor(size)
	if err := writeRaw(f, size, parts, o); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	// The EFI system partition: FAT32 with the UKI (kernel arguments) and
	// sd-boot, written through go-diskfs as Talos's imager does with mkfs.vfat.
	efi := parts[1]
	rng := rand.NewChaCha8(seed("efi "+o.version+" "+o.kernelArgs, size))
	linux := make([]byte, min(efi.Size/2, 8<<20))
	fill(rng, linux)
	return testimage.FormatEFI(path, efi.Offset, efi.Size, SectorSize, o.version, testimage.UKI(o.kernelArgs, o.version, linux))
}

// WriteTalosLikeImage writes a bootable Talos-like raw image of size bytes
// (a multiple of 1 MiB, at least MinImageSize) to w, building it in a
// temporary file first (the EFI filesystem needs random access).
func WriteTalosLikeImage(w io.Writer, size int64, opts ...ImageOption) error {
	if _, err := options(size, opts); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "talos-like-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "metal-amd64.raw")
	if err := BuildTalosLikeImage(p, size, opts...); err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

func options(size int64, opts []ImageOption) (imageOptions, error) {
	o := imageOptions{version: DefaultTalosVersion, kernelArgs: DefaultKernelArgs}
	for _, opt := range opts {
		opt(&o)
	}
	if size < MinImageSize || size%mib != 0 {
		return o, fmt.Errorf("image size %d: must be a multiple of 1 MiB and at least %d", size, MinImageSize)
	}
	if o.version == "" || strings.ContainsAny(o.version, "\n\x00") {
		return o, fmt.Errorf("talos version %q: must be non-empty and on one line", o.version)
	}
	if strings.TrimSpace(o.kernelArgs) == "" || strings.ContainsRune(o.kernelArgs, 0) {
		return o, fmt.Errorf("kernel arguments %q: must be non-empty text", o.kernelArgs)
	}
	return o, nil
}

// writeRaw streams the GPT and the partitions' content (the EFI
// partition's filesystem comes afterwards).
func writeRaw(w io.Writer, size int64, parts []Partition, o imageOptions) error {
	primary, backup := gptTables(size, parts)

	bw := bufio.NewWriterSize(w, mib)
	// First MiB: MBR, primary header and entries, zeros.
	head := make([]byte, mib)
	copy(head, primary)
	if _, err := bw.Write(head); err != nil {
		return err
	}
	// Content is pseudo-random where a filesystem would hold data and zeros
	// elsewhere, so compression and zero-skipping behave like on a real image.
	rng := rand.NewChaCha8(seed(o.version, size))
	for _, p := range parts {
		buf := make([]byte, p.Size)
		if p.Name == "BOOT" {
			n := copy(buf, BootMarker+o.version+"\n")
			fill(rng, buf[n:p.Size/2])
		}
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	// Last MiB: zeros then the backup entries and header in the last 33 sectors.
	tail := make([]byte, mib)
	copy(tail[mib-len(backup):], backup)
	if _, err := bw.Write(tail); err != nil {
		return err
	}
	return bw.Flush()
}

func seed(version string, size int64) [32]byte {
	return sha256.Sum256(fmt.Appendf(nil, "talos-like %s %d", version, size))
}

func fill(rng *rand.ChaCha8, b []byte) {
	_, _ = rng.Read(b)
}

func layoutFor(size int64) []Partition {
	efi := (size - 6*mib) / 2 / mib * mib
	return []Partition{
		{Name: "BIOS", Offset: 1 * mib, Size: mib},
		{Name: "EFI", Offset: 2 * mib, Size: efi},
		{Name: "BOOT", Offset: 2*mib + efi, Size: size - 3*mib - (2*mib + efi)},
		{Name: "META", Offset: size - 3*mib, Size: mib},
		{Name: "STATE", Offset: size - 2*mib, Size: mib},
	}
}

// gptTables returns the first 34 sectors (MBR, header, entries) and the last
// 33 sectors (entries, header) of a disk of size bytes.
func gptTables(size int64, parts []Partition) (primary, backup []byte) {
	lastLBA := uint64(size/SectorSize - 1)
	entries := make([]byte, entryCount*entrySize)
	for i, p := range parts {
		e := entries[i*entrySize:]
		typ := typeLinux
		switch p.Name {
		case "BIOS":
			typ = typeBIOS
		case "EFI":
			typ = typeEFI
		}
		copy(e[0:16], guidBytes(typ))
		copy(e[16:32], derivedGUID(p.Name, size))
		binary.LittleEndian.PutUint64(e[32:], uint64(p.Offset/SectorSize))
		binary.LittleEndian.PutUint64(e[40:], uint64((p.Offset+p.Size)/SectorSize-1))
		for j, c := range utf16.Encode([]rune(p.Name)) {
			binary.LittleEndian.PutUint16(e[56+2*j:], c)
		}
	}
	entriesCRC := crc32.ChecksumIEEE(entries)
	header := func(current, alternate, entriesLBA uint64) []byte {
		h := make([]byte, SectorSize)
		copy(h, "EFI PART")
		binary.LittleEndian.PutUint32(h[8:], 0x00010000)
		binary.LittleEndian.PutUint32(h[12:], 92)
		binary.LittleEndian.PutUint64(h[24:], current)
		binary.LittleEndian.PutUint64(h[32:], alternate)
		binary.LittleEndian.PutUint64(h[40:], 34)
		binary.LittleEndian.PutUint64(h[48:], lastLBA-33)
		copy(h[56:72], derivedGUID("disk", size))
		binary.LittleEndian.PutUint64(h[72:], entriesLBA)
		binary.LittleEndian.PutUint32(h[80:], entryCount)
		binary.LittleEndian.PutUint32(h[84:], entrySize)
		binary.LittleEndian.PutUint32(h[88:], entriesCRC)
		binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h[:92]))
		return h
	}
	mbr := make([]byte, SectorSize)
	pe := mbr[446:]
	pe[1], pe[2], pe[3] = 0x00, 0x02, 0x00
	pe[4] = 0xEE
	pe[5], pe[6], pe[7] = 0xFF, 0xFF, 0xFF
	binary.LittleEndian.PutUint32(pe[8:], 1)
	binary.LittleEndian.PutUint32(pe[12:], uint32(min(lastLBA, 0xFFFFFFFF)))
	mbr[510], mbr[511] = 0x55, 0xAA

	primary = append(append(mbr, header(1, lastLBA, 2)...), entries...)
	backup = append(append([]byte{}, entries...), header(lastLBA, 1, lastLBA-entrySectors)...)
	return primary, backup
}

// guidBytes encodes a textual GUID in GPT's mixed-endian form.
func guidBytes(s string) []byte {
	var raw [16]byte
	hex := strings.ReplaceAll(s, "-", "")
	for i := range raw {
		fmt.Sscanf(hex[2*i:2*i+2], "%02x", &raw[i])
	}
	out := make([]byte, 16)
	out[0], out[1], out[2], out[3] = raw[3], raw[2], raw[1], raw[0]
	out[4], out[5] = raw[5], raw[4]
	out[6], out[7] = raw[7], raw[6]
	copy(out[8:], raw[8:])
	return out
}

func derivedGUID(name string, size int64) []byte {
	sum := sha256.Sum256(fmt.Appendf(nil, "guid %s %d", name, size))
	g := sum[:16]
	g[7] = g[7]&0x0f | 0x40 // version 4 (mixed-endian: byte 7 is the high byte of field 3)
	g[8] = g[8]&0x3f | 0x80
	return g
}

// ErrNotBootable wraps every reason Inspect gives for a disk that would not boot.
var ErrNotBootable = errors.New("not bootable")

// Inspect reads the disk (size bytes) the way the simulated firmware does
// and returns its layout, or an error wrapping ErrNotBootable saying why it
// does not boot.
func Inspect(disk io.ReaderAt, size int64) (*Layout, error) {
	g, err := readGPTHeader(disk)
	if err != nil {
		return nil, err
	}
	entries := make([]byte, int(g.count)*int(g.entrySize))
	if _, err := disk.ReadAt(entries, g.entriesLBA*SectorSize); err != nil {
		return nil, notBootable("read GPT entries: %v", err)
	}
	if crc32.ChecksumIEEE(entries) != g.entriesCRC {
		return nil, notBootable("GPT partition entries CRC mismatch")
	}
	l := &Layout{}
	for i := 0; i < int(g.count); i++ {
		p, used, err := partitionEntry(entries[i*int(g.entrySize):(i+1)*int(g.entrySize)], size)
		if err != nil {
			return nil, err
		}
		if used {
			l.Partitions = append(l.Partitions, p)
		}
	}
	boot, ok := l.Partition("BOOT")
	if !ok {
		return nil, notBootable("no BOOT partition")
	}
	if _, ok := l.Partition("STATE"); !ok {
		return nil, notBootable("no STATE partition")
	}
	if l.TalosVersion, err = readBootMarker(disk, boot); err != nil {
		return nil, err
	}
	return l, nil
}

// notBootable is an ErrNotBootable saying why.
func notBootable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrNotBootable, fmt.Sprintf(format, args...))
}

// gptHeader is what Inspect needs from the primary GPT header: where the
// partition entry array is, its shape and its checksum.
type gptHeader struct {
	entriesLBA int64
	count      uint32
	entrySize  uint32
	entriesCRC uint32
}

// readGPTHeader reads and checks the primary GPT header at LBA 1: its
// signature, size, CRC and a sane entry array.
func readGPTHeader(disk io.ReaderAt) (gptHeader, error) {
	h := make([]byte, SectorSize)
	if _, err := disk.ReadAt(h, SectorSize); err != nil {
		return gptHeader{}, notBootable("read GPT header: %v", err)
	}
	if string(h[:8]) != "EFI PART" {
		return gptHeader{}, notBootable("no GPT header at LBA 1")
	}
	hsize := binary.LittleEndian.Uint32(h[12:])
	if hsize < 92 || hsize > SectorSize {
		return gptHeader{}, notBootable("GPT header size %d", hsize)
	}
	want := binary.LittleEndian.Uint32(h[16:])
	hc := append([]byte{}, h[:hsize]...)
	binary.LittleEndian.PutUint32(hc[16:], 0)
	if crc32.ChecksumIEEE(hc) != want {
		return gptHeader{}, notBootable("GPT header CRC mismatch")
	}
	g := gptHeader{
		entriesLBA: int64(binary.LittleEndian.Uint64(h[72:])),
		count:      binary.LittleEndian.Uint32(h[80:]),
		entrySize:  binary.LittleEndian.Uint32(h[84:]),
		entriesCRC: binary.LittleEndian.Uint32(h[88:]),
	}
	if g.count == 0 || g.count > 1024 || g.entrySize < 128 || g.entrySize > 1024 {
		return gptHeader{}, notBootable("GPT entry array %d x %d", g.count, g.entrySize)
	}
	return g, nil
}

// partitionEntry reads one GPT partition entry: false for an unused entry
// (a zero type GUID), an error for a partition past the disk's end.
func partitionEntry(e []byte, size int64) (Partition, bool, error) {
	if bytes.Equal(e[:16], make([]byte, 16)) {
		return Partition{}, false, nil
	}
	first := int64(binary.LittleEndian.Uint64(e[32:]))
	last := int64(binary.LittleEndian.Uint64(e[40:]))
	p := Partition{Name: partitionName(e), Offset: first * SectorSize, Size: (last - first + 1) * SectorSize}
	if last < first || p.Offset+p.Size > size {
		return Partition{}, false, notBootable("partition %q lies outside the disk", p.Name)
	}
	return p, true, nil
}

// partitionName decodes an entry's UTF-16LE name (bytes 56-127), which
// ends at the first NUL.
func partitionName(e []byte) string {
	var name []uint16
	for j := 56; j+1 < 128; j += 2 {
		c := binary.LittleEndian.Uint16(e[j:])
		if c == 0 {
			break
		}
		name = append(name, c)
	}
	return string(utf16.Decode(name))
}

// readBootMarker reads the Talos version from the boot marker at the start
// of the BOOT partition.
func readBootMarker(disk io.ReaderAt, boot Partition) (string, error) {
	m := make([]byte, len(BootMarker)+64)
	if _, err := disk.ReadAt(m, boot.Offset); err != nil {
		return "", notBootable("read BOOT partition: %v", err)
	}
	if !bytes.HasPrefix(m, []byte(BootMarker)) {
		return "", notBootable("BOOT partition has no boot marker")
	}
	rest := m[len(BootMarker):]
	end := bytes.IndexByte(rest, '\n')
	if end <= 0 {
		return "", notBootable("BOOT partition marker has no Talos version")
	}
	return string(rest[:end]), nil
}

// InspectFile opens path (a disk file) and inspects it, and reads the
// kernel arguments of the UKI in its EFI partition: without one the
// firmware (sd-boot) has nothing to boot.
func InspectFile(path string) (*Layout, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	l, err := Inspect(f, st.Size())
	if err != nil {
		return nil, err
	}
	found, err := kernelargs.FromDisk(path, SectorSize)
	if err != nil {
		return nil, fmt.Errorf("%w: EFI partition: %v", ErrNotBootable, err)
	}
	l.KernelArgs = found.Cmdline
	return l, nil
}

// WriteState stores data (a machine config) in the STATE partition of the
// bootable disk at path.
func WriteState(path string, data []byte) error {
	l, err := InspectFile(path)
	if err != nil {
		return err
	}
	state, _ := l.Partition("STATE")
	rec := make([]byte, 0, len(stateMagic)+4+32+len(data))
	rec = append(rec, stateMagic...)
	rec = binary.BigEndian.AppendUint32(rec, uint32(len(data)))
	sum := sha256.Sum256(data)
	rec = append(rec, sum[:]...)
	rec = append(rec, data...)
	if int64(len(rec)) > state.Size {
		return fmt.Errorf("machine config of %d bytes does not fit the STATE partition (%d bytes)", len(data), state.Size)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(rec, state.Offset); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReadState returns the machine config stored in the STATE partition of the
// bootable disk at path, or nil when none was stored.
func ReadState(path string) ([]byte, error) {
	l, err := InspectFile(path)
	if err != nil {
		return nil, err
	}
	state, _ := l.Partition("STATE")
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	head := make([]byte, len(stateMagic)+4+32)
	if _, err := f.ReadAt(head, state.Offset); err != nil {
		return nil, err
	}
	if string(head[:len(stateMagic)]) != stateMagic {
		return nil, nil
	}
	n := int64(binary.BigEndian.Uint32(head[len(stateMagic):]))
	if n > state.Size-int64(len(head)) {
		return nil, fmt.Errorf("STATE partition: record length %d exceeds the partition", n)
	}
	data := make([]byte, n)
	if _, err := f.ReadAt(data, state.Offset+int64(len(head))); err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(data); !bytes.Equal(sum[:], head[len(stateMagic)+4:]) {
		return nil, fmt.Errorf("STATE partition: machine config checksum mismatch")
	}
	return data, nil
}
