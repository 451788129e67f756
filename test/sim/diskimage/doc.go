// Package diskimage defines the "Talos-like" disk image of the simulated
// Scaleway world: what `make demo`, the end-to-end suite and the simulated
// machines agree a bootable Talos disk looks like, and where a simulated
// Talos keeps the machine config it was given.
//
// # Layout
//
// An image of size S (a multiple of 1 MiB, at least MinImageSize) is a real
// GPT disk with 512-byte sectors:
//
//	LBA 0          protective MBR (type 0xEE)
//	LBA 1          primary GPT header ("EFI PART", header and entry CRC32s)
//	LBA 2..33      128 partition entries of 128 bytes
//	[1 MiB, 2 MiB)  BIOS   BIOS boot partition
//	[2 MiB, ...)    EFI    EFI system partition: FAT32 (go-diskfs) holding
//	                       EFI/Linux/Talos-<version>.efi, a UKI whose .cmdline
//	                       section holds the kernel arguments (WithKernelArgs)
//	[..., S-3 MiB)  BOOT   starts with the boot marker (BootMarker + Talos version)
//	[S-3, S-2 MiB)  META   zeros
//	[S-2, S-1 MiB)  STATE  empty until a simulated Talos stores its applied config
//	last 33 sectors backup partition entries and backup GPT header
//
// The content is deterministic for a given size and version, so the image's
// sha256 is stable across runs (bucket manifests, drift tags).
//
// # Boot check
//
// A disk boots (Inspect returns no error) when LBA 1 holds a GPT header with
// valid CRCs, the partition entries' CRC matches, partitions named BOOT and
// STATE exist inside the disk, and BOOT starts with BootMarker; InspectFile
// also wants the UKI (what sd-boot boots) and returns its kernel arguments.
// A disk whose partition table area was wiped (as em-imager does on a failed
// write) or whose first MiB was never written does not boot. Partitions
// added after the image (em-imager write-config's metal-iso) do not matter.
//
// # Machine config (STATE)
//
// When a simulated Talos accepts a config it stores it at the start of the
// STATE partition (WriteState) as: "SIMSTATE" magic, a big-endian uint32
// length, the sha256 of the data, then the data. Rewriting the disk with a
// fresh image clears it, exactly like reinstalling Talos drops its config.
//
// Make an image for a test:
//
//	err := diskimage.BuildTalosLikeImage(filepath.Join(dir, "metal-amd64.raw"), 16<<20,
//		diskimage.WithTalosVersion("v1.12.1"), diskimage.WithKernelArgs(diskimage.MetalISOKernelArgs))
//
// Tests (sgdisk, Debian package gdisk, cross-checks the GPT; `make deps` installs it):
//
//	go test -count=1 -race ./test/sim/diskimage/
package diskimage
