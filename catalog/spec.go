package catalog

import (
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
)

var zonePattern = regexp.MustCompile(`^[a-z]{2}-[a-z]{3}-[0-9]+$`)

// spec is what an offer name means in hardware, computed once per data generation.
type spec struct {
	name   string
	arch   string
	labels map[string]string // our labels (single values); GPU labels absent on non-GPU offers
	cpu    resource.Quantity
	memory resource.Quantity // estimate after firmware/kernel reserve
	disks  []localdisks.Disk // the offer's disks, in its order
	gpus   int64
}

// Estimates of what a node does not get of the offer's hardware. The kernel keeps ~1.6% of RAM for its page
// tables (struct page) and firmware keeps a few hundred MiB; measured capacities (ObserveCapacity) replace
// these estimates.
const (
	memoryReserveFraction = 0.02
	memoryReserveFixed    = 256 << 20
)

func newSpec(o *baremetal.Offer) *spec {
	s := &spec{name: o.Name, labels: map[string]string{}}
	s.arch = OfferArch(o)
	s.readCPUs(o.CPUs)
	s.readMemory(o.Memories)
	s.readDisks(o.Disks)
	if n := len(o.Gpus); n > 0 && o.Gpus[0] != nil {
		s.gpus = int64(n)
		s.labels[LabelGPUCount] = strconv.Itoa(n)
		s.labels[LabelGPUModel] = gpuModel(o.Gpus[0].Name)
	}
	s.labels[LabelBandwidthPublicMbps] = strconv.FormatUint(o.Bandwidth/1e6, 10)
	s.labels[LabelBandwidthPrivateMbps] = strconv.FormatUint(o.PrivateBandwidth/1e6, 10)
	if r := labelValue(o.CommercialRange); r != "" {
		s.labels[LabelOfferRange] = r
	}
	for k, v := range s.labels {
		if v == "" {
			delete(s.labels, k)
		}
	}
	return s
}

// readCPUs sets the CPU capacity (threads) and labels; the model is the
// first CPU's.
func (s *spec) readCPUs(cpus []*baremetal.CPU) {
	var cores, threads uint32
	cpuName := ""
	for _, c := range cpus {
		if c == nil {
			continue
		}
		cores += c.CoreCount
		threads += c.ThreadCount
		if cpuName == "" {
			cpuName = c.Name
		}
	}
	s.cpu = *resource.NewQuantity(int64(threads), resource.DecimalSI)
	s.labels[LabelCPUVendor] = vendorOf(cpuName)
	s.labels[LabelCPUModel] = labelValue(cpuName)
	s.labels[LabelCPUCores] = strconv.FormatUint(uint64(cores), 10)
	s.labels[LabelCPUThreads] = strconv.FormatUint(uint64(threads), 10)
}

// readMemory sets the memory label and the allocatable estimate (the total
// less the system's reserve, in whole MiB).
func (s *spec) readMemory(memories []*baremetal.Memory) {
	var mem uint64
	for _, m := range memories {
		if m != nil {
			mem += uint64(m.Capacity)
		}
	}
	s.labels[LabelMemoryGiB] = strconv.FormatUint(uint64(math.Round(float64(mem)/1e9)), 10)
	est := int64(float64(mem)*(1-memoryReserveFraction)) - memoryReserveFixed
	s.memory = *resource.NewQuantity(max(est, 0)/(1<<20)*(1<<20), resource.BinarySI)
}

// readDisks sets the disk list and labels; the disk type is the smallest
// disk's.
func (s *spec) readDisks(disks []*baremetal.Disk) {
	var total uint64
	var smallest *baremetal.Disk
	for _, d := range disks {
		if d == nil {
			continue
		}
		total += uint64(d.Capacity)
		s.disks = append(s.disks, localdisks.Disk{SizeBytes: int64(d.Capacity), Rotational: diskType(d.Type) == "hdd"})
		if smallest == nil || d.Capacity < smallest.Capacity {
			smallest = d
		}
	}
	s.labels[LabelDiskCount] = strconv.Itoa(len(disks))
	s.labels[LabelDiskSizeGB] = strconv.FormatUint(uint64(math.Round(float64(total)/1e9)), 10)
	if smallest != nil {
		// Whichever disk em-imager picks, it is at least as big as the smallest one.
		s.labels[LabelDiskType] = diskType(smallest.Type)
	}
}

// machine lays the offer's disks out under a local-disk policy, the system
// disk being the one em-imager's --disk auto takes.
func (s *spec) machine(p localdisks.Policy) localdisks.Machine {
	return localdisks.Lay(p, s.disks, localdisks.SystemDisk(s.disks))
}

// capacity is the spec's capacity before measurements; pods come from the filter, ephemeral-storage from the
// disk the local-disk policy puts EPHEMERAL on.
func (s *spec) capacity(pods int64, m localdisks.Machine, observed corev1.ResourceList) corev1.ResourceList {
	rl := corev1.ResourceList{
		corev1.ResourceCPU:              s.cpu,
		corev1.ResourceMemory:           s.memory,
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(m.EphemeralBytes(), resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(pods, resource.DecimalSI),
	}
	if s.gpus > 0 {
		rl[ResourceNvidiaGPU] = *resource.NewQuantity(s.gpus, resource.DecimalSI)
	}
	for _, k := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage, ResourceNvidiaGPU} {
		if q, ok := observed[k]; ok && !q.IsZero() {
			rl[k] = q.DeepCopy()
		}
	}
	return rl
}

var riscvCPUs = []string{"th1520", "riscv", "risc-v", "sg2042", "jh7110", "u74"}
var armCPUs = []string{"ampere", "altra", "neoverse", "cavium", "thunderx", "graviton", "kunpeng", "arm", "aarch64"}

// x86CPUs are words of x86-64 CPU names: Intel's and AMD's server and desktop lines, as the offers name them
// ("Intel Xeon E5 2620 or equivalent", "AMD EPYC 8124P", "AMD Ryzen PRO 3600").
var x86CPUs = []string{"intel", "xeon", "amd", "epyc", "ryzen", "opteron", "pentium", "celeron", "atom"}

// OfferArch is the kubernetes.io/arch of an offer, as its instance type's requirement says: amd64, arm64,
// riscv64, or ArchitectureUnknown. The offer API has no architecture field; it is read from the CPU name.
func OfferArch(o *baremetal.Offer) string {
	cpuName := ""
	for _, c := range o.CPUs {
		if c != nil && cpuName == "" {
			cpuName = c.Name
		}
	}
	return archOf(cpuName, o.Tags)
}

// archOf tells the architecture from the CPU name (and the offer tags, which say "riscv" for the labs boards).
// amd64 only for a CPU known to be x86-64: an unknown CPU (a new ARM line, say) is ArchitectureUnknown rather
// than taken for amd64, which would order servers em-imager cannot install and bill each attempt.
func archOf(cpu string, tags []string) string {
	n := strings.ToLower(cpu)
	words := strings.FieldsFunc(n, func(r rune) bool { return r == ' ' || r == '-' || r == '_' || r == '(' || r == ')' })
	switch {
	case isRiscv(n, tags):
		return ArchitectureRiscv64
	case isArm(n, words):
		return karpv1.ArchitectureArm64
	case slices.ContainsFunc(words, func(w string) bool { return slices.Contains(x86CPUs, w) }):
		return karpv1.ArchitectureAmd64
	}
	return ArchitectureUnknown
}

// isRiscv: a RISC-V CPU name (n, lower case) or an offer tagged riscv.
func isRiscv(n string, tags []string) bool {
	return slices.ContainsFunc(riscvCPUs, func(s string) bool { return strings.Contains(n, s) }) ||
		slices.ContainsFunc(tags, func(t string) bool { return strings.EqualFold(t, "riscv") || strings.EqualFold(t, "risc-v") })
}

// isArm: a word of the CPU name is an ARM line (or starts with one: "ampereone"), or it is Apple's.
func isArm(n string, words []string) bool {
	for _, w := range words {
		if slices.ContainsFunc(armCPUs, func(s string) bool { return w == s || (len(s) > 3 && strings.HasPrefix(w, s)) }) {
			return true
		}
	}
	return strings.Contains(n, "apple m")
}

func vendorOf(cpu string) string {
	n := strings.ToLower(cpu)
	switch {
	case strings.Contains(n, "intel") || strings.Contains(n, "xeon"):
		return "intel"
	case strings.Contains(n, "amd") || strings.Contains(n, "epyc") || strings.Contains(n, "ryzen"):
		return "amd"
	case strings.Contains(n, "th1520"):
		return "thead" // T-Head, Alibaba's RISC-V core designer
	case strings.Contains(n, "ampere") || strings.Contains(n, "altra"):
		return "ampere"
	}
	f := strings.Fields(n)
	if len(f) == 0 {
		return ""
	}
	return labelValue(f[0])
}

func diskType(t string) string {
	switch strings.ToLower(t) {
	case "nvme":
		return "nvme"
	case "ssd", "sata_ssd":
		return "ssd"
	case "hdd", "sata", "sas":
		return "hdd"
	}
	return labelValue(t)
}

func gpuModel(name string) string {
	n := strings.ToLower(strings.TrimSpace(name))
	for _, vendor := range []string{"nvidia ", "amd ", "intel "} {
		n = strings.TrimPrefix(n, vendor)
	}
	return labelValue(n)
}

var nonLabel = regexp.MustCompile(`[^a-z0-9]+`)

// labelValue turns free text into a valid label value: lower case, runs of other characters as '-',
// at most 63 characters, starting and ending alphanumeric.
func labelValue(s string) string {
	v := strings.Trim(nonLabel.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if len(v) > 63 {
		v = strings.TrimRight(v[:63], "-")
	}
	return v
}
