package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/blockdev"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/configpart"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/kernelargs"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/kexec"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// KexecUsage is printed for `em-imager kexec -h`.
const KexecUsage = `usage: em-imager kexec --disk PATH [--dry-run] [--config-sha256 HEX] [flags]

Boots the Talos image "em-imager write" verified on PATH without a firmware
reboot: takes the kernel, initramfs and the image's own command line out of
the unified kernel image in its EFI partition, loads them with
kexec_file_load, prints the JSON report, syncs and jumps (the SSH session
ends). It refuses with a kexec_* code (exit status 8) and changes nothing
when the rescue kernel cannot (kexec disabled, lockdown, SecureBoot, no
syscall, EBUSY, a signature required): reboot the server instead.
--dry-run makes every check and loads nothing.

Flags:
`

type kexecFlags struct {
	disk, sysroot, configSHA string
	allowVirtual, dryRun     bool
	jumpDelay                time.Duration
}

func newKexecFlagSet(f *kexecFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("em-imager kexec", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.disk, "disk", "", "the disk `PATH` that em-imager write imaged: a block device or a regular file")
	fs.BoolVar(&f.dryRun, "dry-run", false, "check and extract everything, load nothing")
	fs.StringVar(&f.configSHA, "config-sha256", "", "the sha256 write-config reported: the metal-iso config on the disk must have it")
	fs.DurationVar(&f.jumpDelay, "jump-delay", 2*time.Second, "wait between printing the report and jumping, for it to leave over SSH")
	fs.BoolVar(&f.allowVirtual, "allow-virtual", false, "accept a loop, nbd, dm, md or RAM device named by --disk")
	fs.StringVar(&f.sysroot, "sysroot", "", "read /sys, /dev and /proc under DIR (env "+hostroot.EnvVar+"); a fake root records the jump in DIR/"+kexec.RecordFile)
	return fs
}

// syscallsFor gives the kexec syscalls for a root; tests replace it so that
// the real ones are never reached from a test binary.
var syscallsFor = kexec.For

// runKexec is `em-imager kexec`. It prints its report itself: on success
// the report goes out before the jump, which never returns.
func runKexec(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	r, sys, img := planKexec(ctx, args)
	if img != nil {
		defer img.Close()
	}
	if r.Error != nil || r.DryRun {
		return emit(stdout, r.Report)
	}
	if err := kexec.Load(sys, img); err != nil {
		kexecRefused(r.Report, err)
		return emit(stdout, r.Report)
	}
	r.Kexec.Loaded, r.Kexec.Jumping, r.OK = true, true, true
	if rec, ok := sys.(kexec.Recorder); ok {
		r.Kexec.Record = rec.Path()
	}
	status := emit(stdout, r.Report)
	if err := kexec.Jump(sys, r.delay); err != nil {
		// The report already said ok: the exit status and stderr say it did not happen.
		fmt.Fprintf(stderr, "em-imager: %s: %v (the image is unloaded; reboot instead)\n", kexec.Code(err), err)
		return report.ExitCode(kexec.Code(err))
	}
	return status
}

// planKexec makes every check and the extraction, and returns the report
// so far, the syscalls to use and the extracted image (nil on refusal).
func planKexec(ctx context.Context, args []string) (*kexecReport, kexec.Syscalls, *kexec.Image) {
	r := &kexecReport{Report: &report.Report{Command: "kexec", Kexec: &report.Kexec{}}}
	var f kexecFlags
	if err := parseFlags(newKexecFlagSet(&f), args); err != nil {
		return r.fail(report.CodeInvalidArgument, "%v", err), nil, nil
	}
	r.delay = f.jumpDelay
	r.DryRun = f.dryRun
	if msg := f.problem(); msg != "" {
		return r.fail(report.CodeInvalidArgument, "%s", msg), nil, nil
	}
	root := hostroot.Resolve(f.sysroot)
	r.NICs = []report.NIC{}
	if err := kexec.Check(root); err != nil {
		kexecRefused(r.Report, err)
		return r, nil, nil
	}
	img := r.verifiedImage(ctx, root, f)
	if img == nil {
		return r, nil, nil
	}
	r.Kexec.Possible = true
	r.Kexec.Reason = "the rescue kernel allows kexec and the disk holds a verified image with its kernel"
	if f.dryRun {
		r.Kexec.Reason += "; dry run: nothing was loaded"
		r.OK = true
		img.Close()
		return r, nil, nil
	}
	return r, syscallsFor(root), img
}

// problem says what is wrong with the flags, "" when nothing is.
func (f *kexecFlags) problem() string {
	if f.disk == "" || f.disk == "auto" {
		return "--disk is required: the disk `em-imager write` reported"
	}
	if f.configSHA != "" && !isSHA256(f.configSHA) {
		return fmt.Sprintf("--config-sha256 %q is not a hex SHA-256", f.configSHA)
	}
	return ""
}

// verifiedImage opens the kernel of the image write left on the disk, once
// its GPT and config check out; nil (the report saying why) when they do not.
func (r *kexecReport) verifiedImage(ctx context.Context, root hostroot.Root, f kexecFlags) *kexec.Image {
	choice, err := blockdev.Choose(root, blockdev.Request{Disk: f.disk, AllowVirtual: f.allowVirtual})
	r.Disk = choice.Disk
	if err != nil {
		r.fail(diskCode(err), "%v", err)
		return nil
	}
	ss := choice.Disk.LogicalSectorSize
	if choice.Disk.Transport == "file" {
		ss = 0 // a plain file has no sector size: the GPT says
	}
	// What write leaves only after the digest matched: a valid primary GPT.
	if ss, err = configpart.Imaged(choice.OpenPath, ss); err != nil {
		r.fail(writeConfigCode(ctx, err), "%v; nothing was loaded", err)
		return nil
	}
	img, err := kexec.Extract(choice.OpenPath, ss, "")
	if err != nil {
		kexecRefused(r.Report, err)
		return nil
	}
	r.describe(img)
	if err := r.checkConfig(choice.OpenPath, ss, img.Cmdline, f.configSHA); err != nil {
		img.Close()
		return nil
	}
	return img
}

// kexecReport is the report with what runKexec needs besides.
type kexecReport struct {
	*report.Report
	delay time.Duration
}

func (r *kexecReport) fail(code, format string, args ...any) *kexecReport {
	fail(r.Report, code, format, args...)
	return r
}

func (r *kexecReport) describe(img *kexec.Image) {
	k := r.Kexec
	k.Layout, k.Source = img.Layout, img.Source
	k.KernelBytes, k.KernelSHA256 = img.Kernel.Bytes, img.Kernel.SHA256
	k.InitrdBytes, k.InitrdSHA256 = img.Initrd.Bytes, img.Initrd.SHA256
	k.CmdlineBytes, k.CmdlineSHA256 = len(img.Cmdline), img.CmdlineSHA256()
	k.MetalISO = kernelargs.MetalISO(img.Cmdline)
}

// checkConfig refuses an image that reads its config from the metal-iso
// partition when there is none (Talos would stop at boot), or when it is
// not the config the caller wrote.
func (r *kexecReport) checkConfig(disk string, ss int, cmdline, want string) error {
	if !kernelargs.MetalISO(cmdline) && want == "" {
		return nil
	}
	config, _, err := configpart.Read(disk, ss)
	if err != nil {
		r.fail(report.CodeConfigNotVerified, "the image reads its machine config from the metal-iso partition and the disk has none (%v): run write-config first; nothing was loaded", err)
		return r.Error
	}
	sum := sha256.Sum256(config)
	r.Kexec.ConfigSHA256 = hex.EncodeToString(sum[:])
	if want != "" && !strings.EqualFold(want, r.Kexec.ConfigSHA256) {
		r.fail(report.CodeConfigNotVerified, "the metal-iso config on the disk has sha256 %s, --config-sha256 is %s; nothing was loaded", r.Kexec.ConfigSHA256, want)
		return r.Error
	}
	return nil
}

// kexecRefused puts a kexec refusal into the report.
func kexecRefused(rep *report.Report, err error) {
	code := kexec.Code(err)
	rep.Kexec.Possible, rep.Kexec.Code, rep.Kexec.Reason = false, code, err.Error()
	fail(rep, code, "%v; nothing was loaded, reboot instead", err)
}

// kexecVerdict is inspect's kexec field: the host's switches only.
func kexecVerdict(root hostroot.Root) *report.Kexec {
	if err := kexec.Check(root); err != nil {
		return &report.Kexec{Code: kexec.Code(err), Reason: err.Error()}
	}
	return &report.Kexec{Possible: true, Reason: "kexec is enabled, the kernel is not locked down, SecureBoot is off (the load itself may still refuse: ENOSYS, EBUSY, a signature)"}
}

func isSHA256(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == sha256.Size
}
