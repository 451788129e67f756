package install

import (
	"net"
	"slices"
	"strings"
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

// A per-NodeClaim token outlives every deadline a node can still join
// before, counted from the earliest render (the imaging phase's start), and
// no more than the clock skew margin beyond: it does not last the whole
// install window.
func TestTokenTTLCoversRenderToBootDeadline(t *testing.T) {
	imagingStart := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	render := imagingStart // write-config at the earliest
	bootDeadline := imagingStart.Add(DefaultTimeouts.Imaging).Add(DefaultTimeouts.Boot)
	exp := render.Add(DefaultTimeouts.TokenTTL())
	if exp.Before(bootDeadline.Add(TokenClockSkew)) || exp.After(bootDeadline.Add(TokenClockSkew)) {
		t.Fatalf("token expires %s after the boot deadline, want %s", exp.Sub(bootDeadline), TokenClockSkew)
	}
	if DefaultTimeouts.TokenTTL() != 40*time.Minute || DefaultTimeouts.TokenTTL() >= DefaultTimeouts.Total() {
		t.Fatalf("TokenTTL %s with the default timeouts (install %s)", DefaultTimeouts.TokenTTL(), DefaultTimeouts.Total())
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

// Imaging progress reaches the NodeClaim once per 10 % step, never per report.
func TestImagingProgressIsToldOncePerStep(t *testing.T) {
	var told []int
	last := -1
	for _, pct := range []int{0, 3, 9, 10, 11, 19, 35, 36, 99, 100} {
		if step, ok := ImagingStepReached(last, pct); ok {
			told = append(told, step)
		}
		last = pct
	}
	if want := []int{0, 10, 30, 90, 100}; !slices.Equal(told, want) {
		t.Fatalf("told %v, want %v", told, want)
	}
}

// The disk list em-imager reported comes back whole from its record, with
// the install disk's identities, where the tags alone know only its path
// and serial; a record of another install disk is refused.
func TestDiskRecordGivesBackEveryDiskAndItsIdentities(t *testing.T) {
	disk := func(name, wwid string, size int64) report.Disk {
		return report.Disk{Path: "/dev/" + name, Name: name, SizeBytes: size, Model: "SAMSUNG MZQL2960HCJR", Serial: "S64G" + name,
			SerialSource: report.SerialFromSysfs, WWID: wwid, BusPath: "/pci0000:00/" + name, LogicalSectorSize: 512,
			Transport: "nvme", Reason: "prose", Rule: report.RuleAutoSmallestFit}
	}
	rep := &report.Report{Disks: []report.Disk{
		disk("nvme0n1", "eui.0001", 960e9), disk("nvme1n1", "eui.0002", 960e9),
		disk("nvme2n1", "eui.0003", 7680e9), disk("nvme3n1", "eui.0004", 7680e9),
	}}
	rep.Disks[3].Wiped = true
	rep.Disk = &rep.Disks[1]
	enc, err := EncodeDisks(rep)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(enc, "prose") || strings.Contains(enc, "wiped") {
		t.Errorf("the record carries the run's prose: %s", enc)
	}
	tags := withHardware(nil, "d0:50:99:00:00:01", "/dev/nvme1n1", "S64Gnvme1n1", "4e4e15d50631aa00")
	if hw := HardwareFromTags(tags); hw.Disk.WWID != "" || len(hw.Disks) != 0 {
		t.Fatalf("the tags alone hold the disk list: %+v", hw)
	}
	hw, err := Hardware(tags, enc)
	if err != nil {
		t.Fatal(err)
	}
	if hw.Disk.WWID != "eui.0002" || hw.Disk.Path != "/dev/nvme1n1" || uplinkMAC(hw) != "d0:50:99:00:00:01" {
		t.Errorf("install disk %+v, uplink %q", hw.Disk, uplinkMAC(hw))
	}
	if len(hw.Disks) != 4 {
		t.Fatalf("%d disks back, want 4", len(hw.Disks))
	}
	for i, d := range hw.Disks {
		want := rep.Disks[i]
		want.Reason, want.Rule, want.Wiped = "", "", false
		if d != want {
			t.Errorf("disk %d back as %+v, want %+v", i, d, want)
		}
	}
	stale := withHardware(nil, "d0:50:99:00:00:01", "/dev/nvme0n1", "S64Gnvme0n1", "4e4e15d50631aa00")
	if _, err := Hardware(stale, enc); err == nil {
		t.Error("a record of another install disk was taken")
	}
	if _, err := Hardware(tags, "{"); err == nil {
		t.Error("a corrupt record was taken")
	}
	if hw, err := Hardware(tags, ""); err != nil || hw.Disk.Path != "/dev/nvme1n1" || len(hw.Disks) != 0 {
		t.Errorf("without a record: %+v, %v", hw, err)
	}
}
