package hwinfo

import (
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/faketree"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
)

func TestNICs(t *testing.T) {
	dir := t.TempDir()
	err := faketree.Build(dir, faketree.Host{
		NICs: []faketree.NIC{
			{Name: "enp1s0f0", MAC: "02:00:00:aa:bb:cc", PermMAC: "B4:96:91:00:00:01", Driver: "i40e", PCI: "0000:01:00.0", Up: true, Speed: 25000, Master: "bond0"},
			{Name: "enp1s0f1", MAC: "02:00:00:aa:bb:cc", PermMAC: "b4:96:91:00:00:02", Driver: "i40e", PCI: "0000:01:00.1", Up: true, Speed: 25000, Master: "bond0"},
			{Name: "eno1", MAC: "b4:96:91:00:00:10", PermMAC: "b4:96:91:00:00:10", Driver: "igb", PCI: "0000:05:00.0"},
			{Name: "eth9", MAC: "b4:96:91:00:00:20", PCI: "0000:06:00.0", Up: true, Speed: 1000},
			{Name: "bond0", MAC: "02:00:00:aa:bb:cc", Virtual: true},
			{Name: "lo", MAC: "00:00:00:00:00:00", Virtual: true},
			{Name: "docker0", MAC: "02:42:00:00:00:01", Virtual: true},
		},
		DefaultRoute:  "bond0",
		DefaultRoute6: "eth9",
	})
	if err != nil {
		t.Fatal(err)
	}
	nics, err := NICs(hostroot.Root{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(nics) != 4 {
		t.Fatalf("%d NICs, want the 4 physical ones: %+v", len(nics), nics)
	}
	byName := map[string]int{}
	for i, n := range nics {
		byName[n.Name] = i
	}
	f0 := nics[byName["enp1s0f0"]]
	if f0.MAC != "02:00:00:aa:bb:cc" || f0.PermanentMAC != "b4:96:91:00:00:01" || f0.HardwareMAC() != "b4:96:91:00:00:01" ||
		f0.Driver != "i40e" || f0.PCIAddress != "0000:01:00.0" || !f0.LinkUp || f0.SpeedMbps != 25000 || !f0.HasDefaultRoute {
		t.Fatalf("bond member: %+v", f0)
	}
	if n := nics[byName["eno1"]]; n.LinkUp || n.SpeedMbps != 0 || n.HasDefaultRoute || n.Driver != "igb" {
		t.Fatalf("down NIC: %+v", n)
	}
	if n := nics[byName["eth9"]]; n.PermanentMAC != "" || n.HardwareMAC() != "b4:96:91:00:00:20" || !n.HasDefaultRoute {
		t.Fatalf("NIC without permanent address: %+v", n)
	}
	if nics[0].Name != "eno1" {
		t.Fatalf("not sorted: %+v", nics)
	}
}

func TestNICsMissingTree(t *testing.T) {
	if _, err := NICs(hostroot.Root{Dir: t.TempDir()}); err == nil {
		t.Fatal("no error without /sys/class/net")
	}
}

// TestRealHost reads this machine's interfaces: whatever they are, the
// loopback must never be listed and every entry must carry a MAC.
func TestRealHost(t *testing.T) {
	nics, err := NICs(hostroot.Root{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nics {
		if n.Name == "lo" || n.MAC == "" {
			t.Fatalf("bad entry %+v", n)
		}
	}
}
