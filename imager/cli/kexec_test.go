package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/faketree"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/kexec"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/testimage"
)

// A test binary never loads a kernel on the machine it runs on: the real
// root gets syscalls that refuse.
func init() {
	syscallsFor = func(root hostroot.Root) kexec.Syscalls {
		if root.Fake() {
			return kexec.For(root)
		}
		return neverLoad{}
	}
}

type neverLoad struct{}

func (neverLoad) Load(_, _ *os.File, _ string) error {
	return errors.New("tests never load a kernel on the test machine")
}
func (neverLoad) Unload() error { return nil }
func (neverLoad) Sync()         {}
func (neverLoad) Reboot() error { return errors.New("tests never reboot the test machine") }

// The join token stands for a secret a Talos command line can carry: it
// must never reach the report.
const (
	kexecSecret  = "jointoken-s3cr3t"
	kexecCmdline = "talos.platform=metal console=ttyS0 talos.config=metal-iso siderolink.api=https://omni.example/?jointoken=" + kexecSecret
)

type kexecDisk struct {
	root          string
	linux, initrd []byte
}

// kexecHost is a fake rescue host whose NVMe disk holds a Talos-like image
// (a UKI with cmdline, when not "") as write leaves it, and, with config,
// the metal-iso config write-config adds.
func kexecHost(t *testing.T, k *faketree.Kexec, cmdline string, config []byte) kexecDisk {
	t.Helper()
	d := kexecDisk{root: faketree.DirectIODir(t), linux: make([]byte, 1<<20+5), initrd: make([]byte, 2<<20+9)}
	if err := faketree.Build(d.root, faketree.Host{Disks: []faketree.Disk{{Name: "nvme0n1", Size: 128 << 20}}, Kexec: k}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(9))
	rng.Read(d.linux)
	rng.Read(d.initrd)
	// The image goes at the start of the larger disk, as write leaves it:
	// write-config needs the room after it.
	img := kexecImage(t, cmdline, d.linux, d.initrd)
	f, err := os.OpenFile(filepath.Join(d.root, "dev", "nvme0n1"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(img, 0); err != nil {
		t.Fatal(err)
	}
	if config != nil {
		wantCode(t, writeConfigRun(t, nil, config, "--disk", "/dev/nvme0n1", "--sysroot", d.root), "")
	}
	return d
}

var kexecImages sync.Map // cmdline -> image bytes: built once per test binary

func kexecImage(t *testing.T, cmdline string, linux, initrd []byte) []byte {
	t.Helper()
	if b, ok := kexecImages.Load(cmdline); ok {
		return b.([]byte)
	}
	b, err := testimage.Bytes(testimage.Spec{Size: 64 << 20, DataBytes: 1 << 20, Seed: 8, UKICmdline: cmdline, UKILinux: linux, UKIInitrd: initrd})
	if err != nil {
		t.Fatal(err)
	}
	kexecImages.Store(cmdline, b)
	return b
}

func (d kexecDisk) digest(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.root, "dev", "nvme0n1"))
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func kexecRun(t *testing.T, root string, args ...string) run {
	t.Helper()
	args = append([]string{"kexec", "--disk", "/dev/nvme0n1", "--jump-delay", "0", "--sysroot", root}, args...)
	r := mainReport(context.Background(), t, args, nil, kexecSecret) // the command line
	rep, code := r.rep, r.code
	if rep.Command != "kexec" || rep.Kexec == nil || report.ExitCode(errCode(r)) != code {
		t.Fatalf("report: exit %d\n%s", code, r.stdout)
	}
	return r
}

// The whole path under a fake root: checks, extraction, load and jump,
// recorded in the tree instead of made; the report says what was loaded,
// with the command line's digest only, and exits 0 as after a jump.
func TestKexecCLIRecordsJump(t *testing.T) {
	d := kexecHost(t, &faketree.Kexec{}, kexecCmdline, machineConfig)
	before := d.digest(t)
	r := kexecRun(t, d.root, "--config-sha256", digestOf(machineConfig))
	wantCode(t, r, "")
	k := r.rep.Kexec
	if !r.rep.OK || r.rep.DryRun || !k.Possible || !k.Loaded || !k.Jumping || k.Layout != report.KexecLayoutUKI || k.Source != "EFI/Linux/Talos-v1.12.0.efi" ||
		k.KernelBytes != int64(len(d.linux)) || k.KernelSHA256 != digestOf(d.linux) || k.InitrdBytes != int64(len(d.initrd)) || k.InitrdSHA256 != digestOf(d.initrd) ||
		k.CmdlineBytes != len(kexecCmdline) || k.CmdlineSHA256 != digestOf([]byte(kexecCmdline)) || !k.MetalISO || k.ConfigSHA256 != digestOf(machineConfig) ||
		k.Record != filepath.Join(d.root, kexec.RecordFile) || r.rep.Disk == nil || r.rep.Disk.Path != "/dev/nvme0n1" {
		t.Fatalf("report:\n%s", r.stdout)
	}
	rec, err := kexec.ReadRecord(hostroot.Root{Dir: d.root})
	if err != nil || !rec.Jumped || rec.Cmdline != kexecCmdline || rec.Kernel.SHA256 != k.KernelSHA256 || rec.Initrd.SHA256 != k.InitrdSHA256 {
		t.Fatalf("record: %+v %v", rec, err)
	}
	if d.digest(t) != before {
		t.Fatal("kexec changed the disk")
	}
	// The report's shape: the fields the controller and the simulated world read.
	var raw struct {
		Kexec map[string]any `json:"kexec"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for key := range raw.Kexec {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	want := []string{"cmdlineBytes", "cmdlineSha256", "configSha256", "initrdBytes", "initrdSha256", "jumping", "kernelBytes", "kernelSha256",
		"layout", "loaded", "metalIso", "possible", "reason", "record", "source"}
	if !slices.Equal(keys, want) {
		t.Fatalf("kexec keys %v, want %v", keys, want)
	}
}

// --dry-run makes every check and the extraction, and loads nothing.
func TestKexecCLIDryRun(t *testing.T) {
	d := kexecHost(t, &faketree.Kexec{}, kexecCmdline, machineConfig)
	r := kexecRun(t, d.root, "--dry-run")
	wantCode(t, r, "")
	k := r.rep.Kexec
	if !r.rep.DryRun || !k.Possible || k.Loaded || k.Jumping || k.KernelSHA256 != digestOf(d.linux) || k.Record != "" {
		t.Fatalf("dry run:\n%s", r.stdout)
	}
	if _, err := kexec.ReadRecord(hostroot.Root{Dir: d.root}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the dry run loaded: %v", err)
	}
	// A dry run predicts the host's refusal too.
	d = kexecHost(t, &faketree.Kexec{Lockdown: "integrity"}, kexecCmdline, machineConfig)
	wantCode(t, kexecRun(t, d.root, "--dry-run"), report.CodeKexecLockdown)
}

// Every refusal: its code and exit status, nothing recorded, the disk as
// it was; the dry run predicts each one but the syscall's own.
func TestKexecCLIRefusals(t *testing.T) {
	for _, c := range []struct {
		name    string
		k       *faketree.Kexec
		cmdline string
		config  []byte
		args    []string
		code    string
		// atLoad: the syscall refuses, which a dry run cannot see.
		atLoad bool
	}{
		{"sysctl", &faketree.Kexec{Disabled: true}, kexecCmdline, machineConfig, nil, report.CodeKexecDisabled, false},
		{"lockdown", &faketree.Kexec{Lockdown: "confidentiality"}, kexecCmdline, machineConfig, nil, report.CodeKexecLockdown, false},
		{"SecureBoot", &faketree.Kexec{SecureBoot: true}, kexecCmdline, machineConfig, nil, report.CodeKexecSecureBoot, false},
		{"no kexec", nil, kexecCmdline, machineConfig, nil, report.CodeKexecUnsupported, false},
		{"ENOSYS", &faketree.Kexec{Refuse: "ENOSYS"}, kexecCmdline, machineConfig, nil, report.CodeKexecUnsupported, true},
		{"EBUSY", &faketree.Kexec{Refuse: "EBUSY"}, kexecCmdline, machineConfig, nil, report.CodeKexecBusy, true},
		{"EPERM", &faketree.Kexec{Refuse: "EPERM"}, kexecCmdline, machineConfig, nil, report.CodeKexecNotPermitted, true},
		{"EKEYREJECTED", &faketree.Kexec{Refuse: "EKEYREJECTED"}, kexecCmdline, machineConfig, nil, report.CodeKexecSignatureRequired, true},
		{"EBADMSG", &faketree.Kexec{Refuse: "EBADMSG"}, kexecCmdline, machineConfig, nil, report.CodeKexecSignatureRequired, true},
		{"no UKI", &faketree.Kexec{}, "", nil, nil, report.CodeKexecNoKernel, false},
		{"metal-iso without config", &faketree.Kexec{}, kexecCmdline, nil, nil, report.CodeConfigNotVerified, false},
		{"another config", &faketree.Kexec{}, kexecCmdline, machineConfig, []string{"--config-sha256", digestOf([]byte("other"))}, report.CodeConfigNotVerified, false},
		{"bad --config-sha256", &faketree.Kexec{}, kexecCmdline, machineConfig, []string{"--config-sha256", "xyz"}, report.CodeInvalidArgument, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := kexecHost(t, c.k, c.cmdline, c.config)
			before := d.digest(t)
			for _, dry := range []bool{true, false} {
				args := c.args
				if dry {
					args = append(slices.Clone(args), "--dry-run")
				}
				r := kexecRun(t, d.root, args...)
				if dry && c.atLoad {
					wantCode(t, r, "")
					continue
				}
				wantCode(t, r, c.code)
				if r.rep.Kexec.Loaded || r.rep.Kexec.Jumping {
					t.Fatalf("refused but loaded:\n%s", r.stdout)
				}
				if report.KexecFallback(c.code) && (r.code != 8 || r.rep.Kexec.Possible || r.rep.Kexec.Code != c.code || !strings.Contains(r.rep.Error.Message, "nothing was loaded")) {
					t.Fatalf("exit %d:\n%s", r.code, r.stdout)
				}
			}
			if _, err := kexec.ReadRecord(hostroot.Root{Dir: d.root}); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("refused but recorded a load: %v", err)
			}
			if d.digest(t) != before {
				t.Fatal("the refusal changed the disk")
			}
		})
	}
}

// A disk write did not verify (no valid primary GPT: write wipes it on a
// failure) is refused before anything is extracted; so is a bare kexec.
func TestKexecCLIUnverifiedDisk(t *testing.T) {
	d := kexecHost(t, &faketree.Kexec{}, kexecCmdline, machineConfig)
	f, err := os.OpenFile(filepath.Join(d.root, "dev", "nvme0n1"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(make([]byte, 512), 512) // the primary GPT header, as a failed write leaves it
	f.Close()
	r := kexecRun(t, d.root)
	wantCode(t, r, report.CodeDiskNotImaged)
	if r.code != 5 {
		t.Fatalf("exit %d", r.code)
	}
	var out bytes.Buffer
	if code := Main(context.Background(), []string{"kexec"}, nil, &out, &out); code != 2 || !strings.Contains(out.String(), "--disk is required") {
		t.Fatalf("bare kexec: %d %s", code, out.String())
	}
}

// inspect says whether kexec is possible on the host, and why not.
func TestKexecInspect(t *testing.T) {
	for _, c := range []struct {
		k    *faketree.Kexec
		code string
	}{
		{&faketree.Kexec{}, ""},
		{&faketree.Kexec{SecureBoot: true}, report.CodeKexecSecureBoot},
		{nil, report.CodeKexecUnsupported},
	} {
		d := kexecHost(t, c.k, kexecCmdline, nil)
		r := inspect(t, d.root)
		k := r.Kexec
		if k == nil || k.Possible != (c.code == "") || k.Code != c.code || k.Reason == "" || k.Loaded || !r.OK {
			t.Fatalf("%+v: inspect's kexec %+v", c.k, k)
		}
	}
}

// The built binary, run as the simulated rescue hosts run it (a fake root
// in EM_IMAGER_SYSROOT, over a pipe): it records the jump and exits 0, as
// a real host's session would end after one.
func TestKexecBinaryFakeRoot(t *testing.T) {
	bin := sharedBinary(t)
	d := kexecHost(t, &faketree.Kexec{}, kexecCmdline, machineConfig)
	cmd := exec.Command(bin, "kexec", "--disk", "/dev/nvme0n1", "--jump-delay", "0")
	cmd.Env = append(os.Environ(), hostroot.EnvVar+"="+d.root)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("em-imager kexec: %v\n%s", err, out)
	}
	r, err := report.Parse(out)
	if err != nil || !r.OK || !r.Kexec.Jumping || strings.Contains(string(out), kexecSecret) {
		t.Fatalf("report %v:\n%s", err, out)
	}
	if rec, err := kexec.ReadRecord(hostroot.Root{Dir: d.root}); err != nil || !rec.Jumped || rec.Cmdline != kexecCmdline {
		t.Fatalf("record: %+v %v", rec, err)
	}
}
