package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/configpart"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/faketree"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/testimage"
)

// The marker must never reach argv, stdout or stderr.
const configSecret = "topsecret-trustd-token"

var machineConfig = []byte("version: v1alpha1\nmachine:\n  type: worker\n  token: " + configSecret + "\n")

// configHost is a fake rescue host with one 256 MiB NVMe disk.
func configHost(t *testing.T) string {
	t.Helper()
	dir := faketree.DirectIODir(t)
	if err := faketree.Build(dir, faketree.Host{Disks: []faketree.Disk{{Name: "nvme0n1", Size: 256 << 20, Model: "SAMSUNG MZQL2960HCJR-00A07", Serial: "S64F"}}}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeConfigRun(t *testing.T, stdin *os.File, cfg []byte, args ...string) run {
	t.Helper()
	var in io.Reader = bytes.NewReader(cfg)
	if stdin != nil {
		in = stdin
	}
	r := mainReport(context.Background(), t, append([]string{"write-config"}, args...), in, configSecret) // the config
	if r.stderr != "" {
		t.Fatalf("write-config printed on stderr: %q", r.stderr)
	}
	return r
}

// The sequence the controller runs in rescue: write verifies the image,
// then write-config adds the config after it.
func TestWriteThenWriteConfig(t *testing.T) {
	root := configHost(t)
	img := filepath.Join(t.TempDir(), "metal-amd64.raw")
	sum, err := testimage.Write(img, testimage.Spec{Size: 32 << 20, DataBytes: 1 << 20, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	// write-config before the image is there: nothing to add to.
	wantCode(t, writeConfigRun(t, nil, machineConfig, "--disk", "/dev/nvme0n1", "--sysroot", root), report.CodeDiskNotImaged)

	wantCode(t, write(t, root, "--image", img, "--sha256", sum, "--disk", "/dev/nvme0n1"), "")
	r := writeConfigRun(t, nil, machineConfig, "--disk", "/dev/nvme0n1", "--sysroot", root)
	wantCode(t, r, "")
	want := sha256.Sum256(machineConfig)
	c := r.rep.Config
	if r.rep.Command != "write-config" || c == nil || c.SHA256 != hex.EncodeToString(want[:]) || c.Bytes != len(machineConfig) ||
		c.Partition != "metal-iso" || c.PartitionNumber != 7 || c.StartBytes != 32<<20 || c.SizeBytes != configpart.PartitionSize ||
		c.Filesystem != "vfat" || c.File != "config.yaml" || !c.Verified || c.Replaced {
		t.Fatalf("report: %s", r.stdout)
	}
	if r.rep.Disk == nil || r.rep.Disk.Path != "/dev/nvme0n1" || r.rep.Disk.Serial != "S64F" {
		t.Fatalf("disk in the report: %+v", r.rep.Disk)
	}
	got, _, err := configpart.Read(filepath.Join(root, "dev", "nvme0n1"), 0)
	if err != nil || !bytes.Equal(got, machineConfig) {
		t.Fatalf("config on the disk: %q %v", got, err)
	}
	// The image itself is untouched: its bytes after the first MiB (the
	// head holds the GPT, which now lists one more partition).
	disk := diskBytes(t, root, "nvme0n1")
	raw, _ := os.ReadFile(img)
	if !bytes.Equal(disk[1<<20:len(raw)-1<<20], raw[1<<20:len(raw)-1<<20]) {
		t.Fatal("write-config changed the image's partitions")
	}

	// Again, with another config: replaced, same partition.
	r = writeConfigRun(t, nil, []byte("version: v1alpha1\n"), "--disk", "/dev/nvme0n1", "--sysroot", root)
	wantCode(t, r, "")
	if !r.rep.Config.Replaced || r.rep.Config.PartitionNumber != 7 {
		t.Fatalf("second run: %s", r.stdout)
	}
}

func TestWriteConfigFailures(t *testing.T) {
	root := configHost(t)
	for _, c := range []struct {
		name string
		cfg  []byte
		args []string
		code string
	}{
		{"no disk", machineConfig, nil, report.CodeInvalidArgument},
		{"disk auto", machineConfig, []string{"--disk", "auto"}, report.CodeInvalidArgument},
		{"config as an argument", machineConfig, []string{"--disk", "/dev/nvme0n1", "--config", "x"}, report.CodeInvalidArgument},
		{"empty stdin", nil, []string{"--disk", "/dev/nvme0n1"}, report.CodeInvalidArgument},
		{"too large", bytes.Repeat([]byte("#"), configpart.MaxConfigSize+1), []string{"--disk", "/dev/nvme0n1"}, report.CodeInvalidArgument},
		{"unknown disk", machineConfig, []string{"--disk", "/dev/nvme7n1"}, report.CodeDiskNotFound},
		{"blank disk", machineConfig, []string{"--disk", "/dev/nvme0n1"}, report.CodeDiskNotImaged},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := writeConfigRun(t, nil, c.cfg, append([]string{"--sysroot", root}, c.args...)...)
			wantCode(t, r, c.code)
			if r.rep.Config != nil && r.rep.Config.Verified {
				t.Fatalf("report: %s", r.stdout)
			}
		})
	}
}

// A terminal on stdin means the operator forgot the pipe: refuse rather
// than wait for typing.
func TestWriteConfigTerminal(t *testing.T) {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	r := writeConfigRun(t, tty, nil, "--disk", "/dev/nvme0n1", "--sysroot", configHost(t))
	wantCode(t, r, report.CodeInvalidArgument)
	if !strings.Contains(r.rep.Error.Message, "stdin") {
		t.Fatalf("message: %s", r.rep.Error.Message)
	}
}

// The static binary, as the controller runs it over SSH: config on stdin,
// one JSON report on stdout, the disk given as a plain image file.
func TestWriteConfigBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "em-imager")
	build := exec.Command("go", "build", "-o", bin, "../cmd/em-imager")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	disk := filepath.Join(t.TempDir(), "disk.img")
	if _, err := testimage.Write(disk, testimage.Spec{Size: 32 << 20, SectorSize: 4096, Seed: 9}); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, 128<<20); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		stdin []byte
		code  string
	}{{machineConfig, ""}, {nil, report.CodeInvalidArgument}} {
		cmd := exec.Command(bin, "write-config", "--disk", disk)
		cmd.Stdin = bytes.NewReader(c.stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		exit := 0
		ee := &exec.ExitError{}
		if errors.As(err, &ee) {
			exit = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(&out)
		var rep report.Report
		if err := dec.Decode(&rep); err != nil || dec.More() {
			t.Fatalf("stdout is not one JSON object: %v", err)
		}
		got := ""
		if rep.Error != nil {
			got = rep.Error.Code
		}
		if got != c.code || exit != report.ExitCode(c.code) || strings.Contains(out.String()+errb.String(), configSecret) {
			t.Fatalf("code %q exit %d, want %q; stderr: %s", got, exit, c.code, errb.String())
		}
		if c.code == "" && (rep.Config == nil || !rep.Config.Verified || rep.Config.StartBytes != 32<<20) {
			t.Fatalf("report: %+v", rep.Config)
		}
	}
	var out bytes.Buffer
	help := exec.Command(bin, "write-config", "-h")
	help.Stdout = &out
	if err := help.Run(); err != nil || !strings.Contains(out.String(), "stdin") {
		t.Fatalf("write-config -h: %v %q", err, out.String())
	}
}
