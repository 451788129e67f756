package talosgen

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	blockpb "github.com/siderolabs/talos/pkg/machinery/api/resource/definitions/block"
	"github.com/siderolabs/talos/pkg/machinery/cel"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog/snapshot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/hardware"
)

// offerReport is em-imager's report on a machine of offer, as the simulated
// hardware lays it out (serials, WWIDs; SATA serials from VPD pages, as the
// kernel shows them), with Talos on the disk --disk auto takes.
func offerReport(t *testing.T, name string, spec hardware.Spec) (*report.Report, []report.Disk) {
	t.Helper()
	hw := testReport()
	hw.Disk, hw.Disks = nil, nil
	ld := make([]localdisks.Disk, len(spec.Disks))
	for i, d := range spec.Disks {
		src := report.SerialFromSysfs
		if d.Transport == "sata" {
			src = report.SerialFromVPD
		}
		hw.Disks = append(hw.Disks, report.Disk{
			Path: "/dev/" + d.Name, Name: d.Name, SizeBytes: d.SizeBytes, Model: d.Model, Serial: d.Serial, SerialSource: src,
			WWID: d.WWID, BusPath: fmt.Sprintf("/pci0000:00/0000:00:%02x.0", i+1), LogicalSectorSize: d.LogicalBlockSize,
			Rotational: d.Rotational, Transport: d.Transport,
		})
		ld[i] = localdisks.Disk{SizeBytes: d.SizeBytes, Rotational: d.Rotational}
	}
	sys := hw.Disks[localdisks.SystemDisk(ld)]
	hw.Disk = &sys
	if len(hw.Disks) < 2 {
		t.Fatalf("%s: %d disks", name, len(hw.Disks))
	}
	return hw, slices.Clone(hw.Disks)
}

// diskSpec is the disk resource Talos builds for d (what CEL selectors see).
func diskSpec(d report.Disk) *blockpb.DiskSpec {
	s := &blockpb.DiskSpec{DevPath: d.Path, Size: uint64(d.SizeBytes), Model: d.Model, Wwid: d.WWID, BusPath: d.BusPath,
		Transport: d.Transport, Rotational: d.Rotational}
	if d.SerialSource == report.SerialFromSysfs {
		s.Serial = d.Serial
	}
	return s
}

// shuffleNames gives the disks each other's kernel names, as a reboot may.
func shuffleNames(disks []report.Disk, r *rand.Rand) []report.Disk {
	out := slices.Clone(disks)
	perm := r.Perm(len(out))
	for i := range out {
		out[i].Name, out[i].Path = disks[perm[i]].Name, disks[perm[i]].Path
	}
	return out
}

// Every multi-disk offer of the snapshot, under every policy: the config
// validates with machinery (Render), and each volume's selector matches
// exactly the disk the layout meant, whatever kernel names the disks have.
func TestEveryMultiDiskOfferUnderEveryPolicy(t *testing.T) {
	snap, err := snapshot.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	join := freshJoin(t)
	r := rand.New(rand.NewPCG(24, 24))
	for _, zone := range snap.Zones {
		for _, offer := range append(slices.Clone(zone.Hourly), zone.Monthly...) {
			if offer == nil || len(offer.Disks) < 2 || seen[offer.Name] {
				continue
			}
			seen[offer.Name] = true
			spec, err := hardware.FromOffer(offer, []string{"b4:83:51:0f:6d:a0"}, "srv-"+offer.Name, 1)
			if err != nil {
				t.Fatal(err)
			}
			for _, policy := range localdisks.Policies {
				t.Run(offer.Name+"/"+string(policy), func(t *testing.T) {
					hw, disks := offerReport(t, offer.Name, spec)
					want := expectedLayout(hw, policy)
					var first []VolumeFact
					for round := range 3 {
						if round > 0 {
							hw.Disks = shuffleNames(disks, r)
							for _, d := range hw.Disks {
								if d.WWID == hw.Disk.WWID {
									sys := d
									hw.Disk = &sys
								}
							}
						}
						out, err := Render(join, testNodeClaim("n"), NodeSettings{LocalDisks: string(policy)}, hw, testNetwork())
						if err != nil {
							t.Fatalf("render: %v", err)
						}
						f, err := ReadFacts(mustLoad(t, out.Config))
						if err != nil {
							t.Fatal(err)
						}
						if strings.Contains(f.InstallDisk, "/dev/") || f.InstallDisk != "wwid:"+hw.Disk.WWID {
							t.Errorf("install disk %q, want the system disk by WWID %s", f.InstallDisk, hw.Disk.WWID)
						}
						checkVolumes(t, f.Volumes, want, hw)
						if round == 0 {
							first = f.Volumes
						} else if !slices.Equal(first, f.Volumes) {
							t.Errorf("volumes changed with kernel names: %v, then %v", first, f.Volumes)
						}
						if got := f.NodeLabels[localdisks.LabelPolicy]; got != string(policy) {
							t.Errorf("label %s=%q", localdisks.LabelPolicy, got)
						}
					}
				})
			}
		}
	}
	if len(seen) < 30 {
		t.Fatalf("only %d multi-disk offers in the snapshot", len(seen))
	}
}

// expectedLayout is what each volume must hold: name -> WWID of its disk.
func expectedLayout(hw *report.Report, policy localdisks.Policy) map[string]string {
	var data []report.Disk
	for _, d := range hw.Disks {
		if d.WWID != hw.Disk.WWID {
			data = append(data, d)
		}
	}
	ld := make([]localdisks.Disk, len(data))
	for i, d := range data {
		ld[i] = localdisks.Disk{SizeBytes: d.SizeBytes, Rotational: d.Rotational, Key: "wwid:" + d.WWID}
	}
	l := localdisks.Plan(policy, ld)
	want := map[string]string{}
	if l.EphemeralDisk >= 0 {
		want["EPHEMERAL"] = data[l.EphemeralDisk].WWID
	}
	for _, v := range l.Volumes {
		want[v.Name] = data[v.Disk].WWID
	}
	return want
}

func checkVolumes(t *testing.T, got []VolumeFact, want map[string]string, hw *report.Report) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("volumes %v, want %d (%v)", got, len(want), want)
	}
	for _, v := range got {
		sel, err := cel.ParseBooleanExpression(v.Selector, celenv.DiskLocator())
		if err != nil {
			t.Fatalf("%s selector %q: %v", v.Name, v.Selector, err)
		}
		var matched []string
		for _, d := range hw.Disks {
			ok, err := sel.EvalBool(celenv.DiskLocator(), map[string]any{"disk": diskSpec(d), "system_disk": d.WWID == hw.Disk.WWID})
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				matched = append(matched, d.WWID)
			}
		}
		if len(matched) != 1 || matched[0] != want[v.Name] {
			t.Errorf("%s %s selector %q matches %v, want exactly %s", v.Kind, v.Name, v.Selector, matched, want[v.Name])
		}
	}
}

// A disk Talos cannot tell from its twin (no WWID, a serial only in a VPD
// page, no bus path) cannot carry a volume: Render says so instead of
// naming it by kernel name.
func TestVolumeOnDiskWithoutStableIdentity(t *testing.T) {
	hw := testReport()
	twin := report.Disk{Path: "/dev/sdb", Name: "sdb", SizeBytes: 4e12, Serial: "ZL2ABC", SerialSource: report.SerialFromVPD, Transport: "sata", LogicalSectorSize: 512}
	hw.Disks = []report.Disk{*hw.Disk, twin}
	_, err := Render(freshJoin(t), testNodeClaim("n"), NodeSettings{LocalDisks: "Ephemeral"}, hw, testNetwork())
	if err == nil || !strings.Contains(err.Error(), "no identity") {
		t.Fatalf("err = %v, want no identity", err)
	}
	// Unused names no data disk: nothing to select.
	if _, err := Render(freshJoin(t), testNodeClaim("n"), NodeSettings{}, hw, testNetwork()); err != nil {
		t.Fatalf("Unused: %v", err)
	}
}

// A report rebuilt from server tags (path and serial only) still selects
// the install disk by serial, and a policy that needs the disk list says so.
func TestReportWithoutDiskList(t *testing.T) {
	hw := testReport()
	hw.Disk = &report.Disk{Path: "/dev/nvme0n1", Serial: "S64FNE0R812345"}
	out, err := Render(freshJoin(t), testNodeClaim("n"), NodeSettings{}, hw, testNetwork())
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := ReadFacts(mustLoad(t, out.Config)); f.InstallDisk != "serial:S64FNE0R812345" {
		t.Errorf("install disk %q, want serial:S64FNE0R812345", f.InstallDisk)
	}
	if _, err := Render(freshJoin(t), testNodeClaim("n"), NodeSettings{LocalDisks: "Raw"}, hw, testNetwork()); err == nil || !strings.Contains(err.Error(), "no disk list") {
		t.Errorf("Raw without a disk list: err = %v", err)
	}
}

func TestLocalDisksSettingRejected(t *testing.T) {
	_, err := Render(freshJoin(t), testNodeClaim("n"), NodeSettings{LocalDisks: "RAID0"}, testReport(), testNetwork())
	if err == nil || !strings.Contains(err.Error(), "localDisks") {
		t.Fatalf("err = %v, want a localDisks settings error", err)
	}
}
