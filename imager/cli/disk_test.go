package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/faketree"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// The tests of this file each hold one of the ways the disk could be
// chosen or guarded wrongly, on fake host trees; loop_test.go does the same
// on real block devices.

func buildHost(t *testing.T, h faketree.Host) string {
	t.Helper()
	dir := faketree.DirectIODir(t)
	if err := faketree.Build(dir, h); err != nil {
		t.Fatal(err)
	}
	return dir
}

func inspect(t *testing.T, root string, args ...string) *report.Report {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), append([]string{"inspect", "--sysroot", root}, args...), nil, &out, &errb)
	rep, err := report.Parse(out.Bytes())
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, out.String())
	}
	if code != report.ExitCode(codeOf(rep)) {
		t.Fatalf("inspect exit %d for %s", code, out.String())
	}
	return rep
}

func codeOf(r *report.Report) string {
	if r.Error == nil {
		return ""
	}
	return r.Error.Code
}

func rejectedReason(r *report.Report, path string) string {
	for _, d := range r.RejectedDisks {
		if d.Path == path {
			return d.Reason
		}
	}
	return ""
}

// TestInspectAndWriteChooseAlike: inspect shows the disk write --disk auto
// takes, given the same --image-size or none, whether or not the server
// answers Range requests (which lets em-imager read the xz index).
func TestInspectAndWriteChooseAlike(t *testing.T) {
	fixtures(t)
	assertChooseAlike(t, func() string {
		return buildHost(t, faketree.Host{Disks: []faketree.Disk{
			{Name: "nvme0n1", Size: 64 << 20},
			{Name: "nvme1n1", Size: 96 << 20},
		}})
	}, func(t *testing.T, root string, r run) {
		assertImage(t, root, strings.TrimPrefix(r.rep.Disk.Path, "/dev/"))
	})
}

// assertChooseAlike runs inspect, then write --disk auto, each on a fresh
// host from mk, with and without --image-size, against servers with and
// without Range: write must take inspect's disk, which written then checks.
func assertChooseAlike(t *testing.T, mk func() string, written func(t *testing.T, root string, r run)) {
	t.Helper()
	for _, size := range []string{"", fmt.Sprint(imageSize)} {
		var sizeArgs []string
		if size != "" {
			sizeArgs = []string{"--image-size", size}
		}
		want := inspect(t, mk(), sizeArgs...).Disk
		for _, mode := range []string{"", "norange"} {
			t.Run(fmt.Sprintf("size=%q,server=%q", size, mode), func(t *testing.T) {
				srv := newServer(t)
				srv.mode.Store(mode)
				root := mk()
				r := write(t, root, append([]string{"--image", srv.url("xz"), "--sha256", rawSHA}, sizeArgs...)...)
				wantCode(t, r, "")
				if r.rep.Disk.Path != want.Path || r.rep.Disk.Rule != want.Rule || want.Rule == "" {
					t.Fatalf("write chose %s (%s), inspect %s (%s)", r.rep.Disk.Path, r.rep.Disk.Reason, want.Path, want.Reason)
				}
				written(t, root, r)
			})
		}
	}
}

// TestRootDiskByNumbers: /proc/mounts says /dev/root (a kernel that mounted
// root= itself); the root disk would be auto's pick by size, and must not be.
func TestRootDiskByNumbers(t *testing.T) {
	fixtures(t)
	srv := newServer(t)
	root := buildHost(t, faketree.Host{
		Disks: []faketree.Disk{
			{Name: "nvme0n1", Size: 64 << 20, Partitions: []string{"nvme0n1p1", "nvme0n1p2"}},
			{Name: "nvme1n1", Size: 96 << 20},
		},
		Mounts:       []string{"/dev/root / ext4", "tmpfs /run tmpfs"},
		MountDevices: map[string]string{"/dev/root": "nvme0n1p2"},
	})
	oldInstall(t, filepath.Join(root, "dev", "nvme0n1"))
	before := diskBytes(t, root, "nvme0n1")
	rep := inspect(t, root, "--image-size", fmt.Sprint(imageSize))
	if rep.Disk == nil || rep.Disk.Path != "/dev/nvme1n1" || !strings.Contains(rejectedReason(rep, "/dev/nvme0n1"), "running system's root") {
		t.Fatalf("inspect: disk %+v, rejected %+v", rep.Disk, rep.RejectedDisks)
	}
	r := write(t, root, "--image", srv.url("xz"), "--sha256", rawSHA, "--image-size", fmt.Sprint(imageSize))
	wantCode(t, r, "")
	if r.rep.Disk.Path != "/dev/nvme1n1" || !bytes.Equal(diskBytes(t, root, "nvme0n1"), before) {
		t.Fatalf("write took %s; the running system's disk must stay as it was", r.rep.Disk.Path)
	}
	r = write(t, root, "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", "/dev/nvme0n1")
	wantCode(t, r, report.CodeDiskBusy)
	if !bytes.Equal(diskBytes(t, root, "nvme0n1"), before) {
		t.Fatal("a refused write changed the disk")
	}
}

// TestRefusedRunLeavesDiskAsItWas: what only the image can tell (its GPT's
// sector size, its size when nothing declared it) is checked before the
// first byte is written: the old partition table survives a refusal.
func TestRefusedRunLeavesDiskAsItWas(t *testing.T) {
	fixtures(t)
	for _, c := range []struct {
		name, disk, mode, code string
		size                   int64
		sector                 int
	}{
		{"512-byte image on a 4Kn disk", "nvme2n1", "", report.CodeDiskUnsuitable, 64 << 20, 4096},
		// No Range, so no xz index: the image's GPT says how big it is.
		{"image larger than the disk, size unknown", "nvme3n1", "norange", report.CodeDiskTooSmall, 16 << 20, 512},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newServer(t)
			srv.mode.Store(c.mode)
			root := host(t, faketree.Disk{Name: c.disk, Size: c.size, SectorSize: c.sector})
			oldInstall(t, filepath.Join(root, "dev", c.disk))
			before := diskBytes(t, root, c.disk)
			r := write(t, root, "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", "/dev/"+c.disk)
			wantCode(t, r, c.code)
			if !bytes.Equal(diskBytes(t, root, c.disk), before) {
				t.Fatal("the refused run changed the disk")
			}
			if !strings.Contains(r.rep.Error.Message, "nothing was written") || strings.Contains(r.rep.Error.Message, "wiped") {
				t.Fatalf("message: %s", r.rep.Error.Message)
			}
		})
	}
}

// TestByIDLink: --disk /dev/disk/by-id/... is the device it points at, with
// every check (here: a mounted partition) on that device.
func TestByIDLink(t *testing.T) {
	fixtures(t)
	srv := newServer(t)
	root := buildHost(t, faketree.Host{
		Disks: []faketree.Disk{
			{Name: "nvme0n1", Size: 64 << 20, Partitions: []string{"nvme0n1p1"}},
			{Name: "nvme1n1", Size: 64 << 20, Model: "SAMSUNG MZQL2960HCJR-00A07", Serial: "S64FNE0R654321"},
		},
		Mounts: []string{"/dev/nvme0n1p1 /var/lib/data ext4"},
	})
	byID := filepath.Join(root, "dev", "disk", "by-id")
	os.MkdirAll(byID, 0o755)
	os.Symlink("../../nvme0n1", filepath.Join(byID, "nvme-SAMSUNG_MZQL2960HCJR-00A07_S64FNE0R123456"))
	os.Symlink("../../nvme1n1", filepath.Join(byID, "nvme-SAMSUNG_MZQL2960HCJR-00A07_S64FNE0R654321"))
	oldInstall(t, filepath.Join(root, "dev", "nvme0n1"))
	before := diskBytes(t, root, "nvme0n1")
	r := write(t, root, "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", "/dev/disk/by-id/nvme-SAMSUNG_MZQL2960HCJR-00A07_S64FNE0R123456")
	wantCode(t, r, report.CodeDiskBusy)
	if !strings.Contains(r.rep.Error.Message, "mounted on /var/lib/data") || !bytes.Equal(diskBytes(t, root, "nvme0n1"), before) {
		t.Fatalf("message %q; the disk must be untouched", r.rep.Error.Message)
	}
	link := "/dev/disk/by-id/nvme-SAMSUNG_MZQL2960HCJR-00A07_S64FNE0R654321"
	r = write(t, root, "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", link)
	wantCode(t, r, "")
	if d := r.rep.Disk; d.Path != "/dev/nvme1n1" || d.Requested != link || d.Serial != "S64FNE0R654321" || d.SizeBytes != 64<<20 || d.Rule != report.RuleNamed {
		t.Fatalf("disk %+v", d)
	}
	assertImage(t, root, "nvme1n1")
}

// TestFailureWipesEveryGPTAndReports: an image written earlier (its backup
// GPT where it ended) is left without any GPT header by a later corrupt
// write; the failed run's report says how far it got and how; progress
// messages carry the current phase and byte counts.
func TestFailureWipesEveryGPTAndReports(t *testing.T) {
	fixtures(t)
	srv := newServer(t)
	root := host(t)
	r := write(t, root, "--image", srv.url("raw"), "--sha256", rawSHA, "--disk", "/dev/nvme0n1")
	wantCode(t, r, "")
	if i := bytes.LastIndex(diskBytes(t, root, "nvme0n1"), []byte("EFI PART")); i != imageSize-512 {
		t.Fatalf("the first image's backup GPT header is at %d", i)
	}
	srv.mode.Store("flip")
	r = write(t, root, "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", "/dev/nvme0n1")
	wantCode(t, r, report.CodeCorruptInput)
	assertNoGPT(t, root, "nvme0n1")
	if im := r.rep.Image; im.RawBytes < 1<<20 || !im.DirectIO || im.RawSHA256 != "" || im.Verified {
		t.Fatalf("failed run's image report: %+v", im)
	}

	// A resume message during the write names the phase and the bytes so far.
	srv = newServer(t) // drop-once drops the server's first request
	srv.mode.Store("drop-once")
	root = host(t)
	r = write(t, root, "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", "/dev/nvme0n1")
	wantCode(t, r, "")
	at := regexp.MustCompile(`download interrupted; resuming" byte=(\d+)`)
	found := false
	for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		var p report.Progress
		json.Unmarshal([]byte(line), &p)
		if m := at.FindStringSubmatch(p.Message); m != nil {
			found = true
			n, _ := strconv.ParseInt(m[1], 10, 64)
			if p.BytesIn != n || p.TotalIn != int64(len(files["xz"])) || (p.Phase != "download" && p.Phase != "write") {
				t.Fatalf("resume message %+v: bytesIn must be the byte it resumes at, phase the current one", p)
			}
		}
	}
	if !found {
		t.Fatalf("no resume message: %s", r.stderr)
	}
}
