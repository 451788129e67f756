package catalog

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog/snapshot"
)

// A CPU the catalogue does not know is no architecture: taken for amd64, a
// new ARM offer would be ordered for an amd64 image and never install.
func TestArchOfUnknownCPUIsNotAmd64(t *testing.T) {
	for _, c := range []struct {
		cpu  string
		tags []string
		want string
	}{
		{"Intel Xeon E3 1220 or equivalent", nil, "amd64"},
		{"Intel(R) Xeon(R) Gold 6230", nil, "amd64"},
		{"AMD EPYC 8124P", nil, "amd64"},
		{"AMD Ryzen PRO 3600", nil, "amd64"},
		{"Ampere Altra Q80-30", nil, "arm64"},
		{"AmpereOne A192-32X", nil, "arm64"},
		{"TH1520", nil, "riscv64"},
		{"Some board", []string{"riscv"}, "riscv64"},
		// Not recognised: neither x86-64 nor a known ARM or RISC-V line.
		{"NVIDIA Grace", nil, ArchitectureUnknown},
		{"Fujitsu A64FX", nil, ArchitectureUnknown},
		{"", nil, ArchitectureUnknown},
	} {
		if got := archOf(c.cpu, c.tags); got != c.want {
			t.Errorf("archOf(%q, %v) = %s, want %s", c.cpu, c.tags, got, c.want)
		}
	}
}

// Every offer of the real recorded API answers has a CPU the catalogue
// knows, and the only one not amd64 is the RISC-V labs board: the rule that
// refuses unknown CPUs hides no offer Scaleway sells today.
func TestRecordedOffersArchitectures(t *testing.T) {
	b, err := os.ReadFile("../test/fixtures/scaleway/baremetal-api-recordings.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Exchanges []struct {
			Response json.RawMessage `json:"response"`
		} `json:"exchanges"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	archs := map[string]string{}
	for _, e := range rec.Exchanges {
		var list baremetal.ListOffersResponse
		if json.Unmarshal(e.Response, &list) != nil {
			continue
		}
		for _, o := range list.Offers {
			archs[o.Name] = OfferArch(o)
		}
	}
	if len(archs) < 30 {
		t.Fatalf("%d offers in the recordings, want the catalogue's 30 or more", len(archs))
	}
	notAmd64 := map[string]string{}
	for name, a := range archs {
		if a != "amd64" {
			notAmd64[name] = a
		}
	}
	if len(notAmd64) != 1 || notAmd64["EM-RV1-C4M16S128-A"] != ArchitectureRiscv64 {
		t.Errorf("offers not amd64: %v, want only EM-RV1-C4M16S128-A (riscv64)", notAmd64)
	}
}

// An offer the API starts selling with an unknown CPU is listed with
// kubernetes.io/arch=unknown, so a NodeClass's filter (arch In [amd64]) and a
// NodePool asking for amd64 or arm64 never get it.
func TestNewCPUOfferIsNotOfferedForAnAmd64Image(t *testing.T) {
	e := newEnv(t, true)
	snap, err := snapshot.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	const zone, name = "nl-ams-1", "EM-X100G-NVME"
	hourly := snap.Zones[zone].Hourly
	if len(hourly) == 0 {
		t.Fatalf("no hourly offer in %s in the snapshot", zone)
	}
	o := *hourly[0]
	o.ID, o.Name = "00000000-0000-4000-8000-00000000a64f", name
	o.CPUs = []*baremetal.CPU{{Name: "NVIDIA Grace", CoreCount: 72, ThreadCount: 72}}
	e.srv.Set(zone, "hourly", append(append([]*baremetal.Offer{}, hourly...), &o))
	if err := e.cat.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}

	it := find(t, mustTypes(t, e.cat, Filter{Zones: []string{zone}}), name)
	if a := it.Requirements.Get(corev1.LabelArchStable).Any(); a != ArchitectureUnknown {
		t.Errorf("%s: kubernetes.io/arch %s, want %s", name, a, ArchitectureUnknown)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		reqs := scheduling.NewRequirements(scheduling.NewRequirement(corev1.LabelArchStable, corev1.NodeSelectorOpIn, arch))
		for _, it := range mustTypes(t, e.cat, Filter{Zones: []string{zone}, Requirements: reqs}) {
			if it.Name == name {
				t.Errorf("%s offered for kubernetes.io/arch In [%s]", name, arch)
			}
		}
	}
}
