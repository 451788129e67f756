package catalog

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
)

// value is the single value of an In requirement.
func value(it *cloudprovider.InstanceType, key string) string {
	v, op := label(it, key)
	if op != corev1.NodeSelectorOpIn {
		return "<" + string(op) + ">"
	}
	return v
}

// EM-I226E-NVME has 2 x 960 GB and 2 x 7.68 TB NVMe: Talos goes on a 960 GB
// disk; the policy decides what ephemeral-storage and the labels say.
func TestLocalDisksPolicyPrediction(t *testing.T) {
	e := newEnv(t, false)
	for _, c := range []struct {
		policy     localdisks.Policy
		storage    int64
		dataDisks  string
		wantPolicy string
	}{
		{"", localdisks.EphemeralBytes(960e9, true), "0", "Unused"},
		{localdisks.Unused, localdisks.EphemeralBytes(960e9, true), "0", "Unused"},
		{localdisks.Ephemeral, localdisks.EphemeralBytes(7680e9, false), "0", "Ephemeral"},
		{localdisks.UserVolumes, localdisks.EphemeralBytes(960e9, true), "3", "UserVolumes"},
		{localdisks.Raw, localdisks.EphemeralBytes(960e9, true), "3", "Raw"},
	} {
		it := find(t, mustTypes(t, e.cat, Filter{Zones: []string{"fr-par-2"}, LocalDisks: c.policy}), "EM-I226E-NVME")
		if got := it.Capacity.StorageEphemeral().Value(); got != c.storage {
			t.Errorf("%q: ephemeral-storage %d, want %d", c.policy, got, c.storage)
		}
		if got := value(it, localdisks.LabelPolicy); got != c.wantPolicy {
			t.Errorf("%q: %s=%s, want %s", c.policy, localdisks.LabelPolicy, got, c.wantPolicy)
		}
		if got := value(it, localdisks.LabelDataDiskCount); got != c.dataDisks {
			t.Errorf("%q: %s=%s, want %s", c.policy, localdisks.LabelDataDiskCount, got, c.dataDisks)
		}
	}
	// A single-disk offer keeps EPHEMERAL on its only disk whatever the policy.
	for _, it := range mustTypes(t, e.cat, Filter{Zones: []string{"fr-par-2"}, LocalDisks: localdisks.Ephemeral}) {
		if value(it, LabelDiskCount) == "1" && value(it, localdisks.LabelDataDiskCount) != "0" {
			t.Errorf("%s: one disk, %s=%s", it.Name, localdisks.LabelDataDiskCount, value(it, localdisks.LabelDataDiskCount))
		}
	}
	if _, err := e.cat.InstanceTypes(context.Background(), Filter{LocalDisks: "RAID0"}); err == nil {
		t.Error("filter with local disks RAID0 accepted")
	}
}

// A node's measured ephemeral-storage counts only for NodeClasses that put
// EPHEMERAL on the same disk; its memory counts for all.
func TestObservedCapacityPerEphemeralPlacement(t *testing.T) {
	e := newEnv(t, false)
	unused := Filter{Zones: []string{"fr-par-2"}}
	eph := Filter{Zones: []string{"fr-par-2"}, LocalDisks: localdisks.Ephemeral}
	raw := Filter{Zones: []string{"fr-par-2"}, LocalDisks: localdisks.Raw}
	measured := corev1.ResourceList{
		corev1.ResourceMemory:           resource.MustParse("250Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("7000Gi"),
	}
	e.cat.ObserveCapacity("EM-I226E-NVME", "Ephemeral", measured)
	if got := find(t, mustTypes(t, e.cat, eph), "EM-I226E-NVME").Capacity.StorageEphemeral(); got.Cmp(measured[corev1.ResourceEphemeralStorage]) != 0 {
		t.Errorf("Ephemeral: ephemeral-storage %s, want the measured 7000Gi", got)
	}
	for _, f := range []Filter{unused, raw} {
		it := find(t, mustTypes(t, e.cat, f), "EM-I226E-NVME")
		if got := it.Capacity.StorageEphemeral().Value(); got != localdisks.EphemeralBytes(960e9, true) {
			t.Errorf("%q: ephemeral-storage %d: a node with EPHEMERAL on its data disk leaked into the system-disk prediction", f.LocalDisks, got)
		}
		if it.Capacity.Memory().Cmp(measured[corev1.ResourceMemory]) != 0 {
			t.Errorf("%q: memory %s, want the measured 250Gi", f.LocalDisks, it.Capacity.Memory())
		}
	}
	// A Raw node measures the system disk: Unused gets it, Ephemeral keeps its own.
	e.cat.ObserveCapacity("EM-I226E-NVME", "Raw", corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("880Gi")})
	if got := find(t, mustTypes(t, e.cat, unused), "EM-I226E-NVME").Capacity.StorageEphemeral(); got.String() != "880Gi" {
		t.Errorf("Unused after a Raw node: %s, want 880Gi", got)
	}
	if got := find(t, mustTypes(t, e.cat, eph), "EM-I226E-NVME").Capacity.StorageEphemeral(); got.String() != "7000Gi" {
		t.Errorf("Ephemeral after a Raw node: %s, want 7000Gi", got)
	}
	// A policy label nobody can read is not guessed at.
	e.cat.ObserveCapacity("EM-I226E-NVME", "Striped", corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")})
	if got := find(t, mustTypes(t, e.cat, unused), "EM-I226E-NVME").Capacity.Memory(); got.String() != "250Gi" {
		t.Errorf("unknown policy label changed memory to %s", got)
	}
}
