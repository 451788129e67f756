package nodeclass

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/scheduling"
	"sigs.k8s.io/yaml"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/talosgen"
)

// examples/nvme-storage.yaml does what its comments say: its NodePool only
// takes NVMe offers with a disk besides the system one; on EM-I226E-NVME
// (2 x 960 GB, 2 x 7.68 TB) Talos goes on a 960 GB disk, every other disk
// becomes an XFS user volume at /var/mnt/data0.. (data0 the largest),
// selected by WWID, with a user-volume-<name>=<GB> label on the Node; the
// other disks are wiped before Talos first boots.
func TestNVMeStorageExample(t *testing.T) {
	data, err := os.ReadFile("../../examples/nvme-storage.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := bytes.Split(data, []byte("\n---\n"))
	if len(docs) != 2 {
		t.Fatalf("%d documents, want the NodeClass and the NodePool", len(docs))
	}
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	pool := &karpv1.NodePool{}
	if err := yaml.UnmarshalStrict(docs[0], nc); err != nil {
		t.Fatalf("NodeClass: %v", err)
	}
	if err := yaml.UnmarshalStrict(docs[1], pool); err != nil {
		t.Fatalf("NodePool: %v", err)
	}
	if !localdisks.Policy(nc.Spec.LocalDisks).Wipes() {
		t.Errorf("localDisks %q does not wipe the other disks' old partitions", nc.Spec.LocalDisks)
	}

	// The NodePool's offers under the NodeClass (the embedded snapshot).
	its, err := catalog.New(catalog.Options{}).InstanceTypes(context.Background(), Filter(nc, "fr-par-2"))
	if err != nil {
		t.Fatal(err)
	}
	reqs := scheduling.NewNodeSelectorRequirementsWithMinValues(pool.Spec.Template.Spec.Requirements...)
	var taken []string
	for _, it := range its {
		if it.Requirements.Compatible(reqs, scheduling.AllowUndefinedWellKnownLabels) != nil {
			continue
		}
		taken = append(taken, it.Name)
		if d := it.Requirements.Get(catalog.LabelDiskType).Any(); d != "nvme" {
			t.Errorf("%s: disk type %s", it.Name, d)
		}
		if n, _ := strconv.Atoi(it.Requirements.Get(catalog.LabelDiskCount).Any()); n < 2 {
			t.Errorf("%s: %d disk(s), the NodePool wants a disk besides the system one", it.Name, n)
		}
	}
	if !strings.Contains(strings.Join(taken, " "), "EM-I226E-NVME") {
		t.Fatalf("the NodePool takes %v, not EM-I226E-NVME", taken)
	}

	// em-imager's report of an EM-I226E-NVME whose kernel names do not follow
	// the disks' sizes (nvme numbering changes between boots).
	disk := func(name, wwid string, size int64) report.Disk {
		return report.Disk{Path: "/dev/" + name, Name: name, SizeBytes: size, WWID: wwid, Transport: "nvme", LogicalSectorSize: 512}
	}
	hw := &report.Report{Version: report.Version, Command: "write", OK: true,
		Disks: []report.Disk{
			disk("nvme0n1", "eui.big1", 7680e9), disk("nvme1n1", "eui.small1", 960e9),
			disk("nvme2n1", "eui.big2", 7680e9), disk("nvme3n1", "eui.small2", 960e9),
		},
		NICs: []report.NIC{{Name: "eth0", MAC: "02:00:00:00:00:01", LinkUp: true, HasDefaultRoute: true}},
	}
	hw.Disk = &hw.Disks[1]
	join, err := talosgen.NewClusterJoinMaterial("https://k8s.example.test:6443", "c")
	if err != nil {
		t.Fatal(err)
	}
	out, err := talosgen.Render(join, sampleNodeClaim(nc), Settings(nc), hw, talosgen.Network{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := configloader.NewFromBytes(out.Config)
	if err != nil {
		t.Fatal(err)
	}
	facts, err := talosgen.ReadFacts(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if facts.InstallDisk != "wwid:eui.small1" {
		t.Errorf("install disk %s, want the 960 GB disk em-imager wrote, by WWID", facts.InstallDisk)
	}
	want := map[string]string{"data0": "eui.big1", "data1": "eui.big2", "data2": "eui.small2"}
	for _, v := range facts.Volumes {
		if v.Kind != "UserVolumeConfig" || !strings.Contains(v.Selector, `disk.wwid == "`+want[v.Name]+`"`) {
			t.Errorf("volume %s %s selects %q, want user volume on %s", v.Kind, v.Name, v.Selector, want[v.Name])
		}
		delete(want, v.Name)
	}
	if len(want) != 0 {
		t.Errorf("no user volume %v", want)
	}
	labels := facts.NodeLabels
	if labels[localdisks.LabelUserVolumePrefix+"data0"] != "7680" || labels[localdisks.LabelUserVolumePrefix+"data2"] != "960" ||
		labels[localdisks.LabelDataDiskCount] != "3" {
		t.Errorf("node labels %v", labels)
	}
}
