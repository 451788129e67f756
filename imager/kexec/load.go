package kexec

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// Syscalls are the three kernel calls a jump takes. Host makes them for
// real; Recorder models them in a fake tree; tests bring their own.
type Syscalls interface {
	// Load is kexec_file_load(kernel, initrd, cmdline); initrd may be nil.
	Load(kernel, initrd *os.File, cmdline string) error
	// Unload drops a loaded image (KEXEC_FILE_UNLOAD), so that a failure
	// after Load leaves the host as it was.
	Unload() error
	// Sync flushes every filesystem (sync(2)).
	Sync()
	// Reboot is reboot(LINUX_REBOOT_CMD_KEXEC): it returns only on failure.
	Reboot() error
}

// For returns the syscalls for root: Recorder under a fake root (the
// simulated rescue hosts, tests), Host on the real one.
func For(root hostroot.Root) Syscalls {
	if root.Fake() {
		return Recorder{Root: root}
	}
	return Host{}
}

// Host makes the real system calls.
type Host struct{}

// Load calls kexec_file_load.
func (Host) Load(kernel, initrd *os.File, cmdline string) error {
	initrdFd, flags := -1, 0
	if initrd != nil {
		initrdFd = int(initrd.Fd())
	} else {
		flags |= unix.KEXEC_FILE_NO_INITRAMFS
	}
	return unix.KexecFileLoad(int(kernel.Fd()), initrdFd, cmdline, flags)
}

// Unload calls kexec_file_load with KEXEC_FILE_UNLOAD.
func (Host) Unload() error {
	return unix.KexecFileLoad(-1, -1, "", unix.KEXEC_FILE_UNLOAD)
}

// Sync calls sync(2).
func (Host) Sync() { unix.Sync() }

// Reboot calls reboot(LINUX_REBOOT_CMD_KEXEC).
func (Host) Reboot() error { return unix.Reboot(unix.LINUX_REBOOT_CMD_KEXEC) }

// Fake-root files, relative to the root: RecordFile is what a jump left
// (Record, JSON), RefuseFile may hold an errno name (EBUSY, ENOSYS, EPERM,
// EKEYREJECTED, EBADMSG, ENOEXEC...) that the fake kexec_file_load fails with.
const (
	RecordFile = "kexec/loaded"
	RefuseFile = "kexec/refuse"
)

// Record is what Recorder writes to RecordFile: the simulated world reads
// it to boot the simulated Talos from the jump.
type Record struct {
	Kernel  RecordPart `json:"kernel"`
	Initrd  RecordPart `json:"initrd"`
	Cmdline string     `json:"cmdline"`
	// Jumped: reboot(LINUX_REBOOT_CMD_KEXEC) was called after the load;
	// false while only loaded.
	Jumped   bool      `json:"jumped"`
	LoadedAt time.Time `json:"loadedAt"`
	JumpedAt time.Time `json:"jumpedAt,omitzero"`
}

// RecordPart is a loaded file's size and digest (Bytes 0: none).
type RecordPart struct {
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256,omitempty"`
}

// ReadRecord returns the record a fake root holds; os.ErrNotExist when no
// kernel is loaded there.
func ReadRecord(root hostroot.Root) (Record, error) {
	var r Record
	b, err := os.ReadFile(filepath.Join(root.Dir, RecordFile))
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(b, &r)
}

// Recorder models the syscalls in a fake root: Load writes RecordFile (or
// fails with RefuseFile's errno), Unload removes it, Reboot marks it
// jumped and returns nil, which the caller treats as after a jump.
type Recorder struct{ Root hostroot.Root }

// Load records the kernel, initramfs and command line.
func (r Recorder) Load(kernel, initrd *os.File, cmdline string) error {
	if b, err := os.ReadFile(filepath.Join(r.Root.Dir, RefuseFile)); err == nil {
		name := strings.TrimSpace(string(b))
		if e := errnoNamed(name); e != 0 {
			return e
		}
		return fmt.Errorf("%s holds %q, not an errno name", RefuseFile, name)
	}
	rec := Record{Cmdline: cmdline, LoadedAt: time.Now().UTC()}
	var err error
	if rec.Kernel, err = digestFile(kernel); err != nil {
		return err
	}
	if initrd != nil {
		if rec.Initrd, err = digestFile(initrd); err != nil {
			return err
		}
	}
	return r.write(rec)
}

// Unload removes the record.
func (r Recorder) Unload() error {
	err := os.Remove(filepath.Join(r.Root.Dir, RecordFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// Sync does nothing: a fake root has nothing of the host's to flush.
func (Recorder) Sync() {}

// Reboot marks the record jumped.
func (r Recorder) Reboot() error {
	rec, err := ReadRecord(r.Root)
	if err != nil {
		return fmt.Errorf("no kernel loaded: %w", err)
	}
	rec.Jumped, rec.JumpedAt = true, time.Now().UTC()
	return r.write(rec)
}

// Path is where the record goes.
func (r Recorder) Path() string { return filepath.Join(r.Root.Dir, RecordFile) }

func (r Recorder) write(rec Record) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	p := r.Path()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	// Written whole, then renamed: a reader never sees half a record.
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// Load loads img with sys and maps a refusal to its report code. Nothing
// stays loaded when it fails.
func Load(sys Syscalls, img *Image) error {
	err := sys.Load(img.Kernel.File, img.Initrd.File, img.Cmdline)
	if err == nil {
		return nil
	}
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return &Error{Code: report.CodeKexecFailed, Msg: "kexec_file_load", Err: err}
	}
	switch errno {
	case unix.ENOSYS:
		return &Error{Code: report.CodeKexecUnsupported, Msg: "the rescue kernel has no kexec_file_load", Err: err}
	case unix.EPERM:
		return &Error{Code: report.CodeKexecNotPermitted, Msg: "kexec_file_load refused (no CAP_SYS_BOOT, or kexec disabled)", Err: err}
	case unix.EBUSY:
		return &Error{Code: report.CodeKexecBusy, Msg: "kexec_file_load: another kexec load is in progress", Err: err}
	case unix.EKEYREJECTED, unix.EBADMSG, unix.ENOKEY:
		return &Error{Code: report.CodeKexecSignatureRequired, Msg: "the rescue kernel requires a kexec image signed with a key it trusts", Err: err}
	}
	return &Error{Code: report.CodeKexecFailed, Msg: "kexec_file_load", Err: err}
}

// Jump syncs and reboots into the loaded kernel. On the real host it
// returns only when reboot failed, after unloading the image again; under
// a Recorder it returns nil once the jump is recorded.
func Jump(sys Syscalls, delay time.Duration) error {
	sys.Sync()
	time.Sleep(delay)
	sys.Sync()
	if err := sys.Reboot(); err != nil {
		uerr := sys.Unload()
		return &Error{Code: report.CodeKexecFailed, Msg: "reboot(LINUX_REBOOT_CMD_KEXEC)", Err: errors.Join(err, uerr)}
	}
	return nil
}

func digestFile(f *os.File) (RecordPart, error) {
	h, n, err := hashFrom(f)
	if err != nil {
		return RecordPart{}, err
	}
	return RecordPart{Bytes: n, SHA256: h}, nil
}

// errnoNamed returns the errno called name (ENOSYS), 0 for none: the
// numbers differ between architectures, the names do not.
func errnoNamed(name string) unix.Errno {
	for e := unix.Errno(1); e < 256; e++ {
		if unix.ErrnoName(e) == name {
			return e
		}
	}
	return 0
}
