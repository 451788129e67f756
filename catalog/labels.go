package catalog

import (
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
)

// LabelDomain is the prefix of every label the provider derives from an offer.
const LabelDomain = "karpenter-scaleway-em.io"

// Labels a NodePool or a pod can select on. Numeric labels hold plain integers so Gt/Lt work.
const (
	// LabelBillingPeriod is "hourly" or "monthly": an offering-level label (each instance type has offerings
	// for both where the offer exists).
	LabelBillingPeriod = LabelDomain + "/billing-period"
	// LabelCPUVendor is intel, amd, thead, ampere... (lower case).
	LabelCPUVendor = LabelDomain + "/cpu-vendor"
	// LabelCPUModel is the CPU name as Scaleway lists it, lower case, non-alphanumerics as '-'
	// (e.g. amd-epyc-8124p).
	LabelCPUModel = LabelDomain + "/cpu-model"
	// LabelCPUCores and LabelCPUThreads count all sockets.
	LabelCPUCores   = LabelDomain + "/cpu-cores"
	LabelCPUThreads = LabelDomain + "/cpu-threads"
	// LabelMemoryGiB is the nominal memory size the offer states (128 for a "128 GB" offer).
	LabelMemoryGiB = LabelDomain + "/memory-gib"
	// LabelDiskType is nvme, ssd, hdd (or mmc for the RISC-V labs boards): the type of the smallest disk.
	LabelDiskType = LabelDomain + "/disk-type"
	// LabelDiskCount counts the disks; LabelDiskSizeGB is their total raw size in GB (10^9 bytes).
	LabelDiskCount  = LabelDomain + "/disk-count"
	LabelDiskSizeGB = LabelDomain + "/disk-size-gb"
	// LabelGPUModel (e.g. l40s, h100) and LabelGPUCount exist only on GPU offers.
	LabelGPUModel = LabelDomain + "/gpu-model"
	LabelGPUCount = LabelDomain + "/gpu-count"
	// LabelBandwidthPublicMbps and LabelBandwidthPrivateMbps are the offer's included bandwidths.
	LabelBandwidthPublicMbps  = LabelDomain + "/bandwidth-public-mbps"
	LabelBandwidthPrivateMbps = LabelDomain + "/bandwidth-private-mbps"
	// LabelOfferRange is Scaleway's commercial range: aluminium, beryllium, iridium, lithium, titanium, labs...
	LabelOfferRange = LabelDomain + "/offer-range"
	// LabelLocalDisks is the NodeClass's local-disk policy (Unused, Ephemeral, UserVolumes, Raw): where EPHEMERAL
	// lives and what the other disks become.
	LabelLocalDisks = localdisks.LabelPolicy
	// LabelDataDiskCount counts the disks given to pods: user volumes under UserVolumes, raw disks under Raw, 0
	// otherwise.
	LabelDataDiskCount = localdisks.LabelDataDiskCount
	// LabelReservationID names the reserved offering a node was taken from: a group of spare servers (idle,
	// already paid) of one NodeClass, offer, zone and billing period (see docs/reserved-offerings.md). Only
	// reserved offerings have it; every other offering requires it not to exist. It is not in Labels (it is
	// no instance-type label) and is registered as Karpenter's ReservationIDLabel.
	LabelReservationID = LabelDomain + "/reservation-id"
)

// ArchitectureRiscv64 is the kubernetes.io/arch value of RISC-V offers (Karpenter names only amd64 and arm64).
const ArchitectureRiscv64 = "riscv64"

// ArchitectureUnknown is the kubernetes.io/arch value of an offer whose CPU name the catalogue does not
// recognise (a CPU Scaleway added after this release). It is no real architecture, so no image and no NodePool
// asking for amd64 or arm64 matches it: an offer is never ordered on a guess of its architecture.
const ArchitectureUnknown = "unknown"

// ResourceNvidiaGPU is the extended resource GPU offers carry.
const ResourceNvidiaGPU = "nvidia.com/gpu"

// Labels lists every label key above.
var Labels = []string{
	LabelBillingPeriod, LabelCPUVendor, LabelCPUModel, LabelCPUCores, LabelCPUThreads, LabelMemoryGiB,
	LabelDiskType, LabelDiskCount, LabelDiskSizeGB, LabelGPUModel, LabelGPUCount,
	LabelBandwidthPublicMbps, LabelBandwidthPrivateMbps, LabelOfferRange,
	LabelLocalDisks, LabelDataDiskCount,
}

func init() {
	// Registered as well-known so NodePools may use them in requirements and Karpenter treats an instance
	// type without a GPU as DoesNotExist for the GPU labels instead of rejecting the NodePool.
	karpv1.WellKnownLabels = karpv1.WellKnownLabels.Insert(Labels...)
	// Karpenter core reads the reservation label from these globals (its scheduler's ReservationManager, the
	// NodeClaim's requirements after scheduling, drift); set before any controller starts, in every binary and
	// test that builds offerings.
	karpv1.WellKnownLabels = karpv1.WellKnownLabels.Insert(LabelReservationID)
	cloudprovider.ReservationIDLabel = LabelReservationID
	cloudprovider.ReservedCapacityLabels.Insert(LabelReservationID)
}
