package hardware

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
)

func recordedOffer(t *testing.T, name string) *baremetal.Offer {
	t.Helper()
	o, err := RecordedOffer(name)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func read(t *testing.T, root, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestTreeFromNVMeOffer(t *testing.T) {
	offer := recordedOffer(t, "EM-A610R-NVME")
	macs := []string{"00:1A:2B:3C:4D:5E", "00:1a:2b:3c:4d:5f"}
	spec, err := FromOffer(offer, macs, "srv-1", 1000)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := Create(t.TempDir(), spec)
	if err != nil {
		t.Fatal(err)
	}
	root := tree.Sysroot
	wantSize := int64(offer.Disks[0].Capacity) / 1000 / (1 << 20) * (1 << 20)
	for _, name := range []string{"nvme0n1", "nvme1n1"} {
		st, err := os.Stat(tree.DevicePath(name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != wantSize {
			t.Errorf("%s: size %d, want %d", name, st.Size(), wantSize)
		}
		if got := read(t, root, "sys/block/"+name+"/size"); got != itoa(wantSize/512) {
			t.Errorf("%s: sysfs size %s, want %d sectors", name, got, wantSize/512)
		}
		if got := read(t, root, "sys/block/"+name+"/queue/logical_block_size"); got != "512" {
			t.Errorf("%s: logical block size %s", name, got)
		}
		if got := read(t, root, "sys/block/"+name+"/queue/rotational"); got != "0" {
			t.Errorf("%s: rotational %s", name, got)
		}
		if got := read(t, root, "sys/block/"+name+"/device/model"); got != "SAMSUNG MZQL21T9HCJR-00A07" {
			t.Errorf("%s: model %q", name, got)
		}
		if got := read(t, root, "sys/block/"+name+"/device/serial"); len(got) != 14 {
			t.Errorf("%s: serial %q", name, got)
		}
		if ents, err := os.ReadDir(filepath.Join(root, "sys/block", name, "holders")); err != nil || len(ents) != 0 {
			t.Errorf("%s: holders %v %v", name, ents, err)
		}
	}
	if read(t, root, "sys/block/nvme0n1/device/serial") == read(t, root, "sys/block/nvme1n1/device/serial") {
		t.Error("two disks share a serial")
	}
	for i, nic := range []string{"eth0", "eth1"} {
		if got := read(t, root, "sys/class/net/"+nic+"/address"); got != strings.ToLower(macs[i]) {
			t.Errorf("%s: address %s", nic, got)
		}
		drv, err := filepath.EvalSymlinks(filepath.Join(root, "sys/class/net", nic, "device/driver"))
		if err != nil || filepath.Base(drv) != "igb" {
			t.Errorf("%s: driver %s %v", nic, drv, err)
		}
	}
	if got := read(t, root, "sys/class/net/eth0/operstate"); got != "up" {
		t.Errorf("eth0 operstate %s", got)
	}
	if got := read(t, root, "sys/class/net/eth0/speed"); got != "1000" {
		t.Errorf("eth0 speed %s", got)
	}
	if _, err := os.Stat(filepath.Join(root, "sys/class/net/lo/device")); !os.IsNotExist(err) {
		t.Errorf("lo has a device link: %v", err)
	}
	mounts := read(t, root, "proc/mounts")
	if strings.Contains(mounts, "nvme") || !strings.Contains(mounts, "/dev/loop0 ") {
		t.Errorf("proc/mounts:\n%s", mounts)
	}
	if route := read(t, root, "proc/net/route"); !strings.Contains(route, "eth0\t00000000") {
		t.Errorf("no default route via eth0:\n%s", route)
	}
}

func TestTreeDiskKinds(t *testing.T) {
	for _, tc := range []struct {
		offer, disk, rotational string
	}{
		{"EM-A215R-HDD", "sda", "1"},
		{"EM-A116X-SSD", "sdb", "0"},
		{"EM-RV1-C4M16S128-A", "mmcblk0", "0"},
	} {
		spec, err := FromOffer(recordedOffer(t, tc.offer), []string{"02:00:00:00:00:01"}, "srv", 10000)
		if err != nil {
			t.Fatal(err)
		}
		tree, err := Create(t.TempDir(), spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := read(t, tree.Sysroot, "sys/block/"+tc.disk+"/queue/rotational"); got != tc.rotational {
			t.Errorf("%s %s: rotational %s", tc.offer, tc.disk, got)
		}
	}
}

// A reboot recreates the tree; disk contents survive it.
func TestCreateKeepsDiskContents(t *testing.T) {
	spec, err := FromOffer(recordedOffer(t, "EM-A610R-NVME"), []string{"02:00:00:00:00:01"}, "srv", 10000)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tree, err := Create(dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(tree.DevicePath("nvme0n1"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("written"), 4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := Create(dir, spec); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 7)
	f, err = os.Open(tree.DevicePath("nvme0n1"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(b, 4096); err != nil || string(b) != "written" {
		t.Fatalf("disk content after re-create: %q %v", b, err)
	}
}

func TestFromOfferRejectsBadInput(t *testing.T) {
	good := recordedOffer(t, "EM-A610R-NVME")
	unknown := *good
	unknown.Disks = []*baremetal.Disk{{Capacity: 1 << 30, Type: "tape"}}
	noDisks := *good
	noDisks.Disks = nil
	for name, tc := range map[string]struct {
		offer   *baremetal.Offer
		macs    []string
		divisor int64
		want    string
	}{
		"nil offer":    {nil, []string{"02:00:00:00:00:01"}, 1, "offer"},
		"no disks":     {&noDisks, []string{"02:00:00:00:00:01"}, 1, "no disks"},
		"unknown disk": {&unknown, []string{"02:00:00:00:00:01"}, 1, "unknown type"},
		"no macs":      {good, nil, 1, "macs"},
		"divisor 0":    {good, []string{"02:00:00:00:00:01"}, 0, "divisor"},
	} {
		if _, err := FromOffer(tc.offer, tc.macs, "srv", tc.divisor); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", name, err, tc.want)
		}
	}
	if _, err := Create(t.TempDir(), Spec{}); err == nil {
		t.Error("Create with no disks: no error")
	}
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
