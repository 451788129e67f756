// Package kexec boots the Talos image em-imager wrote without a firmware
// reboot: it takes the kernel, initramfs and command line out of the disk's
// unified kernel image (found as imager/kernelargs finds it), loads them
// with kexec_file_load and jumps with reboot(LINUX_REBOOT_CMD_KEXEC).
//
// Check says, from the host's switches, whether the rescue kernel would
// refuse; every refusal is an *Error carrying a stable report code, and
// nothing changes before one. The syscalls sit behind Syscalls: under a
// fake host root (tests, simulated rescue hosts) Recorder writes what would
// have been loaded into the tree instead, so nothing is ever loaded on the
// machine running the tests.
//
//	if err := kexec.Check(root); err != nil { ... fall back to a reboot }
//	img, err := kexec.Extract(disk, sectorSize, "")
//	defer img.Close()
//	err = kexec.Load(kexec.For(root), img)
package kexec

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// Error is a refusal or failure with its report code.
type Error struct {
	Code string
	Msg  string
	Err  error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// Code returns the report code of err: its *Error's, else kexec_failed.
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return report.CodeKexecFailed
}

func refuse(code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// SecureBootVar is the EFI global variable whose last byte is 1 when the
// firmware booted with SecureBoot on (efivarfs: 4 attribute bytes, then it).
const SecureBootVar = "SecureBoot-8be4df61-93ca-11d0-aa0d-00e098032b8c"

// capSysBoot is CAP_SYS_BOOT's bit: kexec_file_load and reboot need it.
const capSysBoot = 22

// Check reads the host's switches under root and returns nil when none of
// them refuses kexec_file_load, else an *Error with the first refusal. It
// cannot see everything: the syscall may still fail (ENOSYS on a kernel
// without CONFIG_KEXEC_FILE, EBUSY, a signature check), which Load reports
// with the same codes.
func Check(root hostroot.Root) error {
	disabled := root.Proc("sys", "kernel", "kexec_load_disabled")
	switch v, err := os.ReadFile(disabled); {
	case errors.Is(err, os.ErrNotExist):
		// The sysctl exists whenever the kernel has kexec at all (CONFIG_KEXEC_CORE).
		return refuse(report.CodeKexecUnsupported, "the rescue kernel has no kexec (%s is missing)", procName(disabled))
	case err != nil:
		return &Error{Code: report.CodeKexecFailed, Msg: "reading kernel.kexec_load_disabled", Err: err}
	case strings.TrimSpace(string(v)) != "0":
		return refuse(report.CodeKexecDisabled, "kexec is disabled: kernel.kexec_load_disabled is %s (it cannot be turned back on before a reboot)", strings.TrimSpace(string(v)))
	}
	// Since Linux 6.7 a load budget: 0 left refuses, -1 is unlimited.
	if v := hostroot.ReadString(root.Proc("sys", "kernel", "kexec_load_limit_reboot")); v == "0" {
		return refuse(report.CodeKexecDisabled, "kexec is disabled: kernel.kexec_load_limit_reboot is 0")
	}
	if mode := lockdown(hostroot.ReadString(root.Sys("kernel", "security", "lockdown"))); mode != "" && mode != "none" {
		return refuse(report.CodeKexecLockdown, "the rescue kernel is locked down (%s): it loads only kernels signed with a key it trusts", mode)
	}
	if b, err := os.ReadFile(root.Sys("firmware", "efi", "efivars", SecureBootVar)); err == nil && len(b) > 4 && b[len(b)-1] == 1 {
		return refuse(report.CodeKexecSecureBoot, "SecureBoot is on: a jump would skip the firmware's and systemd-stub's measurements Talos seals its disk encryption to")
	}
	if capEff, ok := effectiveCaps(root); ok && capEff&(1<<capSysBoot) == 0 {
		return refuse(report.CodeKexecNotPermitted, "em-imager lacks CAP_SYS_BOOT (run it as root)")
	}
	return nil
}

// lockdown returns the active mode of /sys/kernel/security/lockdown
// ("none integrity [confidentiality]"), "" when the file is absent.
func lockdown(s string) string {
	for _, w := range strings.Fields(s) {
		if strings.HasPrefix(w, "[") && strings.HasSuffix(w, "]") {
			return strings.Trim(w, "[]")
		}
	}
	return ""
}

// effectiveCaps reads CapEff from /proc/self/status; ok is false when the
// file or the line is missing (fake trees usually have neither).
func effectiveCaps(root hostroot.Root) (uint64, bool) {
	b, err := os.ReadFile(root.Proc("self", "status"))
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// procName shows a path as the host names it, without a fake root's prefix.
func procName(p string) string {
	if i := strings.Index(p, "/proc/"); i >= 0 {
		return p[i:]
	}
	return p
}
