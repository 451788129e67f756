package catalog

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
)

// Talos' kubelet defaults for system-reserved (what Talos' own services keep) when the NodeClass sets none.
var defaultSystemReserved = corev1.ResourceList{
	corev1.ResourceCPU:              resource.MustParse("50m"),
	corev1.ResourceMemory:           resource.MustParse("192Mi"),
	corev1.ResourceEphemeralStorage: resource.MustParse("256Mi"),
}

// Kubelet's own hard eviction defaults.
var defaultEvictionHard = map[string]string{
	"memory.available": "100Mi",
	"nodefs.available": "10%",
}

// overhead computes kube-reserved, system-reserved and the hard eviction threshold for one capacity. Unset
// kube-reserved follows the curve most providers use (the GKE/EKS one): a share of CPU that shrinks with size
// and 11 MiB per pod + 255 MiB of memory.
func overhead(capacity corev1.ResourceList, n *normalized) *cloudprovider.InstanceTypeOverhead {
	cpu := capacity[corev1.ResourceCPU]
	pods := capacity[corev1.ResourcePods]
	kube := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(kubeReservedCPU(cpu.MilliValue()), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity((11*pods.Value()+255)<<20, resource.BinarySI),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Gi"),
	}
	for k, v := range n.kubeRes {
		kube[k] = v
	}
	sys := corev1.ResourceList{}
	for k, v := range defaultSystemReserved {
		sys[k] = v
	}
	for k, v := range n.sysRes {
		sys[k] = v
	}
	evict := corev1.ResourceList{}
	thresholds := map[string]string{}
	for k, v := range defaultEvictionHard {
		thresholds[k] = v
	}
	for k, v := range n.evictHard {
		thresholds[k] = v
	}
	for signal, res := range map[string]corev1.ResourceName{
		"memory.available": corev1.ResourceMemory,
		"nodefs.available": corev1.ResourceEphemeralStorage,
	} {
		v, ok := thresholds[signal]
		if !ok {
			continue
		}
		pct, q, _ := parseThreshold(v) // validated in normalize
		if pct >= 0 {
			total := capacity[res]
			q = *resource.NewQuantity(int64(math.Ceil(float64(total.Value())*pct/100)), resource.BinarySI)
		}
		evict[res] = q
	}
	// Only resources the node has reserved count (pid is not a schedulable resource).
	delete(kube, "pid")
	delete(sys, "pid")
	return &cloudprovider.InstanceTypeOverhead{KubeReserved: kube, SystemReserved: sys, EvictionThreshold: evict}
}

// kubeReservedCPU: 6% of the first core, 1% of the second, 0.5% of the next two, 0.25% of the rest (millicores).
func kubeReservedCPU(milli int64) int64 {
	var reserved float64
	for _, r := range []struct {
		start, end int64
		share      float64
	}{{0, 1000, 0.06}, {1000, 2000, 0.01}, {2000, 4000, 0.005}, {4000, math.MaxInt64, 0.0025}} {
		if milli <= r.start {
			break
		}
		reserved += float64(min(milli, r.end)-r.start) * r.share
	}
	return int64(reserved)
}
