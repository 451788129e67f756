package install

import (
	"net"
	"testing"
	"time"

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

// A phase's start survives in the tags, so its deadline does across restarts.
func TestPhaseDeadlineComesFromTheTags(t *testing.T) {
	created := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	srv := &baremetal.Server{CreatedAt: &created}
	if d, ok := DefaultTimeouts.Deadline(srv); !ok || !d.Equal(created.Add(DefaultTimeouts.Delivery)) {
		t.Fatalf("an order's delivery deadline %s, want its creation + %s", d, DefaultTimeouts.Delivery)
	}
	since := created.Add(7 * time.Minute)
	srv.Tags = SetPhaseIn([]string{"karpenter.sh/nodeclaim=a"}, PhaseImaging, since)
	if PhaseOf(srv) != PhaseImaging || !PhaseSince(srv).Equal(since) {
		t.Fatalf("phase %s since %s", PhaseOf(srv), PhaseSince(srv))
	}
	if d, _ := DefaultTimeouts.Deadline(srv); !d.Equal(since.Add(DefaultTimeouts.Imaging)) {
		t.Fatalf("imaging deadline %s", d)
	}
	srv.Tags = SetPhaseIn(srv.Tags, PhaseSpare, since)
	if _, ok := DefaultTimeouts.Deadline(srv); ok {
		t.Fatal("a spare has an install deadline")
	}
}

// The disk holds an image only once em-imager's facts and its digest are tagged.
func TestImagedNeedsTheWrittenDigest(t *testing.T) {
	const sha = "4e4e15d50631aa0011223344556677889900aabbccddeeff0011223344556677"
	srv := &baremetal.Server{}
	if Imaged(srv, sha) {
		t.Fatal("an untagged server holds an image")
	}
	srv.Tags = withHardware(nil, "d0:50:99:00:00:01", "/dev/sda", "", sha)
	if !Imaged(srv, sha) {
		t.Fatal("the written image is not recognised")
	}
	if Imaged(srv, "ffff"+sha[4:]) {
		t.Fatal("another image is taken for the written one")
	}
}
