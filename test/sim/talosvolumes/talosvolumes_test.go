package talosvolumes

import (
	"os"
	"strings"
	"testing"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/blockdev"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/talosgen"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/hardware"
)

// machine is an EM-I226E-NVME (2 x 960 GB, 2 x 7.68 TB) with disk files
// 1/100000 of the offer's sizes, the offer's sizes, and em-imager's report
// on it (its real disk listing on the fake sysfs).
func machine(t *testing.T) (*hardware.Tree, []int64, *report.Report) {
	t.Helper()
	offer, err := hardware.RecordedOffer("EM-I226E-NVME")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := hardware.FromOffer(offer, []string{"b4:83:51:0f:6d:a0"}, "srv-1", 100000)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := hardware.Create(t.TempDir(), spec)
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	for _, d := range offer.Disks {
		sizes = append(sizes, int64(d.Capacity))
	}
	disks, err := blockdev.Disks(hostroot.Root{Dir: tree.Sysroot})
	if err != nil {
		t.Fatal(err)
	}
	hw := &report.Report{Version: report.Version, Command: "write", OK: true, Disks: disks,
		NICs: []report.NIC{{Name: "eth0", MAC: "b4:83:51:0f:6d:a0", PermanentMAC: "b4:83:51:0f:6d:a0", LinkUp: true, HasDefaultRoute: true}}}
	for i, d := range disks {
		if d.Name == tree.InstallDisk().Name {
			hw.Disk = &disks[i]
		}
	}
	if hw.Disk == nil || len(disks) != 4 {
		t.Fatalf("report: install disk %v among %d disks", hw.Disk, len(disks))
	}
	return tree, sizes, hw
}

func render(t *testing.T, hw *report.Report, policy localdisks.Policy) coreconfig.Provider {
	t.Helper()
	join, err := talosgen.NewClusterJoinMaterial("https://k8s.example.test:6443", "c")
	if err != nil {
		t.Fatal(err)
	}
	nc := &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{corev1.LabelInstanceTypeStable: "EM-I226E-NVME"}},
		Status:     karpv1.NodeClaimStatus{ProviderID: "scaleway-em://fr-par-2/srv-1"},
	}
	out, err := talosgen.Render(join, nc, talosgen.NodeSettings{LocalDisks: string(policy)}, hw, talosgen.Network{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := configloader.NewFromBytes(out.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Under Ephemeral, talosgen's selector puts EPHEMERAL on a 7.68 TB disk,
// and the next boot finds it there again (located, not provisioned).
func TestEphemeralLandsOnTheLargeDisk(t *testing.T) {
	tree, sizes, hw := machine(t)
	cfg := render(t, hw, localdisks.Ephemeral)
	for boot := range 2 {
		disks, err := Disks(tree, sizes)
		if err != nil {
			t.Fatal(err)
		}
		eph, others := Manage(cfg, disks, 0)
		if eph.Err != nil || eph.Disk < 0 || sizes[eph.Disk] != 7680e9 {
			t.Fatalf("boot %d: EPHEMERAL on disk %d (%v), want a 7.68 TB disk", boot, eph.Disk, eph.Err)
		}
		if eph.Provisioned != (boot == 0) || len(others) != 0 {
			t.Errorf("boot %d: provisioned=%v others=%v", boot, eph.Provisioned, others)
		}
	}
}

// Unused keeps EPHEMERAL on the system disk; UserVolumes gives each other
// disk its own volume.
func TestUnusedAndUserVolumes(t *testing.T) {
	tree, sizes, hw := machine(t)
	disks, _ := Disks(tree, sizes)
	if eph, _ := Manage(render(t, hw, localdisks.Unused), disks, 0); eph.Disk != 0 || eph.Err != nil {
		t.Fatalf("Unused: EPHEMERAL on disk %d (%v), want the system disk 0", eph.Disk, eph.Err)
	}

	tree, sizes, hw = machine(t)
	disks, _ = Disks(tree, sizes)
	_, vols := Manage(render(t, hw, localdisks.UserVolumes), disks, 0)
	used := map[int]bool{}
	for _, v := range vols {
		if v.Err != nil || v.Disk <= 0 || used[v.Disk] || !strings.HasPrefix(v.Label, "u-data") {
			t.Errorf("user volume %+v", v)
		}
		used[v.Disk] = true
	}
	if len(vols) != 3 {
		t.Fatalf("%d user volumes, want 3", len(vols))
	}
}

// A previous tenant's filesystem on the large disk: Talos refuses to
// provision there (what write --wipe-other-disks is for).
func TestLeftoverSignatureRefused(t *testing.T) {
	tree, sizes, hw := machine(t)
	cfg := render(t, hw, localdisks.Ephemeral)
	disks, _ := Disks(tree, sizes)
	for _, d := range disks {
		if sizes[d.Index] == 7680e9 {
			f, err := os.OpenFile(d.File, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("XFSB"), 0); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	eph, _ := Manage(cfg, disks, 0)
	if eph.Err == nil || !strings.Contains(eph.Err.Error(), "wrong format") {
		t.Fatalf("EPHEMERAL %+v, want refused for a wrong format", eph)
	}
}
