package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/faketree"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/loopdev"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// snapshot reads every disk file of a fake host, to compare byte for byte.
func snapshot(t *testing.T, root string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	ents, err := os.ReadDir(filepath.Join(root, "dev"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Type().IsRegular() {
			out[e.Name()] = diskBytes(t, root, e.Name())
		}
	}
	return out
}

func sameDisks(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func errCode(r run) string {
	if r.rep.Error == nil {
		return ""
	}
	return r.rep.Error.Code
}

// TestDryRunPredicts: for every case, write --dry-run writes nothing on any
// disk and says what the real run with the same flags then does: the same
// disk, the same refusal (code and exit status), or a start.
func TestDryRunPredicts(t *testing.T) {
	fixtures(t)
	busy := func(t *testing.T) string {
		return buildHost(t, faketree.Host{
			Disks:  []faketree.Disk{{Name: "nvme0n1", Size: 64 << 20, Partitions: []string{"nvme0n1p1"}}},
			Mounts: []string{"tmpfs / tmpfs", "/dev/nvme0n1p1 /mnt xfs"},
		})
	}
	fourK := func(t *testing.T) string {
		return host(t, faketree.Disk{Name: "nvme2n1", Size: 64 << 20, SectorSize: 4096})
	}
	cases := []struct {
		name string
		host func(t *testing.T) string
		mode string
		args func(s *server) []string
		code string
	}{
		{"auto, xz", nil, "", func(s *server) []string { return []string{"--image", s.url("xz"), "--sha256", rawSHA} }, ""},
		{"auto with the size: smallest fit", nil, "", func(s *server) []string {
			return []string{"--image", s.url("zst"), "--sha256", rawSHA, "--image-size", "24117248"}
		}, ""},
		{"raw image named disk", nil, "", func(s *server) []string {
			return []string{"--image", s.url("raw"), "--sha256", rawSHA, "--disk", "/dev/sda"}
		}, ""},
		{"disk too small", nil, "", func(s *server) []string {
			return []string{"--image", s.url("xz"), "--sha256", rawSHA, "--disk", "/dev/nvme1n1"}
		}, report.CodeDiskTooSmall},
		{"auto finds no disk big enough", nil, "", func(s *server) []string {
			return []string{"--image", s.url("xz"), "--sha256", rawSHA, "--image-size", "1073741824"}
		}, report.CodeDiskTooSmall},
		{"wrong format", nil, "", func(s *server) []string {
			return []string{"--image", s.url("xz"), "--sha256", rawSHA, "--format", "zstd"}
		}, report.CodeUnsupportedFormat},
		{"512-byte image on a 4Kn disk", fourK, "", func(s *server) []string {
			return []string{"--image", s.url("xz"), "--sha256", rawSHA, "--disk", "/dev/nvme2n1"}
		}, report.CodeDiskUnsuitable},
		{"missing disk", nil, "", func(s *server) []string {
			return []string{"--image", s.url("xz"), "--sha256", rawSHA, "--disk", "/dev/nvme7n1"}
		}, report.CodeDiskNotFound},
		{"USB stick named", nil, "", func(s *server) []string {
			return []string{"--image", s.url("xz"), "--sha256", rawSHA, "--disk", "/dev/sdb"}
		}, ""},
		{"virtual disk named", nil, "", func(s *server) []string {
			return []string{"--image", s.url("xz"), "--sha256", rawSHA, "--disk", "/dev/loop0"}
		}, report.CodeDiskUnsuitable},
		{"disk in use", busy, "", func(s *server) []string { return []string{"--image", s.url("xz"), "--sha256", rawSHA} }, report.CodeDiskBusy},
		{"404", nil, "404", func(s *server) []string { return []string{"--image", s.url("xz"), "--sha256", rawSHA} }, report.CodeSourceRejected},
		{"truncated raw image on a small disk", nil, "truncate", func(s *server) []string {
			return []string{"--image", s.url("raw"), "--sha256", rawSHA, "--disk", "/dev/nvme0n1"}
		}, report.CodeDiskTooSmall},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := newServer(t)
			srv.mode.Store(c.mode)
			mk := c.host
			if mk == nil {
				mk = func(t *testing.T) string {
					root := host(t)
					oldInstall(t, filepath.Join(root, "dev", "nvme0n1"))
					return root
				}
			}
			root := mk(t)
			if c.name == "truncated raw image on a small disk" {
				// The GPT in the first MiB says how far the image reaches:
				// the dry run sees it in the first MiB alone.
				if err := os.Truncate(filepath.Join(root, "dev", "nvme0n1"), 16<<20); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshot(t, root)
			dry := write(t, root, append(c.args(srv), "--dry-run")...)
			if !sameDisks(before, snapshot(t, root)) {
				t.Fatal("the dry run changed a disk")
			}
			if !dry.rep.DryRun || (c.code == "" && (!dry.rep.OK || dry.code != 0)) {
				t.Fatalf("dry run: %s", dry.stdout)
			}
			if strings.Contains(dry.stderr, `"phase":"failed"`) {
				t.Fatalf("a dry run's refusal printed a progress line:\n%s", dry.stderr)
			}
			real := write(t, root, c.args(srv)...)
			if errCode(dry) != errCode(real) || dry.code != real.code {
				t.Fatalf("the dry run said %q (exit %d), the real run %q (exit %d)\ndry: %s\nreal: %s", errCode(dry), dry.code, errCode(real), real.code, dry.stdout, real.stdout)
			}
			wantCode(t, real, c.code)
			if (dry.rep.Disk == nil) != (real.rep.Disk == nil) || (dry.rep.Disk != nil && *dry.rep.Disk != *real.rep.Disk) {
				t.Fatalf("the dry run chose %+v, the real run %+v", dry.rep.Disk, real.rep.Disk)
			}
			if c.code == "" {
				assertImage(t, root, filepath.Base(real.rep.Disk.Path))
			} else if !sameDisks(before, snapshot(t, root)) {
				t.Fatal("the refused run changed a disk")
			}
		})
	}
}

// A wrong digest shows only once the whole image was read: the dry run
// cannot see it, and says so by starting (the real run then fails safely).
func TestDryRunCannotSeeTheDigest(t *testing.T) {
	fixtures(t)
	srv := newServer(t)
	root := host(t)
	r := write(t, root, "--image", srv.url("xz"), "--sha256", strings.Repeat("0", 64), "--dry-run")
	wantCode(t, r, "")
	if !r.rep.DryRun || r.rep.Image.RawSHA256 != "" || r.rep.Image.Verified {
		t.Fatalf("dry run report: %s", r.stdout)
	}
}

// TestLoopDryRun: on real loop devices (through a fake sysfs whose disk is
// the loop device's node) the dry run opens the device the way the real
// run does: a mounted partition is refused by the kernel's exclusive open,
// and a free device is left byte for byte as it was.
func TestLoopDryRun(t *testing.T) {
	fixtures(t)
	srv := newServer(t)
	d := loopdev.Attach(t, 64<<20, 512)
	parts := d.Partition(t, 16, 16)
	mnt := loopdev.Mount(t, parts[1])
	root := buildHost(t, faketree.Host{Disks: []faketree.Disk{{Name: "nvme0n1", Size: d.Size, Device: d.Path}}})
	args := []string{"--image", srv.url("xz"), "--sha256", rawSHA}
	// The fake sysfs does not know the mount: the kernel's O_EXCL does.
	before := d.Bytes(t)
	dry := write(t, root, append(args, "--dry-run")...)
	wantCode(t, dry, report.CodeDiskBusy)
	real := write(t, root, args...)
	wantCode(t, real, report.CodeDiskBusy)
	if !bytes.Equal(d.Bytes(t), before) {
		t.Fatal("a refused run changed the device")
	}
	loopdev.Unmount(t, mnt)
	before = d.Bytes(t) // unmounting wrote the filesystem's superblock
	dry = write(t, root, append(args, "--dry-run")...)
	wantCode(t, dry, "")
	if !bytes.Equal(d.Bytes(t), before) {
		t.Fatal("the dry run changed the device")
	}
	real = write(t, root, args...)
	wantCode(t, real, "")
	if !holds(t, d, rawImage) || real.rep.Disk.Path != dry.rep.Disk.Path {
		t.Fatalf("the device does not hold the image, or another disk was written (%s, predicted %s)", real.rep.Disk.Path, dry.rep.Disk.Path)
	}
}
