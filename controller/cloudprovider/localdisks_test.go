package cloudprovider_test

import (
	"os"
	"strings"
	"testing"

	"github.com/scaleway/scaleway-sdk-go/scw"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/configpart"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/diskprobe"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/talosgen"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/diskimage"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// The offer of the snapshot with disks of two sizes: 2 x 960 GB and
// 2 x 7.68 TB NVMe.
const fourDisks = "EM-I226E-NVME"

var fourDisksReq = karpv1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{fourDisks}}

// The local-disk policy reaches the real install. Raw: em-imager wipes the
// other disks (a previous tenant's GPT and filesystem are gone) and the
// node says how many raw disks it has. Ephemeral, with a controller restart
// after the image was written and before the config could be rendered:
// the config rendered after the restart (from the disk list recorded on the
// NodeClaim) puts EPHEMERAL on a 7.68 TB disk by its WWID, and the Node's
// ephemeral-storage is what the instance type predicted.
func TestLocalDiskPolicyInTheInstall(t *testing.T) {
	e := startEnvWith(t, world.Options{}, func(nc *v1alpha1.ScalewayElasticMetalNodeClass) { nc.Spec.LocalDisks = string(localdisks.Raw) })

	t.Run("raw wipes the other disks", func(t *testing.T) {
		_, got, _, id, deliver := e.launchUndelivered(fourDisksReq)
		// Rescue waits until the delivered disks carry a previous tenant's layout.
		noRescue := e.w.Sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Method: "POST", Path: "/servers/" + id + "/reboot$", Status: 503})
		deliver()
		e.eventually("the delivered machine's disks", func() bool { _, err := e.w.Machines.Hardware(id); return err == nil })
		tree, err := e.w.Machines.Hardware(id)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range tree.Spec.Disks {
			leaveTenantLayout(t, tree.DevicePath(d.Name))
		}
		e.w.Sim.RemoveFault(noRescue)

		node := e.waitNodeStatus(got.Status.ProviderID)
		st, err := e.w.Machines.Status(id)
		if err != nil {
			t.Fatal(err)
		}
		wiped := 0
		for _, d := range tree.Spec.Disks {
			p := tree.DevicePath(d.Name)
			if p == st.BootDisk {
				continue
			}
			c, err := diskprobe.Probe(p, d.LogicalBlockSize)
			if err != nil {
				t.Fatal(err)
			}
			if !c.Blank {
				t.Errorf("%s still holds %s after a Raw install", d.Name, c)
			}
			wiped++
		}
		if wiped != 3 {
			t.Fatalf("%d disks besides the boot disk %s, want 3", wiped, st.BootDisk)
		}
		if l := node.Labels; l[localdisks.LabelPolicy] != "Raw" || l[localdisks.LabelDataDiskCount] != "3" {
			t.Errorf("node labels %s=%q %s=%q, want Raw and 3", localdisks.LabelPolicy, l[localdisks.LabelPolicy],
				localdisks.LabelDataDiskCount, l[localdisks.LabelDataDiskCount])
		}
	})

	t.Run("ephemeral after a restart before the config", func(t *testing.T) {
		e.updateNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) { nc.Spec.LocalDisks = string(localdisks.Ephemeral) })
		secret := e.nc.Spec.Talos.JoinSecretRef.Name
		claim, got, zone, id, deliver := e.launchUndelivered(fourDisksReq)
		// The config cannot be rendered (its join Secret is gone) once the
		// image is written: the controller dies there.
		e.breakNodeClass()
		deliver()
		e.eventually("the image written, the config not rendered", func() bool {
			srv, err := e.p.API.GetServer(e.ctx, zone, id)
			return err == nil && install.PhaseOf(srv) == install.PhaseImaging && scaleway.ParseTags(srv.Tags)[scaleway.TagImage] != "" &&
				e.events.said(claim.Name, "InstallImaging", "rendering the machine config")
		})
		e.p = e.newProvider()
		e.nc = e.nodeClass(e.nc.Name)
		e.updateNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) { nc.Spec.Talos.JoinSecretRef.Name = secret })

		node := e.waitNodeStatus(got.Status.ProviderID)
		if n := e.creates(claim.Name); n != 1 {
			t.Errorf("%d orders for one nodeclaim", n)
		}
		if !e.events.said(claim.Name, "InstallImaging", "machine config written") {
			t.Fatal("no config written after the restart")
		}
		// The config on the disk: EPHEMERAL on one of the 7.68 TB disks, by WWID.
		st, err := e.w.Machines.Status(id)
		if err != nil {
			t.Fatal(err)
		}
		raw, _, err := configpart.Read(st.BootDisk, diskimage.SectorSize)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := configloader.NewFromBytes(raw)
		if err != nil {
			t.Fatal(err)
		}
		facts, err := talosgen.ReadFacts(cfg)
		if err != nil {
			t.Fatal(err)
		}
		tree, err := e.w.Machines.Hardware(id)
		if err != nil {
			t.Fatal(err)
		}
		srv, _ := e.w.Sim.Server(id)
		if srv.OfferName != fourDisks {
			t.Fatalf("ordered %s, want %s", srv.OfferName, fourDisks)
		}
		large, top := map[string]bool{}, int64(0) // the offer's 7.68 TB disks
		for _, d := range tree.Spec.Disks {
			top = max(top, d.SizeBytes)
		}
		for _, d := range tree.Spec.Disks {
			if d.SizeBytes == top {
				large[d.WWID] = true
			}
		}
		var eph []string
		for _, v := range facts.Volumes {
			if v.Name == "EPHEMERAL" {
				eph = append(eph, v.Selector)
			}
		}
		if len(eph) != 1 || !strings.Contains(eph[0], "disk.wwid == ") {
			t.Fatalf("EPHEMERAL selectors %q, want one by WWID", eph)
		}
		wwid := strings.Trim(strings.Fields(strings.TrimPrefix(eph[0], "disk.wwid == "))[0], `"`)
		if !large[wwid] {
			t.Errorf("EPHEMERAL selects %q, not one of the 7.68 TB disks %v", wwid, large)
		}
		for _, d := range tree.Spec.Disks {
			if d.Name == st.EphemeralDisk && d.WWID != wwid {
				t.Errorf("the simulated Talos put EPHEMERAL on %s (%s), the selector names %s", d.Name, d.WWID, wwid)
			}
		}
		// Predicted (the instance type) and registered (the Node) agree, and
		// exceed what the smallest disk could hold.
		var predicted int64
		for _, it := range e.instanceTypes() {
			if it.Name == fourDisks {
				q := it.Capacity[corev1.ResourceEphemeralStorage]
				predicted = q.Value()
			}
		}
		have := node.Status.Capacity[corev1.ResourceEphemeralStorage]
		if have.Value() != predicted || predicted <= 960e9 {
			t.Errorf("node ephemeral-storage %d, instance type predicts %d (the smallest disk holds 960 GB)", have.Value(), predicted)
		}
		if node.Labels[localdisks.LabelPolicy] != "Ephemeral" {
			t.Errorf("node label %s=%q", localdisks.LabelPolicy, node.Labels[localdisks.LabelPolicy])
		}
		if e.claim(claim.Name).Annotations[v1alpha1.AnnotationDisks] == "" {
			t.Error("no disk list on the nodeclaim")
		}
	})
	e.assertNoDuplicatesNorLeaks()
}

// waitNodeStatus waits for the node of providerID with its capacity (the
// simulated kubelet reports its status after registering the Node).
func (e *env) waitNodeStatus(providerID string) *corev1.Node {
	e.t.Helper()
	var node *corev1.Node
	e.eventually("the capacity of the node of "+providerID, func() bool {
		node = e.waitNode(providerID)
		_, ok := node.Status.Capacity[corev1.ResourceEphemeralStorage]
		return ok
	})
	return node
}

// launchUndelivered launches a claim whose server stays in delivery until
// deliver is called.
func (e *env) launchUndelivered(reqs ...karpv1.NodeSelectorRequirementWithMinValues) (claim, got *karpv1.NodeClaim, zone scw.Zone, id string, deliver func()) {
	e.t.Helper()
	claim = e.nodeClaim(reqs...)
	hold := e.w.Sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStuck, Tag: scaleway.Tag(scaleway.TagNodeClaim, claim.Name), State: "delivering"})
	got = e.launch(claim)
	zone, id, err := scaleway.ParseProviderID(got.Status.ProviderID)
	if err != nil {
		e.t.Fatal(err)
	}
	return claim, got, zone, id, func() { e.w.Sim.RemoveFault(hold) }
}

// leaveTenantLayout puts a previous tenant's layout on a disk file: an XFS
// superblock at its start and a backup GPT header in its last sector.
func leaveTenantLayout(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("XFSB"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("EFI PART"), st.Size()-512); err != nil {
		t.Fatal(err)
	}
	if c, err := diskprobe.Probe(path, 512); err != nil || c.Blank {
		t.Fatalf("the tenant's layout on %s is not seen: %v, %v", path, c, err)
	}
}

// With the legacy MaintenanceAPI delivery the config is rendered in booting,
// a later phase than the one em-imager reported in: the disk list still
// reaches it (a restart in between reads the NodeClaim's record, as in
// TestLocalDiskPolicyInTheInstall).
func TestLocalDiskPolicyOverTheMaintenanceAPI(t *testing.T) {
	e := startLegacyEnv(t, nil)
	e.updateNodeClass(func(nc *v1alpha1.ScalewayElasticMetalNodeClass) { nc.Spec.LocalDisks = string(localdisks.Ephemeral) })
	got := e.launch(e.nodeClaim(fourDisksReq))
	node := e.waitNodeStatus(got.Status.ProviderID)
	_, id, _ := scaleway.ParseProviderID(got.Status.ProviderID)
	if calls, err := e.w.Machines.TalosAPICalls(id); err != nil || len(calls) == 0 {
		t.Fatalf("no call to the Talos API in MaintenanceAPI delivery: %v", err)
	}
	predicted := got.Status.Capacity[corev1.ResourceEphemeralStorage]
	have := node.Status.Capacity[corev1.ResourceEphemeralStorage]
	if have.Cmp(predicted) != 0 || have.Value() != localdisks.EphemeralBytes(7680e9, false) {
		t.Errorf("node ephemeral-storage %s, predicted %s: EPHEMERAL is not on a 7.68 TB disk", have.String(), predicted.String())
	}
	e.assertNoDuplicatesNorLeaks()
}
