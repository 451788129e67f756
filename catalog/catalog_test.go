package catalog

import (
	"context"
	"errors"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	clocktesting "k8s.io/utils/clock/testing"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog/internal/offerserver"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog/snapshot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

type env struct {
	cat   *Catalog
	clock *clocktesting.FakeClock
	reg   *prometheus.Registry
	srv   *offerserver.Server
}

// newEnv builds a Catalog on the embedded snapshot, a fake clock, a private registry and, with live, a real
// SDK client talking to a server that replays the recordings (fr-par-2) and the snapshot (other zones).
func newEnv(t testing.TB, live bool) *env {
	t.Helper()
	e := &env{clock: clocktesting.NewFakeClock(t0), reg: prometheus.NewRegistry()}
	opts := Options{Clock: e.clock, Registerer: e.reg}
	if live {
		e.srv = offerserver.New()
		t.Cleanup(e.srv.Close)
		snap, err := snapshot.Embedded()
		if err != nil {
			t.Fatal(err)
		}
		for zone, zo := range snap.Zones {
			e.srv.Set(zone, "hourly", zo.Hourly)
			e.srv.Set(zone, "monthly", zo.Monthly)
		}
		rec, err := os.ReadFile("../test/fixtures/scaleway/baremetal-api-recordings.json")
		if err != nil {
			t.Fatal(err)
		}
		if n, err := e.srv.LoadRecordings(rec); err != nil || n != 2 {
			t.Fatalf("LoadRecordings = %d, %v", n, err)
		}
		client, err := e.srv.Client(scw.WithDefaultPageSize(10))
		if err != nil {
			t.Fatal(err)
		}
		opts.Client = client
	}
	e.cat = New(opts)
	return e
}

func find(t testing.TB, its []*cloudprovider.InstanceType, name string) *cloudprovider.InstanceType {
	t.Helper()
	for _, it := range its {
		if it.Name == name {
			return it
		}
	}
	t.Fatalf("instance type %s not found among %d", name, len(its))
	return nil
}

func offering(t testing.TB, it *cloudprovider.InstanceType, zone string, billing BillingPeriod) *cloudprovider.Offering {
	t.Helper()
	for _, o := range it.Offerings {
		if o.Zone() == zone && o.Requirements.Get(LabelBillingPeriod).Any() == string(billing) {
			return o
		}
	}
	t.Fatalf("%s: no offering for %s/%s", it.Name, zone, billing)
	return nil
}

func hasOffering(it *cloudprovider.InstanceType, zone string, billing BillingPeriod) bool {
	for _, o := range it.Offerings {
		if o.Zone() == zone && o.Requirements.Get(LabelBillingPeriod).Any() == string(billing) {
			return true
		}
	}
	return false
}

func mustTypes(t testing.TB, c *Catalog, f Filter) []*cloudprovider.InstanceType {
	t.Helper()
	its, err := c.InstanceTypes(context.Background(), f)
	if err != nil {
		t.Fatalf("InstanceTypes(%+v): %v", f, err)
	}
	return its
}

func label(it *cloudprovider.InstanceType, key string) (string, corev1.NodeSelectorOperator) {
	r := it.Requirements.Get(key)
	return r.Any(), r.Operator()
}

func TestLabelsAndCapacity(t *testing.T) {
	e := newEnv(t, false)
	its := mustTypes(t, e.cat, Filter{Zones: []string{"fr-par-2"}, BillingPeriods: []BillingPeriod{BillingHourly, BillingMonthly}})

	type want struct {
		arch     string
		labels   map[string]string
		absent   []string
		cpu      int64
		gpus     int64
		diskSize int64 // smallest disk, bytes
	}
	cases := map[string]want{
		// CPU offer, NVMe.
		"EM-I220E-NVME": {arch: "amd64", cpu: 32, diskSize: 960000000000, labels: map[string]string{
			LabelCPUVendor: "amd", LabelCPUModel: "amd-epyc-8124p", LabelCPUCores: "16", LabelCPUThreads: "32",
			LabelMemoryGiB: "128", LabelDiskType: "nvme", LabelDiskCount: "2", LabelDiskSizeGB: "1920",
			LabelBandwidthPublicMbps: "1000", LabelBandwidthPrivateMbps: "25000", LabelOfferRange: "iridium",
		}, absent: []string{LabelGPUModel, LabelGPUCount}},
		// GPU offer.
		"EM-T220E-L40S": {arch: "amd64", cpu: 64, gpus: 2, diskSize: 3840755982336, labels: map[string]string{
			LabelGPUModel: "l40s", LabelGPUCount: "2", LabelCPUModel: "amd-epyc-9334", LabelOfferRange: "titanium",
			LabelMemoryGiB: "256",
		}},
		// HDD storage offer, two sockets of Intel.
		"EM-B111X-SATA": {arch: "amd64", cpu: 24, diskSize: 8000000000000, labels: map[string]string{
			LabelCPUVendor: "intel", LabelCPUCores: "12", LabelCPUThreads: "24", LabelDiskType: "hdd",
			LabelDiskCount: "2", LabelDiskSizeGB: "16000", LabelCPUModel: "intel-xeon-e5-2620-or-equivalent", // as fr-par-1 (first zone) describes it; fr-par-2 says 2600
		}, absent: []string{LabelGPUModel, LabelGPUCount}},
		"EM-L110X-SATA": {arch: "amd64", cpu: 8, diskSize: 12000138625024, labels: map[string]string{
			LabelDiskType: "hdd", LabelDiskCount: "4", LabelDiskSizeGB: "48001", LabelOfferRange: "lithium",
		}},
		// SSD.
		"EM-B112X-SSD": {arch: "amd64", cpu: 24, diskSize: 1000204886016, labels: map[string]string{
			LabelDiskType: "ssd", LabelMemoryGiB: "192",
		}},
		// Mixed disk sizes: ephemeral storage from the smallest.
		"EM-I226E-NVME": {arch: "amd64", cpu: 32, diskSize: 960000000000, labels: map[string]string{
			LabelDiskCount: "4", LabelDiskSizeGB: "17280",
		}},
		// RISC-V labs board.
		"EM-RV1-C4M16S128-A": {arch: "riscv64", cpu: 4, diskSize: 128000000000, labels: map[string]string{
			LabelCPUVendor: "thead", LabelCPUModel: "th1520", LabelDiskType: "mmc", LabelMemoryGiB: "16",
			LabelBandwidthPublicMbps: "100", LabelBandwidthPrivateMbps: "100", LabelOfferRange: "labs",
		}, absent: []string{LabelGPUModel, LabelGPUCount}},
	}
	for name, w := range cases {
		t.Run(name, func(t *testing.T) {
			it := find(t, its, name)
			wellKnown := map[string]string{
				corev1.LabelInstanceTypeStable: name, corev1.LabelArchStable: w.arch, corev1.LabelOSStable: "linux",
				corev1.LabelTopologyZone: "fr-par-2", corev1.LabelTopologyRegion: "fr-par",
				karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeOnDemand,
			}
			for k, v := range wellKnown {
				if got, op := label(it, k); got != v || op != corev1.NodeSelectorOpIn {
					t.Errorf("%s = %s %q, want In %q", k, op, got, v)
				}
			}
			if _, op := label(it, corev1.LabelWindowsBuild); op != corev1.NodeSelectorOpDoesNotExist {
				t.Errorf("windows-build operator %s", op)
			}
			for k, v := range w.labels {
				if got, op := label(it, k); got != v || op != corev1.NodeSelectorOpIn {
					t.Errorf("%s = %s %q, want In %q", k, op, got, v)
				}
			}
			for _, k := range w.absent {
				if _, op := label(it, k); op != corev1.NodeSelectorOpDoesNotExist {
					t.Errorf("%s operator %s, want DoesNotExist", k, op)
				}
			}
			// Every well-known label, Karpenter's and ours, is defined.
			for k := range karpv1.WellKnownLabels {
				if k == karpv1.NodePoolLabelKey {
					continue // set by Karpenter from the NodePool, never by providers
				}
				if !it.Requirements.Has(k) {
					t.Errorf("well-known label %s undefined", k)
				}
			}
			if got := it.Capacity.Cpu().Value(); got != w.cpu {
				t.Errorf("cpu %d, want %d", got, w.cpu)
			}
			gpu := it.Capacity[ResourceNvidiaGPU]
			if gpu.Value() != w.gpus {
				t.Errorf("nvidia.com/gpu %s, want %d", gpu.String(), w.gpus)
			}
			// Unused: EPHEMERAL fills the system disk after Talos's partitions, in XFS.
			if want := localdisks.EphemeralBytes(w.diskSize, true); it.Capacity.StorageEphemeral().Value() != want {
				t.Errorf("ephemeral-storage %d, want %d", it.Capacity.StorageEphemeral().Value(), want)
			}
			if got := it.Capacity.Pods().Value(); got != DefaultMaxPods {
				t.Errorf("pods %d", got)
			}
			mem, _ := resource.ParseQuantity(w.labels[LabelMemoryGiB] + "G")
			if w.labels[LabelMemoryGiB] != "" && (it.Capacity.Memory().Cmp(mem) >= 0 || it.Capacity.Memory().Value() < mem.Value()*95/100) {
				t.Errorf("memory %s: want a little under the offer's %s", it.Capacity.Memory(), mem.String())
			}
			alloc := it.Allocatable()
			if alloc.Memory().Cmp(*it.Capacity.Memory()) >= 0 || alloc.Cpu().Cmp(*it.Capacity.Cpu()) >= 0 {
				t.Errorf("allocatable %v not below capacity %v", alloc, it.Capacity)
			}
		})
	}
}

// NodePool requirements on our labels select instance types the way Karpenter's scheduler does
// (instance type requirements intersect, and some offering is compatible).
func TestNodePoolSelection(t *testing.T) {
	e := newEnv(t, false)
	its := mustTypes(t, e.cat, Filter{})
	sel := func(reqs ...*scheduling.Requirement) []string {
		r := scheduling.NewRequirements(reqs...)
		var names []string
		for _, it := range its {
			if it.Requirements.Intersects(r) != nil {
				continue
			}
			for _, o := range it.Offerings {
				if r.IsCompatible(o.Requirements, scheduling.AllowUndefinedWellKnownLabels) {
					names = append(names, it.Name)
					break
				}
			}
		}
		return names
	}
	gpu := sel(scheduling.NewRequirement(LabelGPUCount, corev1.NodeSelectorOpExists))
	if strings.Join(gpu, ",") != "EM-T220E-L40S,EM-T620E-H100" {
		t.Errorf("gpu-count Exists selects %v", gpu)
	}
	big := sel(scheduling.NewRequirement(LabelCPUThreads, corev1.NodeSelectorOpGt, "90"))
	if strings.Join(big, ",") != "EM-I520E-NVME,EM-I525E-NVME,EM-I620E-NVME,EM-L620E-NVME" { // EM-L620E-NVME: fr-par-1 only
		t.Errorf("cpu-threads Gt 90 selects %v", big)
	}
	riscv := sel(scheduling.NewRequirement(corev1.LabelArchStable, corev1.NodeSelectorOpIn, ArchitectureRiscv64))
	if strings.Join(riscv, ",") != "EM-RV1-C4M16S128-A" {
		t.Errorf("arch riscv64 selects %v", riscv)
	}
	for _, name := range sel(scheduling.NewRequirement(LabelDiskType, corev1.NodeSelectorOpIn, "hdd")) {
		if !strings.HasSuffix(name, "-SATA") && !strings.HasSuffix(name, "-HDD") {
			t.Errorf("disk-type hdd selects %s", name)
		}
	}
	if got := sel(scheduling.NewRequirement(LabelBillingPeriod, corev1.NodeSelectorOpIn, "monthly")); len(got) != 0 {
		t.Errorf("default filter offers monthly: %v", got)
	}

	// The same selection done early by the catalogue through Filter.Requirements.
	nodePool := scheduling.NewRequirements(
		scheduling.NewRequirement(LabelGPUModel, corev1.NodeSelectorOpIn, "l40s", "h100"),
		scheduling.NewRequirement(LabelMemoryGiB, corev1.NodeSelectorOpGt, "300"),
	)
	early := mustTypes(t, e.cat, Filter{Requirements: nodePool})
	if len(early) != 1 || early[0].Name != "EM-T620E-H100" {
		t.Errorf("Filter.Requirements gpu-model In [l40s h100], memory-gib Gt 300 gives %d types", len(early))
	}
	other := mustTypes(t, e.cat, Filter{Requirements: scheduling.NewRequirements(
		scheduling.NewRequirement(LabelGPUModel, corev1.NodeSelectorOpIn, "l40s"))})
	if len(other) != 1 || other[0].Name != "EM-T220E-L40S" {
		t.Errorf("a different requirement reused the cached answer: %d types", len(other))
	}
}

func TestHourlyAndMonthlyCollapse(t *testing.T) {
	e := newEnv(t, false)
	both := []BillingPeriod{BillingMonthly, BillingHourly}
	its := mustTypes(t, e.cat, Filter{BillingPeriods: both})
	it := find(t, its, "EM-I220E-NVME")
	// One type, one offering per (zone, billing) where the offer exists: fr-par-1, fr-par-2, nl-ams-1,
	// nl-ams-2, pl-waw-2, pl-waw-3 all carry iridium.
	if len(it.Offerings) != 12 {
		t.Fatalf("%d offerings, want 12 (6 zones x 2 periods)", len(it.Offerings))
	}
	if got := it.Requirements.Get(LabelBillingPeriod).Values(); len(got) != 2 {
		t.Errorf("billing-period values %v", got)
	}
	if got := it.Requirements.Get(corev1.LabelTopologyRegion).Values(); strings.Join(slices.Sorted(slices.Values(got)), ",") != "fr-par,nl-ams,pl-waw" {
		t.Errorf("regions %v", got)
	}
	// The hourly-only EM-A116X-SSD and the monthly-only EM-A115X-SSD stay separate types.
	if it := find(t, its, "EM-A116X-SSD"); hasOffering(it, "fr-par-2", BillingMonthly) || !hasOffering(it, "fr-par-2", BillingHourly) {
		t.Errorf("EM-A116X-SSD offerings: %v", it.Offerings)
	}
	if it := find(t, its, "EM-A115X-SSD"); !hasOffering(it, "fr-par-2", BillingMonthly) || hasOffering(it, "fr-par-2", BillingHourly) {
		t.Errorf("EM-A115X-SSD offerings: %v", it.Offerings)
	}
	// Default filter: hourly only, so the monthly-only offer disappears.
	for _, it := range mustTypes(t, e.cat, Filter{}) {
		if it.Name == "EM-A115X-SSD" {
			t.Error("monthly-only offer present under the hourly default")
		}
		for _, o := range it.Offerings {
			if o.Requirements.Get(LabelBillingPeriod).Any() != string(BillingHourly) {
				t.Errorf("%s: non-hourly offering under the default filter", it.Name)
			}
		}
	}
	// Zone filter.
	its = mustTypes(t, e.cat, Filter{Zones: []string{"pl-waw-3"}})
	for _, it := range its {
		if v := it.Requirements.Get(corev1.LabelTopologyZone).Values(); len(v) != 1 || v[0] != "pl-waw-3" {
			t.Errorf("%s zones %v", it.Name, v)
		}
		if r, _ := label(it, LabelOfferRange); r != "iridium" {
			t.Errorf("pl-waw-3 carries %s of range %s", it.Name, r)
		}
	}
	if len(its) == 0 {
		t.Fatal("no instance types in pl-waw-3")
	}
	if its := mustTypes(t, e.cat, Filter{Zones: []string{"it-mil-1"}}); len(its) != 0 {
		t.Errorf("unknown zone gives %d types", len(its))
	}
}

func TestPrices(t *testing.T) {
	e := newEnv(t, false)
	price := func(commitment int, name string, billing BillingPeriod) float64 {
		its := mustTypes(t, e.cat, Filter{Zones: []string{"fr-par-2"}, BillingPeriods: BillingPeriods, CommitmentMonths: commitment})
		return offering(t, find(t, its, name), "fr-par-2", billing).Price
	}
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	if got := price(0, "EM-I220E-NVME", BillingHourly); !near(got, 0.548) {
		t.Errorf("hourly EM-I220E-NVME %v, want 0.548", got)
	}
	if got := price(0, "EM-T620E-H100", BillingHourly); !near(got, 9.589) {
		t.Errorf("hourly EM-T620E-H100 %v, want 9.589", got)
	}
	// Monthly 199.99/month with a 199.99 fee: over 1 month the fee doubles the cost, over 12 it is 1/12.
	if got := price(0, "EM-I220E-NVME", BillingMonthly); !near(got, (199.99+199.99)/730) {
		t.Errorf("monthly, no commitment %v", got)
	}
	if got := price(1, "EM-I220E-NVME", BillingMonthly); !near(got, (199.99+199.99)/730) {
		t.Errorf("monthly, 1 month %v", got)
	}
	m12 := price(12, "EM-I220E-NVME", BillingMonthly)
	if !near(m12, (199.99+199.99/12)/730) {
		t.Errorf("monthly, 12 months %v", m12)
	}
	if m12 >= price(12, "EM-I220E-NVME", BillingHourly) {
		t.Errorf("a 12-month commitment (%v/h) should beat hourly", m12)
	}
	// The RISC-V board: monthly has no fee.
	if got := price(3, "EM-RV1-C4M16S128-A", BillingMonthly); !near(got, 15.99/730) {
		t.Errorf("monthly RV1 %v", got)
	}
}

func TestStock(t *testing.T) {
	e := newEnv(t, false)
	its := mustTypes(t, e.cat, Filter{Zones: []string{"fr-par-2"}, BillingPeriods: BillingPeriods})
	for _, tc := range []struct {
		name    string
		billing BillingPeriod
		avail   bool
	}{
		{"EM-L420E-NVME", BillingHourly, false}, // empty
		{"EM-A315X-SSD", BillingHourly, true},   // low
		{"EM-A315X-SSD", BillingMonthly, false}, // empty monthly
		{"EM-RV1-C4M16S128-A", BillingHourly, false},
		{"EM-RV1-C4M16S128-A", BillingMonthly, true},
		{"EM-I220E-NVME", BillingHourly, true}, // available
	} {
		if got := offering(t, find(t, its, tc.name), "fr-par-2", tc.billing).Available; got != tc.avail {
			t.Errorf("%s %s available = %v, want %v", tc.name, tc.billing, got, tc.avail)
		}
	}
	if got := testutil.ToFloat64(e.cat.metrics.offers.WithLabelValues("fr-par-2", "hourly", "empty")); got != 4 {
		t.Errorf("offers{fr-par-2,hourly,empty} = %v, want 4", got)
	}
}

func TestUnavailableCache(t *testing.T) {
	e := newEnv(t, false)
	f := Filter{Zones: []string{"fr-par-2"}, BillingPeriods: BillingPeriods}
	avail := func(billing BillingPeriod) bool {
		return offering(t, find(t, mustTypes(t, e.cat, f), "EM-I220E-NVME"), "fr-par-2", billing).Available
	}
	if !avail(BillingHourly) || !avail(BillingMonthly) {
		t.Fatal("EM-I220E-NVME should start available")
	}
	e.cat.MarkUnavailable("fr-par-2", "EM-I220E-NVME", BillingHourly, ReasonOutOfStock)
	if avail(BillingHourly) || !avail(BillingMonthly) {
		t.Fatal("out_of_stock mark must hide the hourly offering only")
	}
	if r, ok := e.cat.Unavailable("fr-par-2", "EM-I220E-NVME", BillingHourly); !ok || r != ReasonOutOfStock {
		t.Fatalf("Unavailable = %q, %v", r, ok)
	}
	e.clock.Step(DefaultOutOfStockTTL - time.Second)
	if avail(BillingHourly) {
		t.Fatal("mark expired early")
	}
	e.clock.Step(time.Second)
	if !avail(BillingHourly) {
		t.Fatal("out_of_stock mark did not expire after its TTL")
	}
	if got := testutil.ToFloat64(e.cat.metrics.expiries.WithLabelValues("out_of_stock")); got != 1 {
		t.Errorf("expiries{out_of_stock} = %v", got)
	}

	// Quota lasts longer; a later out_of_stock mark does not shorten it.
	e.cat.MarkUnavailable("fr-par-2", "EM-I220E-NVME", BillingMonthly, ReasonQuota)
	e.cat.MarkUnavailable("fr-par-2", "EM-I220E-NVME", BillingMonthly, ReasonOutOfStock)
	if got := testutil.ToFloat64(e.cat.metrics.unavailable.WithLabelValues("out_of_stock")) +
		testutil.ToFloat64(e.cat.metrics.unavailable.WithLabelValues("quota")); got != 1 {
		t.Errorf("unavailable_offerings total = %v, want 1", got)
	}
	e.clock.Step(DefaultOutOfStockTTL + time.Minute)
	if avail(BillingMonthly) {
		t.Fatal("quota mark shortened by a later out_of_stock mark")
	}
	e.clock.Step(DefaultQuotaTTL)
	if !avail(BillingMonthly) {
		t.Fatal("quota mark did not expire")
	}
	if got := testutil.ToFloat64(e.cat.metrics.marks.WithLabelValues("quota")); got != 1 {
		t.Errorf("marks{quota} = %v", got)
	}
	if got := testutil.ToFloat64(e.cat.metrics.marks.WithLabelValues("out_of_stock")); got != 2 {
		t.Errorf("marks{out_of_stock} = %v", got)
	}

	// Bad marks are ignored, not stored.
	e.cat.MarkUnavailable("", "EM-I220E-NVME", BillingHourly, ReasonQuota)
	e.cat.MarkUnavailable("fr-par-2", "EM-I220E-NVME", "weekly", ReasonQuota)
	if len(e.cat.unavailable) != 0 {
		t.Errorf("invalid marks stored: %v", e.cat.unavailable)
	}
}

func TestCacheRebuildsOnlyOnChange(t *testing.T) {
	e := newEnv(t, false)
	builds := func() float64 { return testutil.ToFloat64(e.cat.metrics.builds) }
	f := Filter{Zones: []string{"fr-par-2", "nl-ams-1"}}
	a := mustTypes(t, e.cat, f)
	b := mustTypes(t, e.cat, Filter{Zones: []string{"nl-ams-1", "fr-par-2", "nl-ams-1"}}) // same filter
	if builds() != 1 || a[0] != b[0] {
		t.Fatalf("equal filters built %v times", builds())
	}
	mustTypes(t, e.cat, Filter{Zones: f.Zones, CommitmentMonths: 6})
	if builds() != 2 {
		t.Fatalf("a different filter did not build: %v", builds())
	}
	e.cat.MarkUnavailable("fr-par-2", "EM-A116X-SSD", BillingHourly, ReasonQuota)
	mustTypes(t, e.cat, f)
	if builds() != 3 {
		t.Fatalf("a mark did not rebuild: %v", builds())
	}
	mustTypes(t, e.cat, f)
	e.cat.ObserveCapacity("EM-A116X-SSD", "", corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("31Gi")})
	e.cat.ObserveCapacity("EM-A116X-SSD", "", corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("31Gi")}) // same: no change
	mustTypes(t, e.cat, f)
	if builds() != 4 {
		t.Fatalf("builds = %v after one capacity observation, want 4", builds())
	}
	// Callers cannot disturb the cache by reordering their slice.
	got := mustTypes(t, e.cat, f)
	got[0], got[1] = got[1], got[0]
	if again := mustTypes(t, e.cat, f); again[0].Name > again[1].Name {
		t.Fatal("caller's reordering leaked into the cache")
	}
}

func TestObservedCapacity(t *testing.T) {
	e := newEnv(t, false)
	f := Filter{Zones: []string{"fr-par-2"}}
	before := find(t, mustTypes(t, e.cat, f), "EM-I220E-NVME")
	if want := int64(128e9*(1-memoryReserveFraction)-memoryReserveFixed) >> 20 << 20; before.Capacity.Memory().Value() != want {
		t.Fatalf("estimated memory %d, want %d", before.Capacity.Memory().Value(), want)
	}
	measured := corev1.ResourceList{
		corev1.ResourceMemory:           resource.MustParse("131546752Ki"),
		corev1.ResourceEphemeralStorage: resource.MustParse("936Gi"),
		corev1.ResourceCPU:              resource.MustParse("0"), // zero: ignored
		corev1.ResourcePods:             resource.MustParse("250"),
	}
	e.cat.ObserveCapacity("EM-I220E-NVME", "", measured)
	after := find(t, mustTypes(t, e.cat, f), "EM-I220E-NVME")
	if after.Capacity.Memory().Cmp(measured[corev1.ResourceMemory]) != 0 {
		t.Errorf("memory %s, want measured %s", after.Capacity.Memory(), measured.Memory())
	}
	if after.Capacity.StorageEphemeral().Cmp(measured[corev1.ResourceEphemeralStorage]) != 0 {
		t.Errorf("ephemeral-storage %s", after.Capacity.StorageEphemeral())
	}
	if after.Capacity.Cpu().Value() != 32 || after.Capacity.Pods().Value() != DefaultMaxPods {
		t.Errorf("cpu %s pods %s: zero cpu and pods must not be taken from the node", after.Capacity.Cpu(), after.Capacity.Pods())
	}
	if other := find(t, mustTypes(t, e.cat, f), "EM-I120E-NVME"); other.Capacity.Memory().Cmp(measured[corev1.ResourceMemory]) == 0 {
		t.Error("measurement leaked to another offer")
	}
}

func TestOverhead(t *testing.T) {
	e := newEnv(t, false)
	it := find(t, mustTypes(t, e.cat, Filter{Zones: []string{"fr-par-2"}}), "EM-I220E-NVME")
	// 32 threads: 60 + 10 + 10 + 28000*0.0025=70 -> 150m.
	if got := it.Overhead.KubeReserved.Cpu().MilliValue(); got != 150 {
		t.Errorf("default kube-reserved cpu %dm, want 150m", got)
	}
	if got := it.Overhead.KubeReserved.Memory().Value(); got != (11*110+255)<<20 {
		t.Errorf("default kube-reserved memory %d", got)
	}
	if got := it.Overhead.SystemReserved.Memory().String(); got != "192Mi" {
		t.Errorf("default system-reserved memory %s", got)
	}
	storage := it.Capacity.StorageEphemeral().Value()
	if got := it.Overhead.EvictionThreshold.StorageEphemeral().Value(); got != int64(math.Ceil(float64(storage)*0.10)) {
		t.Errorf("eviction nodefs %d, want 10%% of %d", got, storage)
	}

	pods := int32(250)
	custom := Filter{Zones: []string{"fr-par-2"}, Kubelet: KubeletSettings{
		KubeReserved:   map[string]string{"cpu": "500m", "memory": "2Gi"},
		SystemReserved: map[string]string{"memory": "1Gi", "pid": "1000"},
		EvictionHard:   map[string]string{"memory.available": "5%", "nodefs.available": "20Gi"},
		MaxPods:        &pods,
	}}
	it = find(t, mustTypes(t, e.cat, custom), "EM-I220E-NVME")
	if it.Overhead.KubeReserved.Cpu().String() != "500m" || it.Overhead.KubeReserved.Memory().String() != "2Gi" {
		t.Errorf("kube-reserved %v", it.Overhead.KubeReserved)
	}
	if it.Overhead.SystemReserved.Memory().String() != "1Gi" || it.Overhead.SystemReserved.Cpu().String() != "50m" {
		t.Errorf("system-reserved %v", it.Overhead.SystemReserved)
	}
	if _, ok := it.Overhead.SystemReserved["pid"]; ok {
		t.Error("pid reservation counted as a resource")
	}
	if got, want := it.Overhead.EvictionThreshold.Memory().Value(), int64(math.Ceil(float64(it.Capacity.Memory().Value())*0.05)); got != want {
		t.Errorf("eviction memory %d, want %d", got, want)
	}
	if it.Overhead.EvictionThreshold.StorageEphemeral().String() != "20Gi" || it.Capacity.Pods().Value() != 250 {
		t.Errorf("eviction storage %s pods %s", it.Overhead.EvictionThreshold.StorageEphemeral(), it.Capacity.Pods())
	}
}

func TestFilterErrors(t *testing.T) {
	e := newEnv(t, false)
	neg := int32(0)
	for name, tc := range map[string]struct {
		f    Filter
		want string
	}{
		"zone":          {Filter{Zones: []string{"fr par 2"}}, "field zones"},
		"billing":       {Filter{BillingPeriods: []BillingPeriod{"weekly"}}, "field billingPeriods"},
		"commitment":    {Filter{CommitmentMonths: -1}, "field commitmentMonths"},
		"commitment 40": {Filter{CommitmentMonths: 40}, "field commitmentMonths"},
		"maxPods":       {Filter{Kubelet: KubeletSettings{MaxPods: &neg}}, "field kubelet.maxPods"},
		"kubeReserved":  {Filter{Kubelet: KubeletSettings{KubeReserved: map[string]string{"memory": "lots"}}}, "kubelet.kubeReserved[memory]"},
		"negative":      {Filter{Kubelet: KubeletSettings{SystemReserved: map[string]string{"cpu": "-1"}}}, "kubelet.systemReserved[cpu]"},
		"evictionHard":  {Filter{Kubelet: KubeletSettings{EvictionHard: map[string]string{"memory.available": "120%"}}}, "kubelet.evictionHard[memory.available]"},
		"eviction junk": {Filter{Kubelet: KubeletSettings{EvictionHard: map[string]string{"nodefs.available": "x"}}}, "kubelet.evictionHard[nodefs.available]"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := e.cat.InstanceTypes(context.Background(), tc.f); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to name %q", err, tc.want)
			}
		})
	}
}

func TestBillingPeriodsFor(t *testing.T) {
	req := func(op corev1.NodeSelectorOperator, v ...string) scheduling.Requirements {
		return scheduling.NewRequirements(scheduling.NewRequirement(LabelBillingPeriod, op, v...))
	}
	both := []BillingPeriod{BillingHourly, BillingMonthly}
	for name, tc := range map[string]struct {
		allowed []BillingPeriod
		reqs    scheduling.Requirements
		want    []BillingPeriod
		ok      bool
	}{
		"nothing said":                   {nil, nil, []BillingPeriod{BillingHourly}, true},
		"nodeclass both, pool silent":    {both, scheduling.NewRequirements(), []BillingPeriod{BillingHourly}, true},
		"nodeclass both, pool monthly":   {both, req(corev1.NodeSelectorOpIn, "monthly"), []BillingPeriod{BillingMonthly}, true},
		"nodeclass both, pool either":    {both, req(corev1.NodeSelectorOpIn, "monthly", "hourly"), both, true},
		"nodeclass both, not hourly":     {both, req(corev1.NodeSelectorOpNotIn, "hourly"), []BillingPeriod{BillingMonthly}, true},
		"nodeclass hourly, pool monthly": {[]BillingPeriod{BillingHourly}, req(corev1.NodeSelectorOpIn, "monthly"), nil, false},
		"nodeclass monthly only":         {[]BillingPeriod{BillingMonthly}, nil, []BillingPeriod{BillingMonthly}, true},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := BillingPeriodsFor(tc.allowed, tc.reqs)
			if ok != tc.ok || len(got) != len(tc.want) {
				t.Fatalf("got %v %v, want %v %v", got, ok, tc.want, tc.ok)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestOfferAndOrigin(t *testing.T) {
	e := newEnv(t, false)
	o, ok := e.cat.Offer("fr-par-2", "EM-I220E-NVME", BillingHourly)
	if !ok || o.ID != "fd7605a7-7493-49ba-9019-0e9c2897d4a0" { // the recorded ID
		t.Fatalf("Offer = %+v, %v", o, ok)
	}
	if o.SubscriptionPeriod != baremetal.OfferSubscriptionPeriodHourly || o.Zone != scw.ZoneFrPar2 {
		t.Errorf("offer %s %s", o.SubscriptionPeriod, o.Zone)
	}
	if m, ok := e.cat.Offer("fr-par-2", "EM-I220E-NVME", BillingMonthly); !ok || m.ID == o.ID || o.MonthlyOfferID == nil || *o.MonthlyOfferID != m.ID {
		t.Errorf("monthly offer %+v does not match the hourly offer's monthly_offer_id", m)
	}
	for _, miss := range [][3]string{{"fr-par-9", "EM-I220E-NVME", "hourly"}, {"fr-par-2", "EM-NOPE", "hourly"}, {"fr-par-2", "EM-A116X-SSD", "monthly"}} {
		if _, ok := e.cat.Offer(miss[0], miss[1], BillingPeriod(miss[2])); ok {
			t.Errorf("Offer%v found", miss)
		}
	}
	if origin, _ := e.cat.ZoneOrigin("fr-par-2"); origin != snapshot.OriginRecorded {
		t.Errorf("fr-par-2 origin %s", origin)
	}
	if origin, _ := e.cat.ZoneOrigin("nl-ams-2"); origin != snapshot.OriginDerived {
		t.Errorf("nl-ams-2 origin %s", origin)
	}
	// Derived zones are never orderable, whatever their invented stock says.
	for _, it := range mustTypes(t, e.cat, Filter{Zones: []string{"nl-ams-1", "nl-ams-2", "pl-waw-2", "pl-waw-3"}, BillingPeriods: BillingPeriods}) {
		if n := len(it.Offerings.Available()); n != 0 {
			t.Errorf("%s: %d available offerings in derived zones", it.Name, n)
		}
	}
	// fr-par-1: recorded hourly offers are orderable by their stock; its derived monthly offers are not.
	hourly := 0
	for _, it := range mustTypes(t, e.cat, Filter{Zones: []string{"fr-par-1"}, BillingPeriods: BillingPeriods}) {
		for _, of := range it.Offerings.Available() {
			if of.Requirements.Get(LabelBillingPeriod).Any() != string(BillingHourly) {
				t.Errorf("%s: derived monthly offering of fr-par-1 available", it.Name)
			}
			hourly++
		}
	}
	if hourly == 0 {
		t.Error("no recorded fr-par-1 hourly offering is available")
	}
	if _, ok := e.cat.ZoneOrigin("mars-1"); ok {
		t.Error("unknown zone has an origin")
	}
}

func TestBadSnapshotOptionFallsBackToEmbedded(t *testing.T) {
	c := New(Options{Snapshot: []byte(`{"zones": {`)})
	if its := mustTypes(t, c, Filter{}); len(its) < 30 {
		t.Fatalf("fallback to the embedded snapshot gave %d types", len(its))
	}
	if err := c.Refresh(context.Background()); !errors.Is(err, ErrNoAPI) {
		t.Fatalf("Refresh without client: %v", err)
	}
}

func TestRefresh(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	f := Filter{Zones: []string{"fr-par-2"}, BillingPeriods: BillingPeriods}
	// The snapshot is no listing of this process: an offer it lacks says nothing.
	for _, z := range snapshot.Zones {
		if e.cat.Refreshed(string(z)) {
			t.Errorf("%s refreshed before any refresh", z)
		}
	}
	if err := e.cat.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	for _, z := range snapshot.Zones {
		if origin, _ := e.cat.ZoneOrigin(string(z)); origin != snapshot.OriginLive || !e.cat.Refreshed(string(z)) {
			t.Errorf("%s origin %s after refresh (refreshed: %v)", z, origin, e.cat.Refreshed(string(z)))
		}
		if got := testutil.ToFloat64(e.cat.metrics.lastSuccess.WithLabelValues(string(z))); got != float64(t0.Unix()) {
			t.Errorf("%s last success %v", z, got)
		}
	}
	if got := testutil.ToFloat64(e.cat.metrics.refreshes.WithLabelValues("fr-par-2", "monthly", "success")); got != 1 {
		t.Errorf("refresh_total{fr-par-2,monthly,success} = %v", got)
	}
	if !offering(t, find(t, mustTypes(t, e.cat, f), "EM-I220E-NVME"), "fr-par-2", BillingHourly).Available {
		t.Fatal("EM-I220E-NVME should be available")
	}
	// Derived zones become orderable once the API has answered for them.
	live := find(t, mustTypes(t, e.cat, Filter{Zones: []string{"nl-ams-1"}}), "EM-I220E-NVME")
	served, _ := e.cat.Offer("nl-ams-1", "EM-I220E-NVME", BillingHourly)
	if want := served.Stock != baremetal.OfferStockEmpty; offering(t, live, "nl-ams-1", BillingHourly).Available != want {
		t.Fatalf("nl-ams-1 after refresh: available %v, stock %s", !want, served.Stock)
	}

	// Stock and price move on the API: the next refresh shows it.
	snap, _ := snapshot.Embedded()
	hourly := snap.Zones["fr-par-2"].Hourly
	for _, o := range hourly {
		if o.Name == "EM-I220E-NVME" {
			o.Stock = baremetal.OfferStockEmpty
			o.PricePerHour = &scw.Money{CurrencyCode: "EUR", Nanos: 600000000}
		}
	}
	e.srv.Set("fr-par-2", "hourly", hourly)
	builds := testutil.ToFloat64(e.cat.metrics.builds)
	e.clock.Step(time.Minute)
	if err := e.cat.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	off := offering(t, find(t, mustTypes(t, e.cat, f), "EM-I220E-NVME"), "fr-par-2", BillingHourly)
	if got := testutil.ToFloat64(e.cat.metrics.builds); got == builds {
		t.Errorf("a changed answer did not rebuild instance types (%v builds)", got)
	}
	if off.Available || off.Price != 0.6 {
		t.Fatalf("after refresh: available %v price %v", off.Available, off.Price)
	}
	// An unchanged answer does not invalidate the cache.
	builds = testutil.ToFloat64(e.cat.metrics.builds)
	if err := e.cat.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	mustTypes(t, e.cat, f)
	if got := testutil.ToFloat64(e.cat.metrics.builds); got != builds {
		t.Errorf("identical refresh rebuilt instance types (%v -> %v)", builds, got)
	}

	// 5xx and 429 through the real SDK: the refresh fails, the data stays, metrics and last success say so.
	for _, code := range []int{http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusTooManyRequests} {
		e.srv.FailWith(func(r *http.Request) int {
			if strings.Contains(r.URL.Path, "/fr-par-2/") {
				return code
			}
			return 0
		})
		e.clock.Step(time.Minute)
		err := e.cat.Refresh(ctx)
		if err == nil || !strings.Contains(err.Error(), "fr-par-2") {
			t.Fatalf("%d: Refresh err = %v", code, err)
		}
		if strings.Contains(err.Error(), "nl-ams-1") {
			t.Fatalf("%d: healthy zone reported failing: %v", code, err)
		}
		off := offering(t, find(t, mustTypes(t, e.cat, f), "EM-I220E-NVME"), "fr-par-2", BillingHourly)
		if off.Price != 0.6 {
			t.Fatalf("%d: data lost after a failed refresh: price %v", code, off.Price)
		}
		if got := testutil.ToFloat64(e.cat.metrics.lastSuccess.WithLabelValues("fr-par-2")); got != float64(t0.Add(time.Minute).Unix()) {
			t.Errorf("%d: last success moved to %v", code, got)
		}
		if got := testutil.ToFloat64(e.cat.metrics.lastSuccess.WithLabelValues("nl-ams-1")); got != float64(e.clock.Now().Unix()) {
			t.Errorf("%d: healthy zone's last success %v", code, got)
		}
	}
	if got := testutil.ToFloat64(e.cat.metrics.refreshes.WithLabelValues("fr-par-2", "hourly", "error")); got != 3 {
		t.Errorf("refresh_total{fr-par-2,hourly,error} = %v, want 3", got)
	}
	if n := testutil.CollectAndCount(e.cat.metrics.refreshSeconds); n != 2 {
		t.Errorf("refresh_duration_seconds has %d series, want success and error", n)
	}
	// Metric names as documented, on the registry the caller gave.
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"refresh_total", "refresh_duration_seconds", "last_successful_refresh_timestamp_seconds", "offers", "zone_data_origin", "instance_type_builds_total"} {
		if !names[metricPrefix+n] {
			t.Errorf("metric %s%s not registered", metricPrefix, n)
		}
	}
}

func TestRefreshTimeout(t *testing.T) {
	e := newEnv(t, true)
	block := make(chan struct{})
	defer close(block)
	e.srv.FailWith(func(r *http.Request) int {
		select {
		case <-block:
		case <-r.Context().Done():
		}
		return http.StatusGatewayTimeout
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := e.cat.Refresh(ctx); err == nil {
		t.Fatal("Refresh with a hung API returned no error")
	}
	if origin, _ := e.cat.ZoneOrigin("fr-par-2"); origin != snapshot.OriginRecorded {
		t.Fatalf("hung refresh replaced data: origin %s", origin)
	}
}

func TestStart(t *testing.T) {
	e := newEnv(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.cat.Start(ctx); close(done) }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	refreshes := func() float64 {
		return testutil.ToFloat64(e.cat.metrics.refreshes.WithLabelValues("fr-par-2", "monthly", "success"))
	}
	waitFor("the first refresh", func() bool { return refreshes() == 1 })
	waitFor("the refresh timer", e.clock.HasWaiters)
	// Jitter keeps the next refresh within interval ± 20%.
	e.clock.Step(time.Duration(float64(DefaultRefreshInterval) * (1 - DefaultRefreshJitter) * 0.99))
	time.Sleep(20 * time.Millisecond)
	if refreshes() != 1 {
		t.Fatal("refreshed before interval - jitter")
	}
	e.clock.Step(time.Duration(float64(DefaultRefreshInterval) * 0.5)) // past interval + jitter
	waitFor("the second refresh", func() bool { return refreshes() == 2 })
	cancel()
	<-done
}

func TestStartWithoutClientWaitsForContext(t *testing.T) {
	c := New(Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Start(ctx); close(done) }()
	cancel()
	<-done
}

// Before any mark, each reason's unavailable series exist at zero, so a
// dashboard graphs zero rather than nothing and increase() sees the first mark.
func TestUnavailableSeriesStartAtZero(t *testing.T) {
	e := newEnv(t, false)
	for name, c := range map[string]prometheus.Collector{"unavailable_offerings": e.cat.metrics.unavailable,
		"unavailable_marks_total": e.cat.metrics.marks, "unavailable_expiries_total": e.cat.metrics.expiries} {
		if n := testutil.CollectAndCount(c); n != 4 {
			t.Errorf("%s: %d series before any mark, want 4 (out_of_stock, quota, refused, install_failed)", name, n)
		}
	}
	for _, r := range []string{"out_of_stock", "quota", "refused", "install_failed"} {
		if got := testutil.ToFloat64(e.cat.metrics.unavailable.WithLabelValues(r)); got != 0 {
			t.Errorf("unavailable_offerings{reason=%s} = %v, want 0", r, got)
		}
	}
}

// An offer has the same ID in every zone (recorded): the catalogue keys offerings by zone and offer, so
// what happens to an offer in one zone never leaks into another.
func TestSharedOfferIDsStayPerZone(t *testing.T) {
	e := newEnv(t, false)
	p1, ok1 := e.cat.Offer("fr-par-1", "EM-I220E-NVME", BillingHourly)
	p2, ok2 := e.cat.Offer("fr-par-2", "EM-I220E-NVME", BillingHourly)
	if !ok1 || !ok2 || p1.ID != p2.ID || p1.Zone != scw.ZoneFrPar1 || p2.Zone != scw.ZoneFrPar2 {
		t.Fatalf("EM-I220E-NVME: fr-par-1 %+v, fr-par-2 %+v; want one ID, each offer in its zone", p1, p2)
	}
	f := Filter{Zones: []string{"fr-par-1", "fr-par-2"}}
	it := find(t, mustTypes(t, e.cat, f), "EM-I220E-NVME")
	if !offering(t, it, "fr-par-1", BillingHourly).Available || !offering(t, it, "fr-par-2", BillingHourly).Available {
		t.Fatal("EM-I220E-NVME should be available in both zones (recorded stock)")
	}
	e.cat.MarkUnavailable("fr-par-2", "EM-I220E-NVME", BillingHourly, ReasonRefused)
	it = find(t, mustTypes(t, e.cat, f), "EM-I220E-NVME")
	if offering(t, it, "fr-par-2", BillingHourly).Available || !offering(t, it, "fr-par-1", BillingHourly).Available {
		t.Fatal("a refusal in fr-par-2 must set aside fr-par-2's offering only")
	}
	if reason, _ := e.cat.Unavailable("fr-par-2", "EM-I220E-NVME", BillingHourly); reason != ReasonRefused {
		t.Fatalf("reason %q", reason)
	}
	// Zones sell different offers: EM-L620E-NVME only in fr-par-1, EM-T620E-H100 only in fr-par-2.
	if _, ok := e.cat.Offer("fr-par-2", "EM-L620E-NVME", BillingHourly); ok {
		t.Error("fr-par-2 sells EM-L620E-NVME")
	}
	if _, ok := e.cat.Offer("fr-par-1", "EM-T620E-H100", BillingHourly); ok {
		t.Error("fr-par-1 sells EM-T620E-H100")
	}
}

// An offering whose hardware failed an install stays hidden for InstallFailedTTL (1h by default); out of
// stock hides one only for the out-of-stock TTL.
func TestInstallFailedAndOutOfStockTTLs(t *testing.T) {
	e := newEnv(t, false)
	hidden := func(offer string) bool {
		_, ok := e.cat.Unavailable("fr-par-2", offer, BillingHourly)
		return ok
	}
	e.cat.MarkUnavailable("fr-par-2", "EM-I220E-NVME", BillingHourly, ReasonInstallFailed)
	e.cat.MarkUnavailable("fr-par-2", "EM-A116X-SSD", BillingHourly, ReasonOutOfStock)
	e.clock.Step(DefaultOutOfStockTTL)
	if hidden("EM-A116X-SSD") {
		t.Error("out_of_stock mark outlived its TTL")
	}
	if !hidden("EM-I220E-NVME") {
		t.Fatal("install_failed mark expired with the out-of-stock TTL")
	}
	e.clock.Step(DefaultInstallFailedTTL - DefaultOutOfStockTTL - time.Second)
	if !hidden("EM-I220E-NVME") {
		t.Fatal("install_failed mark expired early")
	}
	e.clock.Step(time.Second)
	if hidden("EM-I220E-NVME") {
		t.Error("install_failed mark did not expire after its TTL")
	}
}

// A zone that keeps failing the same way (say, one the account cannot use,
// answering 404) is logged as an error once, not at every refresh; its
// recovery is told, and a new failure is an error again. Every failed
// refresh is still counted.
func TestRepeatedZoneFailureIsLoggedOnce(t *testing.T) {
	e := newEnv(t, true)
	var lines *testlog.Lines
	e.cat.log, lines = testlog.Capture(0)
	count := func(msg string) int { return lines.Count(`"msg"="` + msg) }
	ctx := context.Background()
	e.srv.FailWith(func(r *http.Request) int {
		if strings.Contains(r.URL.Path, "/pl-waw-2/") {
			return http.StatusNotFound
		}
		return 0
	})
	for range 3 {
		if err := e.cat.Refresh(ctx); err == nil || !strings.Contains(err.Error(), "pl-waw-2") {
			t.Fatalf("Refresh err = %v, want pl-waw-2's 404", err)
		}
	}
	if n := count("offer refresh failed"); n != 1 {
		t.Errorf("three refreshes failing the same way logged %d errors, want 1:\n%s", n, lines)
	}
	if got := testutil.ToFloat64(e.cat.metrics.refreshes.WithLabelValues("pl-waw-2", "hourly", "error")); got != 3 {
		t.Errorf("refresh_total{pl-waw-2,hourly,error} = %v, want 3", got)
	}
	e.srv.FailWith(func(*http.Request) int { return 0 })
	if err := e.cat.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count("offer refresh works again"); n != 1 {
		t.Errorf("the recovery logged %d times, want 1:\n%s", n, lines)
	}
	e.srv.FailWith(func(r *http.Request) int {
		if strings.Contains(r.URL.Path, "/pl-waw-2/") {
			return http.StatusNotFound
		}
		return 0
	})
	_ = e.cat.Refresh(ctx)
	if n := count("offer refresh failed"); n != 2 {
		t.Errorf("a failure after a recovery: %d errors in all, want 2:\n%s", n, lines)
	}
}
