package kexec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/faketree"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/testimage"
)

const cmdline = "talos.platform=metal console=ttyS0 talos.config=metal-iso init_on_alloc=1"

// parts returns a kernel and an initramfs of sizes that are not multiples
// of the PE file alignment, so padding read as data shows.
func parts(seed int64) (linux, initrd []byte) {
	rng := rand.New(rand.NewSource(seed))
	linux, initrd = make([]byte, 1<<20+123), make([]byte, 2<<20+77)
	rng.Read(linux)
	rng.Read(initrd)
	return linux, initrd
}

func ukiImage(t *testing.T, sectorSize int, spec testimage.Spec) string {
	t.Helper()
	spec.Size, spec.DataBytes, spec.SectorSize, spec.Seed, spec.TalosVersion = 64<<20, 1<<20, sectorSize, 7, "v1.12.4"
	p := filepath.Join(t.TempDir(), "metal-amd64.raw")
	if _, err := testimage.Write(p, spec); err != nil {
		t.Fatal(err)
	}
	return p
}

func fileBytes(t *testing.T, f *os.File) []byte {
	t.Helper()
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<40))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// The kernel, initramfs and command line come out of the test image's UKI
// byte for byte: not padded to the section's file alignment, not rescue's
// command line, on 512-byte and 4Kn layouts.
func TestKexecExtractUKI(t *testing.T) {
	linux, initrd := parts(1)
	for _, ss := range []int{512, 4096} {
		t.Run(strconv.Itoa(ss), func(t *testing.T) {
			img, err := Extract(ukiImage(t, ss, testimage.Spec{UKICmdline: cmdline, UKILinux: linux, UKIInitrd: initrd}), ss, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer img.Close()
			if img.Layout != report.KexecLayoutUKI || img.Source != "EFI/Linux/Talos-v1.12.4.efi" || img.Cmdline != cmdline {
				t.Fatalf("extracted %+v", img)
			}
			if got := fileBytes(t, img.Kernel.File); !bytes.Equal(got, linux) {
				t.Fatalf("kernel: %d bytes, want the %d testimage put in", len(got), len(linux))
			}
			if got := fileBytes(t, img.Initrd.File); !bytes.Equal(got, initrd) {
				t.Fatalf("initrd: %d bytes, want the %d testimage put in", len(got), len(initrd))
			}
			if img.Kernel.Bytes != int64(len(linux)) || img.Kernel.SHA256 != digest(linux) ||
				img.Initrd.Bytes != int64(len(initrd)) || img.Initrd.SHA256 != digest(initrd) {
				t.Fatalf("sizes and digests: %+v %+v", img.Kernel, img.Initrd)
			}
			if img.CmdlineSHA256() != digest([]byte(cmdline)) {
				t.Fatal("command line digest")
			}
		})
	}
}

// The temporary files are unlinked: nothing is left in the directory.
func TestKexecExtractLeavesNoFiles(t *testing.T) {
	linux, initrd := parts(2)
	tmp := t.TempDir()
	img, err := Extract(ukiImage(t, 512, testimage.Spec{UKICmdline: cmdline, UKILinux: linux, UKIInitrd: initrd}), 512, tmp)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Fatalf("left %v in the temporary directory", ents)
	}
}

// A UKI without .initrd (the project's older test images, a UKI that
// embeds its initramfs) loads the kernel alone.
func TestKexecExtractWithoutInitrd(t *testing.T) {
	img, err := Extract(ukiImage(t, 512, testimage.Spec{UKICmdline: "talos.platform=metal"}), 512, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	if img.Initrd.File != nil || img.Kernel.Bytes == 0 || img.Cmdline != "talos.platform=metal" {
		t.Fatalf("extracted %+v", img)
	}
}

// No UKI (a GPT without a FAT EFI partition, as a GRUB-only image) is
// kexec_no_kernel; so is a missing disk.
func TestKexecExtractNoUKI(t *testing.T) {
	for name, p := range map[string]string{
		"no UKI":  ukiImage(t, 512, testimage.Spec{}),
		"no disk": filepath.Join(t.TempDir(), "none"),
	} {
		if _, err := Extract(p, 512, t.TempDir()); Code(err) != report.CodeKexecNoKernel {
			t.Fatalf("%s: %v (%s)", name, err, Code(err))
		}
	}
}

func fakeRoot(t *testing.T, k *faketree.Kexec, extra map[string]string) hostroot.Root {
	t.Helper()
	dir := t.TempDir()
	if err := faketree.Build(dir, faketree.Host{Kexec: k}); err != nil {
		t.Fatal(err)
	}
	for p, content := range extra {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return hostroot.Root{Dir: dir}
}

// Every switch of the host that refuses kexec is found before anything
// is loaded, with its code.
func TestKexecCheckRefusals(t *testing.T) {
	const status = "proc/self/status"
	for _, c := range []struct {
		name  string
		k     *faketree.Kexec
		extra map[string]string
		code  string
	}{
		{"allowed", &faketree.Kexec{}, nil, ""},
		{"lockdown none", &faketree.Kexec{Lockdown: "none"}, nil, ""},
		{"root caps", &faketree.Kexec{}, map[string]string{status: "Name:\tem-imager\nCapEff:\t000001ffffffffff\n"}, ""},
		{"no kexec in the kernel", nil, nil, report.CodeKexecUnsupported},
		{"sysctl", &faketree.Kexec{Disabled: true}, nil, report.CodeKexecDisabled},
		{"load limit", &faketree.Kexec{}, map[string]string{"proc/sys/kernel/kexec_load_limit_reboot": "0\n"}, report.CodeKexecDisabled},
		{"unlimited loads", &faketree.Kexec{}, map[string]string{"proc/sys/kernel/kexec_load_limit_reboot": "-1\n"}, ""},
		{"lockdown integrity", &faketree.Kexec{Lockdown: "integrity"}, nil, report.CodeKexecLockdown},
		{"lockdown confidentiality", &faketree.Kexec{Lockdown: "confidentiality"}, nil, report.CodeKexecLockdown},
		{"SecureBoot", &faketree.Kexec{SecureBoot: true}, nil, report.CodeKexecSecureBoot},
		{"no CAP_SYS_BOOT", &faketree.Kexec{}, map[string]string{status: "CapEff:\t0000000000000000\n"}, report.CodeKexecNotPermitted},
	} {
		err := Check(fakeRoot(t, c.k, c.extra))
		got := ""
		if err != nil {
			got = Code(err)
		}
		if got != c.code {
			t.Errorf("%s: %v (%q), want %q", c.name, err, got, c.code)
		}
	}
}

// fakeSyscalls records the calls and fails Load or Reboot as told.
type fakeSyscalls struct {
	loadErr, rebootErr         error
	loaded, unloaded, rebooted int
	kernel, initrd             []byte
	cmdline                    string
}

func (f *fakeSyscalls) Load(kernel, initrd *os.File, cmdline string) error {
	if f.loadErr != nil {
		return f.loadErr
	}
	f.loaded++
	f.kernel, _ = io.ReadAll(kernel)
	if initrd != nil {
		f.initrd, _ = io.ReadAll(initrd)
	}
	f.cmdline = cmdline
	return nil
}
func (f *fakeSyscalls) Unload() error { f.unloaded++; return nil }
func (f *fakeSyscalls) Sync()         {}
func (f *fakeSyscalls) Reboot() error { f.rebooted++; return f.rebootErr }

func extracted(t *testing.T) (*Image, []byte, []byte) {
	t.Helper()
	linux, initrd := parts(3)
	img, err := Extract(ukiImage(t, 512, testimage.Spec{UKICmdline: cmdline, UKILinux: linux, UKIInitrd: initrd}), 512, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { img.Close() })
	return img, linux, initrd
}

// Load hands kexec_file_load the extracted files from their start and the
// image's command line; each errno of a refusal has its code.
func TestKexecLoadErrnos(t *testing.T) {
	img, linux, initrd := extracted(t)
	sys := &fakeSyscalls{}
	if err := Load(sys, img); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sys.kernel, linux) || !bytes.Equal(sys.initrd, initrd) || sys.cmdline != cmdline {
		t.Fatalf("loaded %d/%d bytes, cmdline %q", len(sys.kernel), len(sys.initrd), sys.cmdline)
	}
	for errno, code := range map[error]string{
		unix.ENOSYS:                       report.CodeKexecUnsupported,
		unix.EPERM:                        report.CodeKexecNotPermitted,
		unix.EBUSY:                        report.CodeKexecBusy,
		unix.EKEYREJECTED:                 report.CodeKexecSignatureRequired,
		unix.EBADMSG:                      report.CodeKexecSignatureRequired,
		unix.ENOKEY:                       report.CodeKexecSignatureRequired,
		unix.ENOEXEC:                      report.CodeKexecFailed,
		errors.New("not an errno at all"): report.CodeKexecFailed,
	} {
		err := Load(&fakeSyscalls{loadErr: errno}, img)
		if Code(err) != code || !report.KexecFallback(Code(err)) || report.ExitCode(Code(err)) != 8 {
			t.Errorf("%v: %v (%s), want %s", errno, err, Code(err), code)
		}
	}
}

// A reboot that returns unloads the image again: the host is left as it was.
func TestKexecJumpFailureUnloads(t *testing.T) {
	sys := &fakeSyscalls{rebootErr: unix.EINVAL}
	if err := Jump(sys, 0); Code(err) != report.CodeKexecFailed || sys.unloaded != 1 {
		t.Fatalf("%v, %d unloads", err, sys.unloaded)
	}
	sys = &fakeSyscalls{}
	if err := Jump(sys, 0); err != nil || sys.rebooted != 1 || sys.unloaded != 0 {
		t.Fatalf("%v: %+v", err, sys)
	}
}

// Under a fake root the syscalls are never made: the load and the jump are
// recorded in the tree, and kexec/refuse makes the load fail with its errno.
func TestKexecRecorder(t *testing.T) {
	img, linux, initrd := extracted(t)
	root := fakeRoot(t, &faketree.Kexec{}, nil)
	sys := For(root)
	rec, ok := sys.(Recorder)
	if !ok {
		t.Fatalf("For(fake root) = %T", sys)
	}
	if _, isHost := For(hostroot.Root{}).(Host); !isHost {
		t.Fatal("the real root does not get the real syscalls")
	}
	if err := Load(sys, img); err != nil {
		t.Fatal(err)
	}
	r, err := ReadRecord(root)
	if err != nil || r.Jumped || r.Cmdline != cmdline || r.Kernel.SHA256 != digest(linux) || r.Initrd.Bytes != int64(len(initrd)) || r.Initrd.SHA256 != digest(initrd) {
		t.Fatalf("record after load: %+v %v", r, err)
	}
	before := time.Now().Add(-time.Second)
	if err := Jump(sys, 0); err != nil {
		t.Fatal(err)
	}
	if r, err = ReadRecord(root); err != nil || !r.Jumped || r.JumpedAt.Before(before) || rec.Path() != filepath.Join(root.Dir, RecordFile) {
		t.Fatalf("record after the jump: %+v %v", r, err)
	}
	if err := sys.Unload(); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRecord(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("unload left the record: %v", err)
	}

	for _, name := range []string{"ENOSYS", "EBUSY", "EPERM", "EKEYREJECTED"} {
		root := fakeRoot(t, &faketree.Kexec{Refuse: name}, nil)
		err := Load(For(root), img)
		want := map[string]string{"ENOSYS": report.CodeKexecUnsupported, "EBUSY": report.CodeKexecBusy, "EPERM": report.CodeKexecNotPermitted, "EKEYREJECTED": report.CodeKexecSignatureRequired}[name]
		if Code(err) != want {
			t.Errorf("refuse %s: %v (%s)", name, err, Code(err))
		}
		if _, err := ReadRecord(root); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("refuse %s left a record: %v", name, err)
		}
	}
	bad := fakeRoot(t, &faketree.Kexec{Refuse: "ENOTANERRNO"}, nil)
	if err := Load(For(bad), img); Code(err) != report.CodeKexecFailed {
		t.Fatalf("an unknown errno name: %v", err)
	}
}
