package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/configpart"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/loopdev"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/testimage"
)

// formerNode lays out what a Talos node leaves on its disk, on a loop
// device over a file of random bytes: the image's GPT (EFI, BIOS, BOOT,
// META, STATE, EPHEMERAL), the metal-iso partition write-config adds, and
// a user volume after it. STATE, EPHEMERAL and the user volume get an ext4
// filesystem (Talos uses XFS, whose mkfs refuses filesystems under 300 MB)
// with files holding canaries where a node keeps its secrets; metal-iso's
// config.yaml holds one too. It returns the canaries, each found on the
// device before the erase.
func formerNode(t *testing.T) (*loopdev.Device, []string) {
	t.Helper()
	d := loopdev.Attach(t, 256<<20, 512)
	img, err := testimage.Bytes(testimage.Spec{Size: 128 << 20, DataBytes: 8 << 20, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(d.Path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(img, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	tag := fmt.Sprintf("%d", os.Getpid())
	canary := func(where string) string { return "CANARY-" + where + "-" + tag + "-a0f3b1c2d4e5" }
	config := "version: v1alpha1\nmachine:\n  token: " + canary("metal-iso") + "\n"
	if _, err := configpart.Write(context.Background(), d.Path, []byte(config), configpart.Options{SectorSize: 512}); err != nil {
		t.Fatal(err)
	}
	loopdev.Run(t, "sgdisk", "-n8:0:+32M", "-c8:u-data", d.Path)
	loopdev.Run(t, "partx", "-u", d.Path)
	files := map[int][2]string{
		5: {"config.yaml", canary("STATE")},
		6: {"var/lib/kubelet/pki/kubelet-client-current.pem", canary("EPHEMERAL")},
		8: {"db/secret.bin", canary("u-data")},
	}
	for n, file := range files {
		dir := loopdev.Mount(t, fmt.Sprintf("%sp%d", d.Path, n))
		p := filepath.Join(dir, file[0])
		os.MkdirAll(filepath.Dir(p), 0o755)
		// Several KiB of file data: the canary lands in data blocks, not
		// only in an inline inode.
		if err := os.WriteFile(p, bytes.Repeat([]byte(file[1]+"\n"), 300), 0o600); err != nil {
			t.Fatal(err)
		}
		loopdev.Unmount(t, dir)
	}
	canaries := []string{canary("metal-iso"), canary("STATE"), canary("EPHEMERAL"), canary("u-data")}
	if hits := canaryHits(t, d, canaries); len(hits) != 2*len(canaries) { // device and file
		t.Fatalf("before the erase, found only %v of %v", hits, canaries)
	}
	return d, canaries
}

// canaryHits scans the whole device and its backing file for each canary.
func canaryHits(t *testing.T, d *loopdev.Device, canaries []string) []string {
	t.Helper()
	dev := d.Bytes(t)
	file, err := os.ReadFile(d.File)
	if err != nil {
		t.Fatal(err)
	}
	var hits []string
	for _, c := range canaries {
		for name, b := range map[string][]byte{"device": dev, "backing file": file} {
			if i := bytes.Index(b, []byte(c)); i >= 0 {
				hits = append(hits, fmt.Sprintf("%s in the %s at %d", c, name, i))
			}
		}
	}
	return hits
}

func eraseRun(t *testing.T, args ...string) run {
	t.Helper()
	return mainReport(context.Background(), t, append([]string{"erase"}, args...), nil, "")
}

// TestLoopEraseDiscardCanaries: a loop device over a regular file takes
// discard (the kernel punches holes in the file): erase's default method
// discards the whole device, reads back zeroes, and no canary of the former
// node is left anywhere on the device or in its backing file.
func TestLoopEraseDiscardCanaries(t *testing.T) {
	d, canaries := formerNode(t)
	r := eraseRun(t, "--disk", d.Path, "--allow-virtual")
	wantCode(t, r, "")
	e := r.rep.Erased[0]
	if e.Path != d.Path || e.Method != report.EraseDiscard || !e.Verified || !e.Complete || e.Bytes != d.Size || e.Fallback != "" || e.OldPartitions != 8 {
		t.Fatalf("erase %+v", e)
	}
	// Every block of the 8 partitions' first and last MiB, the disk's ends
	// and the image's backup GPT area, plus the samples.
	if e.VerifiedBytes < 16<<20 {
		t.Fatalf("verified only %d bytes", e.VerifiedBytes)
	}
	if hits := canaryHits(t, d, canaries); len(hits) > 0 {
		t.Fatalf("after the discard: %v", hits)
	}
}

// TestLoopEraseOverwriteCanaries: --method overwrite (what a device without
// discard, an HDD, gets) writes every old partition of this disk whole (all
// are under 1 GiB) and leaves no canary; the space outside the partitions
// is left unless --full, which zeroes every byte of the device.
func TestLoopEraseOverwriteCanaries(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(fmt.Sprintf("full=%v", full), func(t *testing.T) {
			d, canaries := formerNode(t)
			args := []string{"--disk", d.Path, "--allow-virtual", "--method", "overwrite"}
			if full {
				args = append(args, "--full")
			}
			r := eraseRun(t, args...)
			wantCode(t, r, "")
			e := r.rep.Erased[0]
			if !e.Verified || e.Complete != full || e.Fallback != "" || (e.Left == "") != full {
				t.Fatalf("erase %+v", e)
			}
			if hits := canaryHits(t, d, canaries); len(hits) > 0 {
				t.Fatalf("after the overwrite: %v", hits)
			}
			b := d.Bytes(t)
			if full {
				if e.Method != report.EraseOverwriteFull || e.Bytes != d.Size || bytes.Count(b, []byte{0}) != len(b) {
					t.Fatalf("--full left non-zero bytes (%+v)", e)
				}
				return
			}
			// The random bytes after the user volume were never a
			// partition of this table: left, as the report says.
			if e.Method != report.EraseOverwrite || e.Bytes >= d.Size || !strings.Contains(e.Left, "outside") || bytes.Count(b[240<<20:250<<20], []byte{0}) == 10<<20 {
				t.Fatalf("erase %+v", e)
			}
		})
	}
}

// TestLoopEraseRefusesMounted: a disk with a mounted partition is refused
// before anything is erased, also when a free disk is named first.
func TestLoopEraseRefusesMounted(t *testing.T) {
	free := loopdev.Attach(t, 16<<20, 512)
	m := loopdev.Attach(t, 64<<20, 512)
	parts := m.Partition(t, 8, 16)
	loopdev.Mount(t, parts[1])
	before := free.Bytes(t)
	r := eraseRun(t, "--disk", free.Path, "--disk", m.Path, "--allow-virtual")
	wantCode(t, r, report.CodeDiskBusy)
	if !strings.Contains(r.rep.Error.Message, "nothing was erased") || !bytes.Equal(free.Bytes(t), before) {
		t.Fatalf("%s; the free disk must be untouched", r.rep.Error.Message)
	}
	r = eraseRun(t, "--disk", m.Path)
	wantCode(t, r, report.CodeDiskBusy)
}
