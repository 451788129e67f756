package testimage

import (
	"bytes"
	"debug/pe"
	"encoding/binary"
	"fmt"
	"os"
	"sync"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/fat32"
)

// UKI returns a minimal PE file laid out like a unified kernel image, the
// EFI/Linux/Talos-<version>.efi that sd-boot boots on Talos's images: the
// sections .osrel, .cmdline (the kernel arguments), .uname and .linux (linux
// stands in for the kernel). It parses with debug/pe; it does not run.
func UKI(cmdline, version string, linux []byte) []byte {
	return UKIWithInitrd(cmdline, version, linux, nil)
}

// UKIWithInitrd is UKI with an .initrd section holding initrd (none when
// nil), in the place ukify and Talos's imager put it, after .cmdline.
func UKIWithInitrd(cmdline, version string, linux, initrd []byte) []byte {
	const fileAlign = 512
	type section struct {
		name string
		data []byte
	}
	sections := []section{
		{".osrel", fmt.Appendf(nil, "NAME=Talos\nID=talos\nVERSION_ID=%s\n", version)},
		{".cmdline", []byte(cmdline)},
	}
	if initrd != nil {
		sections = append(sections, section{".initrd", initrd})
	}
	sections = append(sections, section{".uname", []byte("6.18.0-talos")}, section{".linux", linux})
	align := func(n int) int { return (n + fileAlign - 1) / fileAlign * fileAlign }
	var hdr bytes.Buffer
	dos := make([]byte, 0x40)
	copy(dos, "MZ")
	binary.LittleEndian.PutUint32(dos[0x3c:], 0x40) // e_lfanew: the PE header follows
	hdr.Write(dos)
	hdr.WriteString("PE\x00\x00")
	binary.Write(&hdr, binary.LittleEndian, pe.FileHeader{
		Machine:          pe.IMAGE_FILE_MACHINE_AMD64,
		NumberOfSections: uint16(len(sections)),
		Characteristics:  pe.IMAGE_FILE_EXECUTABLE_IMAGE | pe.IMAGE_FILE_LARGE_ADDRESS_AWARE,
	})
	off := align(hdr.Len() + 40*len(sections))
	va := uint32(0x1000)
	var body bytes.Buffer
	for _, s := range sections {
		var name [8]uint8
		copy(name[:], s.name)
		binary.Write(&hdr, binary.LittleEndian, pe.SectionHeader32{
			Name:             name,
			VirtualSize:      uint32(len(s.data)),
			VirtualAddress:   va,
			SizeOfRawData:    uint32(align(len(s.data))),
			PointerToRawData: uint32(off + body.Len()),
			Characteristics:  pe.IMAGE_SCN_CNT_INITIALIZED_DATA | pe.IMAGE_SCN_MEM_READ,
		})
		body.Write(s.data)
		body.Write(make([]byte, align(len(s.data))-len(s.data)))
		va += uint32(len(s.data)+0xfff) &^ 0xfff // sections load on 4 KiB pages
	}
	out := make([]byte, off, off+body.Len())
	copy(out, hdr.Bytes())
	return append(out, body.Bytes()...)
}

// sourceDateEpoch serializes FormatEFI: go-diskfs stamps FAT entries with
// SOURCE_DATE_EPOCH when set (a process-wide variable), which keeps images
// byte-identical across runs.
var sourceDateEpoch sync.Mutex

// FormatEFI makes [off, off+size) of the disk file at path an EFI system
// partition as Talos's images have: FAT32 with EFI/Linux/Talos-<version>.efi
// (uki) and sd-boot's EFI/boot/BOOTX64.efi. The result is deterministic.
func FormatEFI(path string, off, size int64, sectorSize int, version string, uki []byte) error {
	sourceDateEpoch.Lock()
	defer sourceDateEpoch.Unlock()
	prev, had := os.LookupEnv("SOURCE_DATE_EPOCH")
	os.Setenv("SOURCE_DATE_EPOCH", "1735689600") // 2025-01-01
	defer func() {
		if had {
			os.Setenv("SOURCE_DATE_EPOCH", prev)
		} else {
			os.Unsetenv("SOURCE_DATE_EPOCH")
		}
	}()
	b, err := file.OpenFromPathWithExclusive(path, false, false)
	if err != nil {
		return err
	}
	defer b.Close()
	fs, err := fat32.Create(b, size, off, int64(sectorSize), "EFI", true)
	if err != nil {
		return fmt.Errorf("EFI partition: %w", err)
	}
	for _, dir := range []string{"/EFI/Linux", "/EFI/boot", "/loader"} {
		if err := fs.Mkdir(dir); err != nil {
			return fmt.Errorf("EFI partition: %w", err)
		}
	}
	for _, e := range []struct {
		name string
		data []byte
	}{
		{"/EFI/Linux/Talos-" + version + ".efi", uki},
		{"/EFI/boot/BOOTX64.efi", UKI("", version, []byte("systemd-boot"))},
		{"/loader/loader.conf", []byte("timeout 10\n")},
	} {
		name, data := e.name, e.data
		f, err := fs.OpenFile(name, os.O_CREATE|os.O_RDWR)
		if err != nil {
			return fmt.Errorf("EFI partition: %s: %w", name, err)
		}
		if _, err := f.Write(data); err != nil {
			return fmt.Errorf("EFI partition: %s: %w", name, err)
		}
		f.Close()
	}
	return nil
}
