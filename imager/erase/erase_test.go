package erase

import (
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/wipe"

	"bytes"
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// disk64 is a 64 MiB file of random bytes with a GPT (sgdisk): partition 1
// of 8 MiB at 1 MiB, partition 2 of 40 MiB after it; a canary in the middle
// of each.
func disk64(t *testing.T) (string, [2]string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk.img")
	b := make([]byte, 64<<20)
	rand.Read(b)
	c := [2]string{"CANARY-small-partition-7d1e", "CANARY-large-partition-9b2f"}
	copy(b[5<<20:], c[0])
	copy(b[29<<20:], c[1])
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sgdisk", "-n1:0:+8M", "-n2:0:+40M", p).CombinedOutput(); err != nil {
		t.Fatalf("sgdisk: %v\n%s", err, out)
	}
	return p, c
}

func contains(t *testing.T, path, s string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(b, []byte(s))
}

// TestEraseAutoFallsBackWhenDiscardKeepsData: a device that accepts discard
// and keeps its data (discard is a hint) is caught by the read-back, and
// auto overwrites instead, saying why. Small partitions are written whole,
// a large one at its ends only, which the result says; --full leaves
// nothing. --method discard on such a device fails unverified.
func TestEraseAutoFallsBackWhenDiscardKeepsData(t *testing.T) {
	p, c := disk64(t)
	keeps := func(*os.File, bool, bool, int64, int64) error { return nil }
	_, err := Disk(context.Background(), p, 0, Options{Method: MethodDiscard, discard: keeps})
	if err == nil || !strings.Contains(err.Error(), ErrUnverified.Error()) {
		t.Fatalf("--method discard on a device that keeps data: %v", err)
	}
	res, err := Disk(context.Background(), p, 0, Options{discard: keeps, WholeBelow: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if res.Method != MethodOverwrite || !strings.Contains(res.Fallback, "reads back data") || !res.Verified || res.Complete || res.OldPartitions != 2 || !strings.Contains(res.Left, "1 partition(s) larger than 16 MiB") {
		t.Fatalf("result %+v", res)
	}
	if contains(t, p, c[0]) || !contains(t, p, c[1]) {
		t.Fatal("the small partition must be zeroed whole, the large one's middle left")
	}
	if contains(t, p, "EFI PART") {
		t.Fatal("a GPT header is left")
	}
	// The table is gone now: --full still erases everything.
	res, err = Disk(context.Background(), p, 0, Options{Method: MethodOverwrite, Full: true})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if res.Method != MethodOverwriteFull || !res.Complete || res.Left != "" || bytes.Count(b, []byte{0}) != len(b) {
		t.Fatalf("--full: %+v", res)
	}
}

// TestEraseDiscardFile: on a regular file, discard punches the blocks out:
// verified, complete, no canary left.
func TestEraseDiscardFile(t *testing.T) {
	p, c := disk64(t)
	res, err := Disk(context.Background(), p, 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Method != MethodDiscard || !res.Verified || !res.Complete || res.Bytes != 64<<20 || res.Fallback != "" || res.Seconds <= 0 {
		t.Fatalf("result %+v", res)
	}
	if contains(t, p, c[0]) || contains(t, p, c[1]) {
		t.Fatal("a canary survived the discard")
	}
}

func TestEraseRanges(t *testing.T) {
	got := subtract(wipe.MergeRanges([][2]int64{{0, 10}, {20, 30}}, 100, 1), wipe.MergeRanges([][2]int64{{5, 22}}, 100, 1))
	if len(got) != 2 || got[0] != [2]int64{0, 5} || got[1] != [2]int64{22, 30} {
		t.Fatalf("subtract: %v", got)
	}
	if got := intersect([][2]int64{{0, 10}}, [][2]int64{{5, 20}}); len(got) != 1 || got[0] != [2]int64{5, 10} {
		t.Fatalf("intersect: %v", got)
	}
}
