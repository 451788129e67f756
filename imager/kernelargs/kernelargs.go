// Package kernelargs reads the kernel command line a Talos disk image boots
// with, from the image itself, and says what it means for config delivery.
//
// Talos's metal images (1.10 and later, amd64 "dual-boot" and UEFI
// "sd-boot") keep a unified kernel image in the EFI system partition,
// EFI/Linux/Talos-<version>.efi, whose .cmdline PE section is the command
// line sd-boot boots; Talos's installer gives GRUB (BIOS boot) the same one.
// The Image Factory puts a schematic's customization.extraKernelArgs there.
// GRUB-only images keep theirs in grub.cfg on the XFS BOOT partition, which
// this package cannot read: FromDisk then returns ErrNotFound.
//
//	c, err := kernelargs.FromDisk("metal-amd64.raw", 512)
//	if err == nil && kernelargs.MetalISO(c.Cmdline) { ... config from the metal-iso partition }
package kernelargs

import (
	"debug/pe"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path"
	"strings"
	"sync"

	"github.com/diskfs/go-diskfs/backend"
	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/fat32"
	"github.com/diskfs/go-diskfs/partition/gpt"
)

const (
	// ConfigParam is Talos's constants.KernelParamConfig: where the metal
	// platform gets its machine config.
	ConfigParam = "talos.config"
	// ConfigMetalISO is the value that makes it read config.yaml from a
	// volume labelled metal-iso (constants.MetalConfigISOLabel).
	ConfigMetalISO = "metal-iso"
	// maxCmdline bounds a .cmdline section (the kernel's own limit is 4 KiB
	// on amd64; UKIs may carry more).
	maxCmdline = 64 << 10
)

// ErrNotFound is returned when the image has no EFI system partition with a UKI.
var ErrNotFound = errors.New("no unified kernel image found")

// Param is one kernel parameter; Value is "" for a bare flag.
type Param struct {
	Key, Value string
	HasValue   bool
}

// Parse splits a command line as the kernel does: on whitespace, with double
// quotes protecting spaces inside a parameter (and removed).
func Parse(cmdline string) []Param {
	var (
		params  []Param
		cur     strings.Builder
		inQuote bool
		started bool
	)
	flush := func() {
		if !started {
			return
		}
		w := cur.String()
		k, v, ok := strings.Cut(w, "=")
		params = append(params, Param{Key: k, Value: v, HasValue: ok})
		cur.Reset()
		started = false
	}
	for _, r := range cmdline {
		switch {
		case r == '"':
			inQuote = !inQuote
			started = true
		case !inQuote && (r == ' ' || r == '\t' || r == '\n' || r == '\r'):
			flush()
		default:
			cur.WriteRune(r)
			started = true
		}
	}
	flush()
	return params
}

// Get returns the first value of key, as Talos reads its parameters
// (procfs Cmdline.Get(key).First()).
func Get(cmdline, key string) (string, bool) {
	for _, p := range Parse(cmdline) {
		if p.Key == key {
			return p.Value, true
		}
	}
	return "", false
}

// MetalISO reports whether the command line makes Talos read its machine
// config from the metal-iso volume (and fail, not fall back to the
// maintenance API, when it is missing).
func MetalISO(cmdline string) bool {
	v, ok := Get(cmdline, ConfigParam)
	return ok && v == ConfigMetalISO
}

// Found is a command line and where it was read.
type Found struct {
	Cmdline string
	// Source names the file, e.g. "EFI/Linux/Talos-v1.12.1.efi".
	Source string
}

// FromDisk reads the command line of the UKI in the EFI system partition of
// the disk image (or disk) at path, whose GPT uses sectorSize-byte sectors.
func FromDisk(p string, sectorSize int) (Found, error) {
	u, err := OpenUKI(p, sectorSize)
	if err != nil {
		return Found{}, err
	}
	defer u.Close()
	cmdline, err := peCmdline(u)
	if err != nil {
		return Found{}, fmt.Errorf("%s: %w", u.Source, err)
	}
	return Found{Cmdline: cmdline, Source: u.Source}, nil
}

// UKI is the unified kernel image found on a disk, open for reading: an
// io.ReaderAt over the PE file, Size bytes long. Close it when done.
type UKI struct {
	io.ReaderAt
	Size int64
	// Source names the file, e.g. "EFI/Linux/Talos-v1.12.1.efi".
	Source  string
	closers []io.Closer
}

// Close releases the file and the disk.
func (u *UKI) Close() error {
	var first error
	for i := len(u.closers) - 1; i >= 0; i-- {
		if err := u.closers[i].Close(); err != nil && first == nil {
			first = err
		}
	}
	u.closers = nil
	return first
}

// OpenUKI finds the one UKI in the EFI system partition of the disk image
// (or disk) at path, whose GPT uses sectorSize-byte sectors, and opens it:
// the file sd-boot boots, read as FromDisk reads its command line, and what
// imager/kexec takes the kernel and initramfs from. Errors wrap ErrNotFound
// when the disk has no UKI.
func OpenUKI(p string, sectorSize int) (*UKI, error) {
	b, err := file.OpenFromPath(p, true)
	if err != nil {
		return nil, err
	}
	u, err := findUKI(b, sectorSize)
	if err != nil {
		b.Close()
		return nil, err
	}
	u.closers = append([]io.Closer{b}, u.closers...)
	return u, nil
}

func findUKI(b backend.Storage, sectorSize int) (*UKI, error) {
	t, err := gpt.Read(b, sectorSize, sectorSize)
	if err != nil {
		return nil, fmt.Errorf("%w: no GPT: %v", ErrNotFound, err)
	}
	esp := espOf(t)
	if esp == nil {
		return nil, fmt.Errorf("%w: no EFI system partition", ErrNotFound)
	}
	fs, err := fat32.Read(b, int64(esp.End-esp.Start+1)*int64(sectorSize), int64(esp.Start)*int64(sectorSize), int64(sectorSize))
	if err != nil {
		return nil, fmt.Errorf("%w: the EFI system partition is not FAT32: %v", ErrNotFound, err)
	}
	entries, err := fs.ReadDir("EFI/Linux") // an io/fs path: no leading slash
	if err != nil {
		return nil, fmt.Errorf("%w: no EFI/Linux directory", ErrNotFound)
	}
	uki, err := onlyUKI(entries)
	if err != nil {
		return nil, err
	}
	st, err := fs.Stat(uki)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", uki, err)
	}
	f, err := fs.OpenFile("/"+uki, os.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", uki, err)
	}
	return &UKI{ReaderAt: &seekerReaderAt{rs: f, size: st.Size()}, Size: st.Size(), Source: uki, closers: []io.Closer{f}}, nil
}

// espOf is the table's EFI system partition, nil when it has none.
func espOf(t *gpt.Table) *gpt.Partition {
	for _, part := range t.Partitions {
		if part.Type == gpt.EFISystemPartition {
			return part
		}
	}
	return nil
}

// onlyUKI is the path of the one unified kernel image in EFI/Linux.
func onlyUKI(entries []iofs.DirEntry) (string, error) {
	var ukis []string
	for _, e := range entries {
		if !e.IsDir() && strings.EqualFold(path.Ext(e.Name()), ".efi") {
			ukis = append(ukis, "EFI/Linux/"+e.Name())
		}
	}
	switch len(ukis) {
	case 0:
		return "", fmt.Errorf("%w: EFI/Linux holds no .efi file", ErrNotFound)
	case 1:
		return ukis[0], nil
	default:
		// A freshly built image has one; more means an upgraded disk, whose
		// default entry only sd-boot's state knows.
		return "", fmt.Errorf("several unified kernel images (%s): cannot tell which one boots", strings.Join(ukis, ", "))
	}
}

// Cmdline returns the first .cmdline section of the PE file f (the default
// profile of a multi-profile UKI), read up to its VirtualSize as Talos
// does. Errors wrap ErrNotFound when there is none.
func Cmdline(f *pe.File) (string, error) {
	s := f.Section(".cmdline")
	if s == nil {
		return "", fmt.Errorf("%w: the PE file has no .cmdline section", ErrNotFound)
	}
	b, err := io.ReadAll(io.LimitReader(s.Open(), int64(min(s.VirtualSize, maxCmdline))))
	if err != nil {
		return "", fmt.Errorf("reading .cmdline: %w", err)
	}
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return strings.TrimSpace(string(b)), nil
}

// peCmdline returns the command line of the PE file r (see Cmdline).
func peCmdline(r io.ReaderAt) (string, error) {
	f, err := pe.NewFile(r)
	if err != nil {
		return "", fmt.Errorf("not a PE file: %w", err)
	}
	return Cmdline(f)
}

// seekerReaderAt gives debug/pe the io.ReaderAt it needs over a go-diskfs
// file, which can only seek and read. It stops reads at the file's size:
// go-diskfs v1.9.4 reads past the end when a read starts inside a cluster.
type seekerReaderAt struct {
	mu   sync.Mutex
	rs   io.ReadSeeker
	size int64
}

func (s *seekerReaderAt) ReadAt(p []byte, off int64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if off >= s.size {
		return 0, io.EOF
	}
	short := int64(len(p)) > s.size-off
	p = p[:min(int64(len(p)), s.size-off)]
	if _, err := s.rs.Seek(off, io.SeekStart); err != nil {
		return 0, err
	}
	n, err := io.ReadFull(s.rs, p)
	if err == io.ErrUnexpectedEOF || (err == nil && short) {
		err = io.EOF // io.ReaderAt's way of saying "short, at the end"
	}
	return n, err
}
