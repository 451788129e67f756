package localdisks

import (
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]Policy{"": Unused, "Unused": Unused, "Ephemeral": Ephemeral, "UserVolumes": UserVolumes, "Raw": Raw} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"ephemeral", "RAID0", " Raw"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	if Unused.Wipes() || !Ephemeral.Wipes() || !UserVolumes.Wipes() || !Raw.Wipes() {
		t.Error("only Unused leaves the other disks untouched")
	}
}

// EM-I226E-NVME: 2 x 960 GB and 2 x 7.68 TB NVMe.
func i226e() []Disk {
	return []Disk{{SizeBytes: 960e9, Key: "b"}, {SizeBytes: 960e9, Key: "a"}, {SizeBytes: 7680e9, Key: "d"}, {SizeBytes: 7680e9, Key: "c"}}
}

func TestPlan(t *testing.T) {
	disks := i226e()
	sys := SystemDisk(disks)
	if sys != 0 {
		t.Fatalf("system disk %d, want the first smallest (0)", sys)
	}
	m := Lay(Ephemeral, disks, sys)
	// Data disks: 960 (a), 7680 (d), 7680 (c): the largest, c before d.
	if m.Layout.EphemeralDisk != 2 || m.Data[2].Key != "c" {
		t.Fatalf("EPHEMERAL on data disk %d %+v, want the 7.68 TB disk keyed c", m.Layout.EphemeralDisk, m.Data)
	}
	if got := m.Layout.Labels(m.Data, true); !reflect.DeepEqual(got, map[string]string{LabelPolicy: "Ephemeral", LabelDataDiskCount: "0"}) {
		t.Fatalf("labels %v", got)
	}
	uv := Lay(UserVolumes, disks, sys).Layout
	if want := []Volume{{"data0", 2}, {"data1", 1}, {"data2", 0}}; !reflect.DeepEqual(uv.Volumes, want) {
		t.Fatalf("user volumes %+v, want %+v", uv.Volumes, want)
	}
	if got := uv.Labels(m.Data, true); got[LabelUserVolumePrefix+"data0"] != "7680" || got[LabelUserVolumePrefix+"data2"] != "960" || got[LabelDataDiskCount] != "3" {
		t.Fatalf("labels %v", got)
	}
	if raw := Lay(Raw, disks, sys).Layout; !reflect.DeepEqual(raw.Raw, []int{2, 1, 0}) || raw.EphemeralDisk != -1 || raw.DataDiskCount() != 3 {
		t.Fatalf("raw %+v", raw)
	}
	if un := Lay(Unused, disks, sys).Layout; un.EphemeralDisk != -1 || un.DataDiskCount() != 0 || un.EphemeralPlacement() != "system" {
		t.Fatalf("unused %+v", un)
	}
	// One disk: every policy keeps EPHEMERAL on it.
	one := Lay(Ephemeral, []Disk{{SizeBytes: 128e9}}, 0)
	if one.Layout.EphemeralDisk != -1 || one.EphemeralBytes() != EphemeralBytes(128e9, true) {
		t.Fatalf("one disk: %+v", one)
	}
}

func TestSystemDiskPrefersNonRotational(t *testing.T) {
	if got := SystemDisk([]Disk{{SizeBytes: 500e9, Rotational: true}, {SizeBytes: 8e12}, {SizeBytes: 1e12}}); got != 2 {
		t.Fatalf("got %d, want the smallest non-rotational disk (2)", got)
	}
	if got := SystemDisk([]Disk{{SizeBytes: 8e12, Rotational: true}, {SizeBytes: 6e12, Rotational: true}}); got != 1 {
		t.Fatalf("got %d, want the smallest HDD (1)", got)
	}
	if got := SystemDisk(nil); got != -1 {
		t.Fatalf("no disks: %d", got)
	}
}

func TestEphemeralBytes(t *testing.T) {
	// 7.68 TB: the log is at its 2 GiB cap.
	if got, want := EphemeralBytes(7680e9, false), (int64(7680e9)-2<<20)/4096*4096-2<<30; got != want {
		t.Fatalf("7.68 TB data disk: %d, want %d", got, want)
	}
	// 100 GiB: 1/2048 of it, 50 MiB, is below the 64 MiB floor.
	if got, want := FilesystemBytes(100<<30), int64(100<<30)-64<<20; got != want {
		t.Fatalf("100 GiB: %d, want %d", got, want)
	}
	// 1 TiB: 512 MiB of log.
	if got, want := FilesystemBytes(1<<40), int64(1<<40)-512<<20; got != want {
		t.Fatalf("1 TiB: %d, want %d", got, want)
	}
	// The system disk loses Talos's partitions: EFI (2101 MiB), META, STATE.
	if got := SystemPartitionsBytes(); got != (2101+1+100)<<20 {
		t.Fatalf("system partitions %d MiB", got>>20)
	}
	if EphemeralBytes(960e9, true) >= EphemeralBytes(960e9, false) || EphemeralBytes(1<<20, true) != 0 {
		t.Fatal("the system disk must give less, a tiny disk nothing")
	}
}
