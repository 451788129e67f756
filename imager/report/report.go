// Package report holds the JSON document em-imager prints on stdout for `write`
// and `inspect`. It is the one type shared by the in-rescue helper and the
// controller (and talosgen, which reads the NICs and the disk from it), so it
// must stay backwards compatible: add fields, never rename them, and bump
// Version when a field changes meaning.
package report

import (
	"encoding/json"
	"fmt"
	"time"
)

// Version of the report schema.
const Version = 1

// Error codes are stable, snake_case, and part of the contract with the
// controller: it decides from them whether a failure is worth a retry.
const (
	CodeDigestMismatch    = "digest_mismatch"
	CodeTruncatedInput    = "truncated_input"
	CodeCorruptInput      = "corrupt_input"
	CodeUnsupportedFormat = "unsupported_format"
	CodeDiskTooSmall      = "disk_too_small"
	CodeDiskNotFound      = "disk_not_found"
	CodeDiskBusy          = "disk_busy"
	CodeDiskUnsuitable    = "disk_unsuitable" // wrong sector size, read-only, removable...
	CodeSourceUnreachable = "source_unreachable"
	CodeSourceRejected    = "source_rejected" // final 4xx (403, 404, expired presigned URL)
	CodeSourceChanged     = "source_changed"  // ETag/Last-Modified changed across a resume
	CodeStalled           = "stalled"
	CodeWriteFailed       = "write_failed"
	CodeVerifyFailed      = "verify_failed" // --verify-readback found different bytes
	CodeInvalidArgument   = "invalid_argument"
	// CodeDiskNotImaged: write-config found no verified image on the disk
	// (no valid primary GPT), or one changed since imaging.
	CodeDiskNotImaged = "disk_not_imaged"
	// CodeWipeFailed: write --wipe-other-disks could not wipe another disk
	// (in use, or a write error); the image itself may be verified.
	CodeWipeFailed = "wipe_failed"
	// CodeManifestInvalid: the --manifest document is not a valid manifest,
	// or is for another architecture.
	CodeManifestInvalid = "manifest_invalid"
	// CodeNotConfirmed: at a terminal, the operator did not answer yes to
	// the question naming the disk; nothing was written.
	CodeNotConfirmed = "not_confirmed"
	// CodeEraseFailed: erase could not discard or overwrite a disk (a
	// write, discard or sync error, or --method discard on a device that
	// refuses discard). Running it again may succeed.
	CodeEraseFailed = "erase_failed"
	// CodeEraseUnverified: a disk still read back data where erase had
	// discarded or zeroed it.
	CodeEraseUnverified = "erase_unverified"
	CodeInterrupted     = "interrupted"
	CodeInternal        = "internal"
	// CodeConfigNotVerified: kexec found an image that reads its config
	// from the metal-iso partition (talos.config=metal-iso) and no config
	// there, or one whose sha256 is not --config-sha256. Neither a jump
	// nor a reboot would boot a node: run write-config again.
	CodeConfigNotVerified = "config_not_verified"
)

// Kexec refusal codes: `em-imager kexec` did not jump and changed nothing
// (an image it loaded is unloaded again), so the caller boots the disk
// with an ordinary reboot instead (KexecFallback). All exit with status 8.
const (
	// CodeKexecDisabled: /proc/sys/kernel/kexec_load_disabled is 1, or
	// kexec_load_limit_reboot is 0.
	CodeKexecDisabled = "kexec_disabled"
	// CodeKexecLockdown: kernel lockdown (integrity or confidentiality)
	// lets only kernels signed with a key the rescue kernel trusts load.
	CodeKexecLockdown = "kexec_lockdown"
	// CodeKexecSecureBoot: the firmware booted with SecureBoot on; Talos's
	// SecureBoot images seal their disk encryption to what the firmware
	// and systemd-stub measure, which a jump would skip.
	CodeKexecSecureBoot = "kexec_secure_boot"
	// CodeKexecUnsupported: the kernel has no kexec_file_load (ENOSYS, or
	// no kexec at all: no kexec_load_disabled sysctl).
	CodeKexecUnsupported = "kexec_unsupported"
	// CodeKexecNotPermitted: EPERM (no CAP_SYS_BOOT, or a policy refused).
	CodeKexecNotPermitted = "kexec_not_permitted"
	// CodeKexecBusy: EBUSY, another kexec load was in progress.
	CodeKexecBusy = "kexec_busy"
	// CodeKexecSignatureRequired: the kernel checks kexec images'
	// signatures and refused this one (EKEYREJECTED, EBADMSG, ENOKEY).
	CodeKexecSignatureRequired = "kexec_signature_required"
	// CodeKexecNoKernel: the disk's EFI system partition holds no unified
	// kernel image (or not exactly one, or one without .linux).
	CodeKexecNoKernel = "kexec_no_kernel"
	// CodeKexecFailed: kexec_file_load failed otherwise (ENOEXEC, EINVAL,
	// ENOMEM), or reboot(LINUX_REBOOT_CMD_KEXEC) returned.
	CodeKexecFailed = "kexec_failed"
)

// KexecFallback reports whether code is a kexec refusal: nothing jumped,
// nothing changed, and an ordinary reboot boots the disk as before.
func KexecFallback(code string) bool {
	switch code {
	case CodeKexecDisabled, CodeKexecLockdown, CodeKexecSecureBoot, CodeKexecUnsupported, CodeKexecNotPermitted,
		CodeKexecBusy, CodeKexecSignatureRequired, CodeKexecNoKernel, CodeKexecFailed:
		return true
	}
	return false
}

// ExitCode maps an error code to the process exit status, so shell users get
// a distinct status per class of failure. 0 is reserved for success.
func ExitCode(code string) int {
	switch code {
	case "":
		return 0
	case CodeInvalidArgument:
		return 2
	case CodeSourceUnreachable, CodeSourceRejected, CodeSourceChanged, CodeStalled:
		return 3
	case CodeDigestMismatch, CodeTruncatedInput, CodeCorruptInput, CodeUnsupportedFormat, CodeManifestInvalid:
		return 4
	case CodeDiskTooSmall, CodeDiskNotFound, CodeDiskBusy, CodeDiskUnsuitable, CodeDiskNotImaged, CodeConfigNotVerified:
		return 5
	case CodeWriteFailed, CodeVerifyFailed, CodeWipeFailed, CodeEraseFailed, CodeEraseUnverified:
		return 6
	case CodeNotConfirmed:
		return 7
	case CodeKexecDisabled, CodeKexecLockdown, CodeKexecSecureBoot, CodeKexecUnsupported, CodeKexecNotPermitted,
		CodeKexecBusy, CodeKexecSignatureRequired, CodeKexecNoKernel, CodeKexecFailed:
		return 8
	case CodeInterrupted:
		return 130
	default:
		return 1
	}
}

// Retryable reports whether running the same command again may succeed
// (network trouble) as opposed to a failure that needs a different input.
func Retryable(code string) bool {
	switch code {
	case CodeSourceUnreachable, CodeStalled, CodeSourceChanged, CodeInterrupted, CodeTruncatedInput, CodeEraseFailed, CodeKexecBusy:
		return true
	}
	return false
}

// Report is the single JSON object on stdout.
type Report struct {
	Version int    `json:"version"`
	Command string `json:"command"` // write | inspect | write-config | erase | kexec
	OK      bool   `json:"ok"`
	Error   *Error `json:"error,omitempty"`
	// Imager is the em-imager build that wrote the report.
	Imager string `json:"imager"`
	// DryRun: write --dry-run made every check of a real run up to its
	// first byte and wrote nothing; OK says the real run would start.
	DryRun bool `json:"dryRun,omitempty"`

	Disk          *Disk          `json:"disk,omitempty"`
	RejectedDisks []RejectedDisk `json:"rejectedDisks,omitempty"`
	// Disks lists every disk of the host (virtual devices left out: loop,
	// RAM, device-mapper, MD, optical), the install disk too, by kernel
	// name, with the identities Talos selects disks by (write and inspect).
	Disks  []Disk  `json:"disks,omitempty"`
	NICs   []NIC   `json:"nics"`
	Image  *Image  `json:"image,omitempty"`
	Config *Config `json:"config,omitempty"`
	// Erased says what erase did to each disk it was asked to erase, in
	// the order asked (also the disks it failed on).
	Erased []Erase `json:"erased,omitempty"`
	// Kexec says whether this rescue kernel can jump into the written
	// image without a firmware reboot (inspect, kexec), and what kexec
	// loaded.
	Kexec   *Kexec   `json:"kexec,omitempty"`
	Timings *Timings `json:"timings,omitempty"`
	// Warnings are things that did not fail the command but an operator may
	// want to know (no O_DIRECT, no hole punching, BLKRRPART refused...).
	Warnings []string `json:"warnings,omitempty"`
}

// Error says what failed, in a stable code and a human message.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Disk is the install disk (write) or the disk auto-selection would pick
// (inspect), or one entry of Disks. Kernel names (Path, Name) change between
// boots; Serial (when SerialSource is SerialFromSysfs), WWID and BusPath do
// not, and are what Talos sees in its disk resources.
type Disk struct {
	Path      string `json:"path"`
	Name      string `json:"name,omitempty"` // kernel name, e.g. nvme0n1
	SizeBytes int64  `json:"sizeBytes"`
	Model     string `json:"model,omitempty"`
	Serial    string `json:"serial,omitempty"`
	// SerialSource says where Serial was read: SerialFromSysfs (what Talos
	// reads too) or SerialFromVPD (SCSI/SATA disks; Talos does not see it).
	SerialSource string `json:"serialSource,omitempty"`
	// WWID is /sys/block/<disk>/wwid, else device/wwid (NVMe EUI/NGUID,
	// SCSI NAA/T10), read as Talos reads it.
	WWID string `json:"wwid,omitempty"`
	// BusPath is the disk's place on the buses (its sysfs device path
	// without the last two elements), as Talos computes it: stable across
	// boots for the same slot.
	BusPath           string `json:"busPath,omitempty"`
	LogicalSectorSize int    `json:"logicalSectorSize"`
	Rotational        bool   `json:"rotational"`
	Removable         bool   `json:"removable,omitempty"`
	ReadOnly          bool   `json:"readOnly,omitempty"`
	Transport         string `json:"transport,omitempty"` // nvme, sata, sas, virtio, loop, file
	// Wiped: write --wipe-other-disks erased this disk's old signatures.
	Wiped bool `json:"wiped,omitempty"`
	// Requested is the --disk value when it is a link to Path
	// (/dev/disk/by-id/...): every check ran on Path.
	Requested string `json:"requested,omitempty"`
	// Rule is the rule that chose the disk (RuleNamed, RuleAutoSmallestFit,
	// RuleAutoLargest); Reason says it in words, with the figures.
	Rule   string `json:"rule,omitempty"`
	Reason string `json:"reason"`
}

// Disk.SerialSource values.
const (
	SerialFromSysfs = "device/serial"
	SerialFromVPD   = "vpd_pg80"
)

// Disk.Rule values. inspect and write (and every subcommand that takes
// --disk) choose with the same rule from the same inputs.
const (
	RuleNamed = "named" // --disk PATH
	// RuleAutoSmallestFit: --disk auto with the image size known (the
	// manifest or --image-size): the smallest non-rotational disk that fits.
	RuleAutoSmallestFit = "auto-smallest-fit"
	// RuleAutoLargest: --disk auto without an image size: the largest
	// non-rotational disk.
	RuleAutoLargest = "auto-largest"
)

// RejectedDisk is a disk auto-selection looked at and did not take.
type RejectedDisk struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// NIC is a physical network interface.
type NIC struct {
	Name         string `json:"name"`
	MAC          string `json:"mac"`
	PermanentMAC string `json:"permanentMac,omitempty"`
	Driver       string `json:"driver,omitempty"`
	PCIAddress   string `json:"pciAddress,omitempty"`
	LinkUp       bool   `json:"linkUp"`
	SpeedMbps    int    `json:"speedMbps,omitempty"`
	// HasDefaultRoute marks the uplink the rescue system itself uses.
	HasDefaultRoute bool `json:"hasDefaultRoute,omitempty"`
}

// HardwareMAC returns the permanent MAC when known, else the current one:
// the one that survives a reboot into another OS.
func (n NIC) HardwareMAC() string {
	if n.PermanentMAC != "" {
		return n.PermanentMAC
	}
	return n.MAC
}

// Image describes what was (or was to be) written.
type Image struct {
	URL string `json:"url"` // query string removed: presigned URLs carry credentials
	// Manifest is the --manifest the URL, format, raw size and digest came
	// from (query string removed), with its own sha256.
	Manifest         string `json:"manifest,omitempty"`
	ManifestSHA256   string `json:"manifestSha256,omitempty"`
	Format           string `json:"format"`
	CompressedBytes  int64  `json:"compressedBytes"`
	RawBytes         int64  `json:"rawBytes"`
	RawSHA256        string `json:"rawSha256,omitempty"`
	ExpectedSHA256   string `json:"expectedSha256,omitempty"`
	Resumes          int    `json:"resumes"`
	ZeroBytesSkipped int64  `json:"zeroBytesSkipped"`
	Verified         bool   `json:"verified"`
	ReadbackVerified bool   `json:"readbackVerified,omitempty"`
	// DirectIO says the bulk of the image was written with O_DIRECT.
	DirectIO bool `json:"directIO,omitempty"`
	// DecodeConcurrency is the number of decoder workers used.
	DecodeConcurrency int `json:"decodeConcurrency,omitempty"`
}

// Config is what write-config put on the disk. It never holds the config
// itself (bootstrap token, CAs): only its digest and where it went.
type Config struct {
	SHA256 string `json:"sha256"`
	Bytes  int    `json:"bytes"`
	// Partition is the GPT partition name Talos looks for (metal-iso),
	// PartitionNumber its entry; StartBytes and SizeBytes its extent.
	Partition       string `json:"partition"`
	PartitionNumber int    `json:"partitionNumber"`
	StartBytes      int64  `json:"startBytes"`
	SizeBytes       int64  `json:"sizeBytes"`
	Filesystem      string `json:"filesystem"` // vfat
	File            string `json:"file"`       // config.yaml
	// Replaced: the partition existed (a second run) and got the new content.
	Replaced bool `json:"replaced,omitempty"`
	// Verified: the config was read back from the disk and matched.
	Verified bool `json:"verified"`
}

// Erase is what `em-imager erase` did to one disk.
type Erase struct {
	Path       string `json:"path"`
	Name       string `json:"name,omitempty"`
	SizeBytes  int64  `json:"sizeBytes"`
	Rotational bool   `json:"rotational"`
	// Method: EraseDiscard, EraseSecureDiscard, EraseOverwrite (the old
	// partitions: small ones whole, large ones at their first and last
	// MiB) or EraseOverwriteFull; "" when nothing was done.
	Method string `json:"method,omitempty"`
	// Fallback says why discard was tried and not used (the device refused
	// it, or read back data afterwards).
	Fallback string `json:"fallback,omitempty"`
	// Bytes discarded or zeroed.
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	// Verified: every block of the old table areas and of each old
	// partition's first and last MiB, and sampled blocks across what was
	// erased, read back as zeroes (VerifiedBytes of them).
	Verified      bool  `json:"verified"`
	VerifiedBytes int64 `json:"verifiedBytes"`
	// Complete: nothing of what the disk held before is left on it (a
	// verified discard of the whole device, or a verified full overwrite).
	Complete bool `json:"complete"`
	// OldPartitions is how many partitions the old table listed.
	OldPartitions int `json:"oldPartitions"`
	// Left says in words what an incomplete erase left on the disk.
	Left  string `json:"left,omitempty"`
	Error *Error `json:"error,omitempty"`
}

// Kexec is `em-imager kexec`'s plan and outcome, or inspect's verdict on
// the host (Possible, Code, Reason only). It never holds the command line:
// Talos's can carry secrets (a talos.config URL with a token, SideroLink's
// join token); only its digest and length, and whether it is metal-iso.
type Kexec struct {
	// Possible: nothing known refuses kexec here (inspect: the kernel's
	// switches; kexec: also the load itself).
	Possible bool `json:"possible"`
	// Code is the refusal's error code when not Possible; Reason says why
	// in words, or what was checked.
	Code   string `json:"code,omitempty"`
	Reason string `json:"reason"`
	// Layout is where the kernel came from: KexecLayoutUKI.
	Layout string `json:"layout,omitempty"`
	// Source is the UKI's path in the EFI system partition.
	Source        string `json:"source,omitempty"`
	KernelBytes   int64  `json:"kernelBytes,omitempty"`
	KernelSHA256  string `json:"kernelSha256,omitempty"`
	InitrdBytes   int64  `json:"initrdBytes,omitempty"`
	InitrdSHA256  string `json:"initrdSha256,omitempty"`
	CmdlineBytes  int    `json:"cmdlineBytes,omitempty"`
	CmdlineSHA256 string `json:"cmdlineSha256,omitempty"`
	// MetalISO: the command line has talos.config=metal-iso, and
	// ConfigSHA256 is the config found in the metal-iso partition.
	MetalISO     bool   `json:"metalIso,omitempty"`
	ConfigSHA256 string `json:"configSha256,omitempty"`
	// Loaded: kexec_file_load accepted the kernel. Jumping: the report is
	// printed, then em-imager syncs and reboots into it: the SSH session
	// ends without an exit status (under a fake root, em-imager writes
	// Record and exits 0 instead).
	Loaded  bool `json:"loaded"`
	Jumping bool `json:"jumping"`
	// Record is the file a fake root's jump was recorded in.
	Record string `json:"record,omitempty"`
}

// Kexec.Layout values.
const KexecLayoutUKI = "uki"

// Erase.Method values.
const (
	EraseDiscard       = "discard"
	EraseSecureDiscard = "secure-discard"
	EraseOverwrite     = "overwrite"
	EraseOverwriteFull = "overwrite-full"
)

// Timings are durations in seconds and the resulting throughput.
type Timings struct {
	StartedAt    time.Time `json:"startedAt"`
	TotalSeconds float64   `json:"totalSeconds"`
	WriteSeconds float64   `json:"writeSeconds,omitempty"`
	SyncSeconds  float64   `json:"syncSeconds,omitempty"`
	// RawMBps is raw image bytes written per second over the whole run (MB = 10^6 bytes).
	RawMBps float64 `json:"rawMBps,omitempty"`
	// DownloadMBps is compressed bytes received per second.
	DownloadMBps float64 `json:"downloadMBps,omitempty"`
}

// Parse decodes a report and checks that it is one em-imager could have written.
func Parse(b []byte) (*Report, error) {
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("em-imager report: %w", err)
	}
	if r.Version == 0 || r.Version > Version {
		return nil, fmt.Errorf("em-imager report: unsupported version %d (this build understands up to %d)", r.Version, Version)
	}
	if !r.OK && r.Error == nil {
		return nil, fmt.Errorf("em-imager report: ok is false but no error is given")
	}
	return &r, nil
}

// Progress is one JSON line em-imager writes on stderr with --progress json.
type Progress struct {
	// Phase: download (until the disk is first written: the image's first
	// MiB is read and checked against the disk), write, sync, verify, then
	// done or failed.
	Phase          string  `json:"phase"`
	BytesIn        int64   `json:"bytesIn"`
	BytesOut       int64   `json:"bytesOut"`
	TotalIn        int64   `json:"totalIn,omitempty"`
	RawMBps        float64 `json:"rawMBps"`
	ETASeconds     float64 `json:"etaSeconds,omitempty"`
	ElapsedSeconds float64 `json:"elapsedSeconds"`
	// Message carries a warning or a retry notice (e.g. "download interrupted
	// at byte N; resuming"), so stderr stays JSON lines only.
	Message string `json:"message,omitempty"`
}
