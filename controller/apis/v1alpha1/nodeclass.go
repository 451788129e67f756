package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ScalewayElasticMetalNodeClassSpec says how servers for a NodePool are ordered,
// installed and joined.
// +kubebuilder:validation:XValidation:message="spec.image needs either manifestURL, or schematicID and talosVersion (bucket defaults to the controller's S3_BUCKET, chart value imageBucket.bucket)",rule="has(self.image.manifestURL) || (has(self.image.schematicID) && has(self.image.talosVersion))"
type ScalewayElasticMetalNodeClassSpec struct {
	// Zones where servers may be ordered. Empty means the controller's default zone. Adding or removing a zone
	// replaces no node (not a part of the drift hash): it says where new servers may be ordered.
	// +kubebuilder:validation:items:Enum:={fr-par-1,fr-par-2,nl-ams-1,nl-ams-2,pl-waw-2,pl-waw-3}
	// +kubebuilder:validation:MaxItems=6
	// +listType=set
	// +optional
	Zones []string `json:"zones,omitempty" hash:"ignore"`
	// ProjectID is the Scaleway project servers are ordered in. Empty means the controller's project; another
	// project makes the NodeClass not Ready (one controller serves one project, SCW_DEFAULT_PROJECT_ID).
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`
	// +optional
	ProjectID string `json:"projectID,omitempty" hash:"ignore"`
	// Image is the Talos image written to each server's disk.
	// +required
	Image ImageSpec `json:"image"`
	// Talos holds the join material and machine config settings.
	// +required
	Talos TalosSpec `json:"talos"`
	// Kubelet settings, rendered into each node's machine config and used for allocatable estimates.
	// +optional
	Kubelet *KubeletConfiguration `json:"kubelet,omitempty"`
	// Labels added to every node of this class (besides the NodeClaim's).
	// +kubebuilder:validation:XValidation:message="labels in the kubernetes.io, k8s.io and karpenter.sh domains are reserved",rule="self.all(k, !k.contains('kubernetes.io/') && !k.contains('k8s.io/') && !k.contains('karpenter.sh/'))"
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// PrivateNetworkIDs are Scaleway private networks (VPC) each server is attached to, with a VLAN interface in Talos.
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:Pattern=`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`
	// +listType=set
	// +optional
	PrivateNetworkIDs []string `json:"privateNetworkIDs,omitempty"`
	// Tags are extra Scaleway tags set on each server (key=value or plain words).
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:message="tags must not use the provider's own prefixes",rule="self.all(t, !t.startsWith('karpenter.sh/') && !t.startsWith('karpenter-scaleway-em/'))"
	// +optional
	Tags []string `json:"tags,omitempty" hash:"ignore"`
	// LocalDisks says what the disks Talos is not installed on are for; empty
	// means Unused. Unused: left as delivered, EPHEMERAL (and so the node's
	// ephemeral-storage) on the system disk; the other disks cost money and
	// serve nothing. Ephemeral: EPHEMERAL (container images, emptyDir, logs)
	// on the largest other disk, selected by its WWID or serial; the
	// remaining other disks stay unused. UserVolumes: each other disk an XFS
	// user volume mounted at /var/mnt/dataN, labelled on the Node, for a
	// local-PV provisioner; the data is lost when the node is deleted or
	// replaced (drift, consolidation, expiry). Raw: each other disk left
	// without partitions or filesystem, for Rook/Ceph and the like, which
	// then own replication. Every policy but Unused erases the other disks'
	// old signatures (a previous tenant's partitions, RAID and LVM labels)
	// in the rescue system. Talos has no software RAID: disks are never
	// striped or mirrored together. Changing the policy replaces the nodes
	// (drift): Talos applies volume provisioning only when a volume is first
	// created. What each policy costs: docs/local-disks.md.
	// +kubebuilder:validation:Enum:={Unused,Ephemeral,UserVolumes,Raw}
	// +optional
	LocalDisks string `json:"localDisks,omitempty"`
	// Billing says which billing periods servers may be ordered with.
	// +optional
	Billing BillingSpec `json:"billing,omitempty" hash:"ignore"`
	// Rescue holds the settings for the rescue-system install step.
	// +optional
	Rescue RescueSpec `json:"rescue,omitempty" hash:"ignore"`
	// Boot is how a server written from rescue starts Talos. Auto: em-imager jumps from the rescue kernel
	// into the image's own kernel with kexec where that kernel allows it, skipping the firmware's reboot (a
	// pre-imaged spare is a node in about a minute instead of three), else Scaleway's reboot as with Reboot;
	// the API then still shows the server with boot type rescue, so a firmware reboot of the node lands in
	// rescue until the controller reboots it normally (docs/kexec.md). Reboot: always Scaleway's reboot.
	// +kubebuilder:validation:Enum:={Auto,Reboot}
	// +kubebuilder:default:=Auto
	// +optional
	Boot string `json:"boot,omitempty" hash:"ignore"`
	// Limits cap what the NodeClass's servers cost, in euros (docs/money-safety.md).
	// +optional
	Limits *LimitsSpec `json:"limits,omitempty" hash:"ignore"`
	// WarmPool keeps servers delivered and idle in rescue (spares) for fast scale-up: a NodeClaim of the same
	// offer, zone and billing period takes one instead of waiting for a delivery (~3 min to Ready from a
	// pre-imaged server instead of ~10). Absent: no pool. Pool servers are paid whether used or not: hourly
	// ones by the hour until released, monthly ones for their whole month (docs/warm-pool.md). At most
	// WarmPoolMaxServers servers in all, so that a typo cannot order a rack.
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:XValidation:message="spec.warmPool holds at most 10 servers in all",rule="self.map(e, e.servers).sum() <= 10"
	// +optional
	WarmPool []WarmPoolEntry `json:"warmPool,omitempty" hash:"ignore"`
}

// WarmPoolMaxServers caps the servers of a NodeClass's warm pool: each one
// costs from ~0.1 EUR/h (or a month's fee), and a pool larger than a burst
// of scale-up is better served by a NodePool with more monthly capacity.
const WarmPoolMaxServers = 10

// WarmPoolEntry is N spare servers of one offer, zone and billing period.
type WarmPoolEntry struct {
	// Offer is the Elastic Metal offer name, e.g. EM-A115X-SSD.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +required
	Offer string `json:"offer"`
	// Zone of the servers; empty: the NodeClass's first zone (or the controller's default zone).
	// +kubebuilder:validation:Enum:={fr-par-1,fr-par-2,nl-ams-1,nl-ams-2,pl-waw-2,pl-waw-3}
	// +optional
	Zone string `json:"zone,omitempty"`
	// BillingPeriod of the orders: hourly (released when no longer wanted) or monthly (paid for the month;
	// kept as an ordinary spare until its paid period ends when no longer wanted).
	// +kubebuilder:validation:Enum:={hourly,monthly}
	// +kubebuilder:default:=hourly
	// +optional
	BillingPeriod string `json:"billingPeriod,omitempty"`
	// Servers kept ready; 0 keeps the entry but orders none.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	// +required
	Servers int32 `json:"servers"`
}

// LocalDisksUnused is the default local-disk policy (see package localdisks
// for the others).
const LocalDisksUnused = "Unused"

// AnnotationDisks is em-imager's list of a NodeClaim's server disks (stable
// identities, sizes; compact JSON written by the install): the config is
// rendered from it, also after a controller restart.
const AnnotationDisks = "karpenter-scaleway-em.io/disks"

// ImageSpec points at a Talos image published with `em-imager publish`.
// +kubebuilder:validation:XValidation:message="spec.image.manifestURL must be https or s3 unless spec.image.manifestSHA256 pins the manifest (the manifest carries the digests the image is verified with)",rule="!has(self.manifestURL) || self.manifestURL.startsWith('https://') || self.manifestURL.startsWith('s3://') || has(self.manifestSHA256)"
type ImageSpec struct {
	// Bucket holding the images (S3 endpoint and credentials come from the controller's environment). Empty: the
	// controller's default bucket (S3_BUCKET, chart value imageBucket.bucket); the NodeClass is not Ready when
	// neither is set.
	// +optional
	Bucket string `json:"bucket,omitempty" hash:"ignore"`
	// Prefix of the image tree in the bucket: <prefix>/<schematicID>/<talosVersion>/.
	// +optional
	Prefix string `json:"prefix,omitempty" hash:"ignore"`
	// SchematicID of the Talos Image Factory schematic.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	// +optional
	SchematicID string `json:"schematicID,omitempty"`
	// TalosVersion of the image, e.g. v1.12.4.
	// +kubebuilder:validation:Pattern=`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`
	// +optional
	TalosVersion string `json:"talosVersion,omitempty"`
	// ManifestURL names a manifest.json instead of bucket/prefix/schematic/version: an https URL of a publicly
	// readable manifest (its images are fetched from beside it without presigning), or s3://bucket/key read with
	// the controller's S3 credentials. Plain http is accepted only with manifestSHA256.
	// +kubebuilder:validation:Pattern=`^(https?|s3)://`
	// +optional
	ManifestURL string `json:"manifestURL,omitempty" hash:"ignore"`
	// ManifestSHA256 pins the manifest (sha256 of its bytes, as `sha256sum manifest.json` prints): a manifest with
	// another digest is refused. The manifest holds the image digests em-imager verifies, so the pin is the trust
	// root of the image, whatever transport serves it.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	// +optional
	ManifestSHA256 string `json:"manifestSHA256,omitempty" hash:"ignore"`
	// Formats in order of preference. zst decodes fastest.
	// +kubebuilder:validation:items:Enum:={zst,xz,raw}
	// +kubebuilder:default:={zst,xz}
	// +optional
	Formats []string `json:"formats,omitempty" hash:"ignore"`
	// Architecture of the image: amd64, the only one that works (em-imager runs in Scaleway's amd64 rescue
	// system, and no Elastic Metal offer is arm64).
	// +kubebuilder:validation:XValidation:message="only amd64 is supported: em-imager runs in Scaleway's amd64 rescue system and no Elastic Metal offer is arm64",rule="self == 'amd64'"
	// +kubebuilder:default:=amd64
	// +optional
	Architecture string `json:"architecture,omitempty"`
}

// TalosSpec holds what talosgen needs besides the NodeClaim and the hardware.
type TalosSpec struct {
	// JoinSecretRef names the Secret with the cluster's join material: a Talos secrets bundle, a base worker
	// machine config, or (for non-Talos control planes) ca.crt, token and endpoint. See docs/install.md.
	// +required
	JoinSecretRef SecretReference `json:"joinSecretRef" hash:"ignore"`
	// VersionContract of the generated config. Nodes run Talos 1.12.x.
	// +kubebuilder:validation:Pattern=`^v[0-9]+\.[0-9]+$`
	// +kubebuilder:default:="v1.12"
	// +optional
	VersionContract string `json:"versionContract,omitempty"`
	// InstallImage is machine.install.image (used by Talos upgrades).
	// +optional
	InstallImage string `json:"installImage,omitempty"`
	// ConfigPatches are applied last, in order: strategic merge patches (YAML documents) or JSON6902 patches (a YAML/JSON list).
	// +kubebuilder:validation:MaxItems=32
	// +optional
	ConfigPatches []string `json:"configPatches,omitempty"`
	// KernelArgs are extra kernel arguments.
	// +optional
	KernelArgs []string `json:"kernelArgs,omitempty"`
	// Discovery enables Talos cluster discovery.
	// +optional
	Discovery *bool `json:"discovery,omitempty"`
	// AllowValidationWarnings accepts configs that machinery validates with warnings. Off: a warning is an error.
	// +optional
	AllowValidationWarnings bool `json:"allowValidationWarnings,omitempty" hash:"ignore"`
	// BootstrapToken is PerNodeClaim (a token per node that expires at the end of its install window, so the
	// copy of the config left on the node's disk expires; needs a kube-apiserver that accepts bootstrap tokens)
	// or Shared (the token of the join Secret, which never expires).
	// +kubebuilder:validation:Enum:={Shared,PerNodeClaim}
	// +kubebuilder:default:=PerNodeClaim
	// +optional
	BootstrapToken string `json:"bootstrapToken,omitempty" hash:"ignore"`
	// ConfigDelivery is how a node gets its machine config. Disk: em-imager writes it from the rescue system
	// into a metal-iso partition, which Talos reads at first boot (the image must be built with the kernel
	// argument talos.config=metal-iso; the node never opens its maintenance API). MaintenanceAPI (legacy, for
	// images without that argument): the config is applied over the unauthenticated Talos maintenance API on
	// :50000 after the first boot, which leaves a window in which whoever reaches the server first can take it.
	// +kubebuilder:validation:Enum:={Disk,MaintenanceAPI}
	// +kubebuilder:default:=Disk
	// +optional
	ConfigDelivery string `json:"configDelivery,omitempty" hash:"ignore"`
}

// SecretReference names a Secret.
type SecretReference struct {
	// +kubebuilder:validation:MinLength=1
	// +required
	Name string `json:"name"`
	// +kubebuilder:validation:MinLength=1
	// +required
	Namespace string `json:"namespace"`
}

// KubeletConfiguration is the subset of kubelet settings the provider renders and accounts for.
type KubeletConfiguration struct {
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	// +optional
	MaxPods *int32 `json:"maxPods,omitempty"`
	// KubeReserved is reserved for Kubernetes daemons: resource name -> non-negative quantity (100m, 1Gi).
	// +kubebuilder:validation:MaxProperties=8
	// +kubebuilder:validation:XValidation:message="spec.kubelet.kubeReserved values are non-negative quantities, e.g. 100m or 1Gi",rule="self.all(k, isQuantity(self[k]) && !quantity(self[k]).isLessThan(quantity('0')))"
	// +optional
	KubeReserved map[string]string `json:"kubeReserved,omitempty"`
	// SystemReserved is reserved for the OS: resource name -> non-negative quantity (100m, 1Gi).
	// +kubebuilder:validation:MaxProperties=8
	// +kubebuilder:validation:XValidation:message="spec.kubelet.systemReserved values are non-negative quantities, e.g. 100m or 1Gi",rule="self.all(k, isQuantity(self[k]) && !quantity(self[k]).isLessThan(quantity('0')))"
	// +optional
	SystemReserved map[string]string `json:"systemReserved,omitempty"`
	// EvictionHard thresholds: signal -> percentage (10%) or non-negative quantity (100Mi). Every rule above
	// and below is written so that it cannot fail to evaluate: a value stored before a rule existed must
	// not block the status updates of its NodeClass (the API server keeps unchanged values, not errors).
	// +kubebuilder:validation:MaxProperties=8
	// +kubebuilder:validation:XValidation:message="spec.kubelet.evictionHard values are percentages (10%) or quantities (100Mi)",rule="self.all(k, self[k].endsWith('%') ? isQuantity(self[k].substring(0, size(self[k]) - 1)) : isQuantity(self[k]))"
	// +kubebuilder:validation:XValidation:message="spec.kubelet.evictionHard values are not negative",rule="self.all(k, !self[k].startsWith('-'))"
	// +optional
	EvictionHard map[string]string `json:"evictionHard,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	ImageGCHighThresholdPercent *int32 `json:"imageGCHighThresholdPercent,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	ImageGCLowThresholdPercent *int32 `json:"imageGCLowThresholdPercent,omitempty"`
}

// BillingSpec says how servers are paid for.
type BillingSpec struct {
	// Periods allowed: hourly, monthly. NodePools choose among them with the
	// karpenter-scaleway-em.io/billing-period requirement.
	// +kubebuilder:validation:items:Enum:={hourly,monthly}
	// +kubebuilder:default:={hourly}
	// +listType=set
	// +optional
	Periods []string `json:"periods,omitempty"`
	// MonthlyCommitmentMonths spreads a monthly offer's setup fee over this many months in the price Karpenter compares.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=36
	// +kubebuilder:default:=1
	// +optional
	MonthlyCommitmentMonths int32 `json:"monthlyCommitmentMonths,omitempty"`
	// MinimumLifetime of a monthly server: one whose NodeClaim ends (deleted, failed install, or none at all)
	// is kept as a spare (rebooted into rescue, untagged from its NodeClaim) and reused by the next NodeClaim of
	// the same offer and zone instead of ordering a new one, until its subscription renews (at the end of each
	// calendar month, UTC), or until the end of the month this lifetime, counted from the order, ends in; it is
	// released an hour before a renewal. Unset: the month in progress only. 0s: monthly servers are never kept.
	// At most 26280h (36 months, the longest commitment).
	// +kubebuilder:validation:Pattern=`^([0-9]{1,5}h)?([0-9]{1,7}m)?([0-9]{1,9}s)?$`
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=24
	// +kubebuilder:validation:XValidation:message="spec.billing.minimumLifetime is at most 26280h (36 months)",rule="!self.matches('^([0-9]{1,5}h)?([0-9]{1,7}m)?([0-9]{1,9}s)?$') || duration(self) <= duration('26280h')"
	// +kubebuilder:validation:Type="string"
	// +optional
	MinimumLifetime *metav1.Duration `json:"minimumLifetime,omitempty"`
	// SparesOnDeletion says what deleting the NodeClass does with its spares (monthly servers kept for it),
	// once its NodeClaims are gone: Release (the default) deletes them, forfeiting the rest of their paid
	// month; Keep hands them over: the controller removes its tags (karpenter.sh/managed-by and the cluster
	// identity), tags them karpenter-scaleway-em/handed-over-by=<clusterName> and never touches them again.
	// Not a part of the drift hash: it changes nothing on the nodes.
	// +kubebuilder:validation:Enum:={Release,Keep}
	// +optional
	SparesOnDeletion string `json:"sparesOnDeletion,omitempty" hash:"ignore"`
}

// What deleting a NodeClass does with its spares (BillingSpec.SparesOnDeletion).
const (
	SparesRelease = "Release"
	SparesKeep    = "Keep"
)

// KeepSparesOnDeletion reports whether deleting the NodeClass hands its spares over.
func (b BillingSpec) KeepSparesOnDeletion() bool { return b.SparesOnDeletion == SparesKeep }

// RescueSpec tunes the rescue-system step.
type RescueSpec struct {
	// DiskSelector is em-imager's --disk: "auto" or a device path such as /dev/nvme0n1 or a stable name such
	// as /dev/disk/by-id/nvme-eui.0025388b71b2a1c4 or /dev/disk/by-id/wwn-0x5000c500a1b2c3d4.
	// +kubebuilder:validation:Pattern=`^(auto|/dev/[a-zA-Z0-9/_.:+-]+)$`
	// +kubebuilder:validation:XValidation:message="spec.rescue.disk must not contain .. path elements",rule="!self.contains('/../') && !self.endsWith('/..')"
	// +kubebuilder:default:=auto
	// +optional
	Disk string `json:"disk,omitempty"`
	// VerifyReadback re-reads the written image and compares (slower, catches bad disks).
	// +optional
	VerifyReadback bool `json:"verifyReadback,omitempty"`
}

// ScalewayElasticMetalNodeClass is the Schema for Elastic Metal node classes.
// Deleting one waits (finalizer karpenter-scaleway-em.io/termination) until no NodeClaim uses it, then ends its
// spares as spec.billing.sparesOnDeletion says; while the Scaleway API fails it stays, with a RemovalBlocked event.
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=scalewayelasticmetalnodeclasses,scope=Cluster,categories=karpenter,shortName={emnc,emncs}
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Zones",type="string",JSONPath=".status.zones"
// +kubebuilder:printcolumn:name="Talos",type="string",JSONPath=".status.image.talosVersion"
// +kubebuilder:printcolumn:name="Image",type="string",JSONPath=".status.image.rawSHA256",priority=1
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type ScalewayElasticMetalNodeClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ScalewayElasticMetalNodeClassSpec   `json:"spec,omitempty"`
	Status ScalewayElasticMetalNodeClassStatus `json:"status,omitempty"`

	// Undecodable names the stored values this controller could not decode
	// (left at their zero value; see UnmarshalJSON and Unreadable). Never
	// stored: a NodeClass written back by the controller is patched, and a
	// patch carries only what the controller changed.
	Undecodable string `json:"-"`
}

// ScalewayElasticMetalNodeClassList is a list of node classes.
// +kubebuilder:object:root=true
type ScalewayElasticMetalNodeClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ScalewayElasticMetalNodeClass `json:"items"`
}
