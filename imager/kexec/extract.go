package kexec

import (
	"crypto/sha256"
	"debug/pe"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/kernelargs"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// Part is the kernel or the initramfs, extracted into an unlinked temporary
// file: kexec_file_load takes file descriptors.
type Part struct {
	File   *os.File
	Bytes  int64
	SHA256 string
}

// Image is what Extract took out of the disk's unified kernel image.
type Image struct {
	Layout string // report.KexecLayoutUKI
	Source string // EFI/Linux/Talos-<version>.efi
	Kernel Part
	// Initrd.File is nil when the UKI has no .initrd section.
	Initrd Part
	// Cmdline is the image's own command line, never rescue's.
	Cmdline string
}

// Close releases the temporary files.
func (i *Image) Close() error {
	var first error
	for _, f := range []*os.File{i.Kernel.File, i.Initrd.File} {
		if f != nil {
			if err := f.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// CmdlineSHA256 is the command line's digest as the report shows it.
func (i *Image) CmdlineSHA256() string {
	s := sha256.Sum256([]byte(i.Cmdline))
	return hex.EncodeToString(s[:])
}

// Extract opens the one UKI in the EFI system partition of the disk at
// diskPath (sectorSize-byte sectors) and copies its .linux and .initrd
// sections into temporary files in tmpDir ("" for the default), with its
// .cmdline. Errors carry report.CodeKexecNoKernel when the disk holds no
// usable UKI (GRUB-only layouts included: their kernel sits on an XFS
// partition this package does not read).
func Extract(diskPath string, sectorSize int, tmpDir string) (*Image, error) {
	u, err := kernelargs.OpenUKI(diskPath, sectorSize)
	if err != nil {
		return nil, &Error{Code: report.CodeKexecNoKernel, Msg: "no unified kernel image to boot", Err: err}
	}
	defer u.Close()
	f, err := pe.NewFile(u)
	if err != nil {
		return nil, &Error{Code: report.CodeKexecNoKernel, Msg: u.Source + " is not a PE file", Err: err}
	}
	img := &Image{Layout: report.KexecLayoutUKI, Source: u.Source}
	if img.Cmdline, err = kernelargs.Cmdline(f); err != nil {
		return nil, &Error{Code: report.CodeKexecNoKernel, Msg: u.Source, Err: err}
	}
	linux := f.Section(".linux")
	if linux == nil {
		return nil, refuse(report.CodeKexecNoKernel, "%s has no .linux section (no kernel)", u.Source)
	}
	if img.Kernel, err = extract(linux, tmpDir); err != nil {
		return nil, &Error{Code: report.CodeKexecFailed, Msg: "extracting the kernel from " + u.Source, Err: err}
	}
	if s := f.Section(".initrd"); s != nil {
		if img.Initrd, err = extract(s, tmpDir); err != nil {
			img.Close()
			return nil, &Error{Code: report.CodeKexecFailed, Msg: "extracting the initramfs from " + u.Source, Err: err}
		}
	}
	return img, nil
}

// chunk is the read size: go-diskfs walks the cluster chain on every
// seek, so few large reads beat io.Copy's 32 KiB ones.
const chunk = 1 << 20

// extract copies a section's data into an unlinked temporary file and
// hashes it. The data is VirtualSize bytes long: the file holds it padded
// to the file alignment (SizeOfRawData), and the padding is not the kernel's.
func extract(s *pe.Section, tmpDir string) (Part, error) {
	n := int64(min(s.VirtualSize, s.Size))
	if s.VirtualSize == 0 {
		n = int64(s.Size) // linkers that leave VirtualSize 0 mean the raw size
	}
	if n == 0 {
		return Part{}, fmt.Errorf("section %s is empty", s.Name)
	}
	f, err := os.CreateTemp(tmpDir, "em-imager-kexec-")
	if err != nil {
		return Part{}, err
	}
	// Unlinked at once: the descriptor is all kexec_file_load needs, and
	// nothing is left behind in rescue's /tmp whatever happens next.
	os.Remove(f.Name())
	h := sha256.New()
	if err := copySection(f, h, s, n); err != nil {
		f.Close()
		return Part{}, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return Part{}, err
	}
	return Part{File: f, Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

func copySection(f *os.File, h hash.Hash, s *pe.Section, n int64) error {
	buf := make([]byte, min(chunk, n))
	for off := int64(0); off < n; {
		k, err := s.ReadAt(buf[:min(int64(len(buf)), n-off)], off)
		if k > 0 {
			h.Write(buf[:k])
			if _, werr := f.Write(buf[:k]); werr != nil {
				return werr
			}
			off += int64(k)
		}
		if err != nil && !(errors.Is(err, io.EOF) && off == n) {
			return fmt.Errorf("reading section %s at %d of %d bytes: %w", s.Name, off, n, err)
		}
	}
	return nil
}

// hashFrom hashes f from its start without moving its offset.
func hashFrom(f *os.File) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<62))
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
