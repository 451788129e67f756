package install

import (
	"net"
	"testing"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

func TestUplinkIsTheRoutedNICsPermanentMAC(t *testing.T) {
	r := &report.Report{NICs: []report.NIC{
		{Name: "eth1", MAC: "aa:00:00:00:00:02", LinkUp: true},
		// Bonding rewrote eth0's MAC; Talos sees the permanent one.
		{Name: "eth0", MAC: "aa:00:00:00:00:02", PermanentMAC: "D0:50:99:00:00:01", LinkUp: true, HasDefaultRoute: true},
	}}
	if got := uplinkMAC(r); got != "d0:50:99:00:00:01" {
		t.Fatalf("uplink = %q", got)
	}
	r.NICs[1].HasDefaultRoute = false
	if got := uplinkMAC(r); got != "aa:00:00:00:00:02" {
		t.Fatalf("without a default route, the first linked NIC: %q", got)
	}
	if got := uplinkMAC(&report.Report{NICs: []report.NIC{{Name: "eth0", MAC: "aa:00:00:00:00:01"}}}); got != "" {
		t.Fatalf("no NIC with a link: %q", got)
	}
}

// What em-imager found survives a restart through the server's tags.
func TestHardwareFactsRoundTripThroughTags(t *testing.T) {
	tags := []string{"karpenter.sh/nodeclaim=a"}
	tags, _ = scaleway.SetTagIn(tags, TagUplinkMAC, "d0:50:99:00:00:01")
	tags, _ = scaleway.SetTagIn(tags, TagDisk, "/dev/nvme0n1")
	tags, _ = scaleway.SetTagIn(tags, TagDiskSerial, "S64F=1")
	hw := HardwareFromTags(tags)
	if hw.Disk.Path != "/dev/nvme0n1" || hw.Disk.Serial != "S64F=1" || uplinkMAC(hw) != "d0:50:99:00:00:01" {
		t.Fatalf("facts from tags: disk %+v nics %+v", hw.Disk, hw.NICs)
	}
}

func TestPhaseOfDefaultsToOrdered(t *testing.T) {
	if p := PhaseOf(&baremetal.Server{}); p != PhaseOrdered {
		t.Fatalf("untagged server phase %q", p)
	}
	if p := PhaseOf(&baremetal.Server{Tags: []string{scaleway.Tag(scaleway.TagPhase, "imaging")}}); p != PhaseImaging {
		t.Fatalf("phase %q", p)
	}
}

func TestNetworkOfTakesTheIPv6Address(t *testing.T) {
	s := &baremetal.Server{IPs: []*baremetal.IP{
		{Version: baremetal.IPVersionIPv4, Address: net.ParseIP("51.159.1.2")},
		{Version: baremetal.IPVersionIPv6, Address: net.ParseIP("2001:bc8:1201:1::1")},
	}}
	n := NetworkOf(s)
	if n.IPv6Address != "2001:bc8:1201:1::1" || n.IPv6Gateway != "" {
		t.Fatalf("network %+v", n)
	}
}

func TestTimeoutsTotalCoversEveryPhase(t *testing.T) {
	if DefaultTimeouts.Total() != DefaultTimeouts.Delivery+DefaultTimeouts.Rescue+DefaultTimeouts.Imaging+DefaultTimeouts.Boot {
		t.Fatal("Total is not the sum of the phases")
	}
}
