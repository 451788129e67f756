package v1alpha1

import (
	"fmt"

	"github.com/awslabs/operatorpkg/status"
	"github.com/mitchellh/hashstructure/v2"
)

// Condition types. Ready is true only when all of them are.
const (
	// ConditionTypeCredentialsReady: the Scaleway API answers with the controller's credentials.
	ConditionTypeCredentialsReady = "CredentialsReady"
	// ConditionTypeProjectReady: spec.projectID is empty or the controller's project (one controller serves
	// one project: it lists and orders in SCW_DEFAULT_PROJECT_ID only).
	ConditionTypeProjectReady = "ProjectReady"
	// ConditionTypeImageReady: the image manifest resolves and is valid for the architecture.
	ConditionTypeImageReady = "ImageReady"
	// ConditionTypeJoinConfigReady: the join Secret renders a valid machine config.
	ConditionTypeJoinConfigReady = "JoinConfigReady"
	// ConditionTypeInstallsHealthy: the install-failure breaker is closed (package breaker): False while
	// consecutive install failures stop new orders for the NodeClass.
	ConditionTypeInstallsHealthy = "InstallsHealthy"
)

// ConditionTypeClusterIdentityUnique is a warning, not a part of Ready: False
// when servers carry this cluster's name but another cluster's identity (or
// none this cluster could prove its own). The controller leaves them alone
// and its own servers carry its identity, so ordering stays safe.
const ConditionTypeClusterIdentityUnique = "ClusterIdentityUnique"

// ConditionTypeWarmPoolReady is not a part of Ready either: set only on a
// NodeClass with spec.warmPool, True when every pool server is delivered,
// False with why not (being delivered, an entry that cannot be served,
// orders blocked by the breaker or a spend limit, an offering out of stock).
const ConditionTypeWarmPoolReady = "WarmPoolReady"

// Annotations on NodeClasses and NodeClaims.
const (
	// AnnotationNodeClassHash is the hash of the NodeClass spec, for drift.
	AnnotationNodeClassHash = "karpenter-scaleway-em.io/nodeclass-hash"
	// AnnotationNodeClassHashVersion changes when the hashing itself changes, so no false drift is reported.
	AnnotationNodeClassHashVersion = "karpenter-scaleway-em.io/nodeclass-hash-version"
	// AnnotationImageSHA256 is the raw image digest a NodeClaim was installed with.
	AnnotationImageSHA256 = "karpenter-scaleway-em.io/image-sha256"
	// AnnotationTalosVersion is the Talos version a NodeClaim was installed with.
	AnnotationTalosVersion = "karpenter-scaleway-em.io/talos-version"
	// AnnotationSchematicID is the schematic a NodeClaim was installed with.
	AnnotationSchematicID = "karpenter-scaleway-em.io/schematic-id"
)

// Labels the install controller keeps on its NodeClaims, for
// `kubectl get nodeclaims -L karpenter-scaleway-em.io/install-phase -L karpenter-scaleway-em.io/imaging-progress`.
const (
	// LabelInstallPhase is the install phase of the NodeClaim's server
	// (ordered, rescue, imaging, booting, joined).
	LabelInstallPhase = "karpenter-scaleway-em.io/install-phase"
	// LabelImagingProgress is how much of the image is written, in percent
	// (steps of 10), while the phase is imaging.
	LabelImagingProgress = "karpenter-scaleway-em.io/imaging-progress"
)

// Values of spec.talos.bootstrapToken.
const (
	BootstrapTokenShared       = "Shared"
	BootstrapTokenPerNodeClaim = "PerNodeClaim"
)

// Values of spec.talos.configDelivery.
const (
	ConfigDeliveryDisk           = "Disk"
	ConfigDeliveryMaintenanceAPI = "MaintenanceAPI"
)

// Values of spec.boot.
const (
	BootAuto   = "Auto"
	BootReboot = "Reboot"
)

// KexecBoot reports whether installs may boot Talos with kexec from rescue
// (Auto, the default; an object stored before the default has none).
func (s *ScalewayElasticMetalNodeClassSpec) KexecBoot() bool { return s.Boot != BootReboot }

// PerNodeClaimTokens reports whether the NodeClass's nodes get their own
// bootstrap token (the default; an object stored before the default was
// applied has none).
func (s *TalosSpec) PerNodeClaimTokens() bool { return s.BootstrapToken != BootstrapTokenShared }

// DiskConfigDelivery reports whether nodes get their config on the disk
// (the default) rather than over the maintenance API.
func (s *TalosSpec) DiskConfigDelivery() bool {
	return s.ConfigDelivery != ConfigDeliveryMaintenanceAPI
}

// NodeClassHashVersion is bumped when Hash() changes for the same spec.
// v2: zones, projectID, the image's bucket, prefix, manifestURL and formats,
// the join Secret's name, allowValidationWarnings and bootstrapToken left the
// hash (a NodeClaim stamped v1 is restamped by the NodeClass status
// controller, so no node drifts from the change of hashing itself).
const NodeClassHashVersion = "v2"

// ScalewayElasticMetalNodeClassStatus is what the NodeClass status controller resolved.
type ScalewayElasticMetalNodeClassStatus struct {
	// Image is the resolved image manifest.
	// +optional
	Image *ResolvedImage `json:"image,omitempty"`
	// Zones the NodeClass resolves to: spec.zones, or the controller's default zone (SCW_DEFAULT_ZONE) when
	// spec.zones is empty. The ZONES column shows them.
	// +optional
	Zones []string `json:"zones,omitempty"`
	// Installs is the install-failure breaker's state (docs/money-safety.md): consecutive install failures
	// stop orders for the NodeClass (InstallsHealthy=False) until a probe after a backoff joins, or the spec
	// or the join Secret changes. Kept here so that a restarted controller does not order again.
	// +optional
	Installs *InstallsStatus `json:"installs,omitempty"`
	// Conditions contains signals for health and readiness.
	// +optional
	Conditions []status.Condition `json:"conditions,omitempty"`
}

// ResolvedImage is what the manifest said.
type ResolvedImage struct {
	SchematicID  string `json:"schematicID,omitempty"`
	TalosVersion string `json:"talosVersion,omitempty"`
	Architecture string `json:"architecture,omitempty"`
	// Format em-imager will be given.
	Format string `json:"format,omitempty"`
	// RawSHA256 is the digest of the raw image: what em-imager verifies and drift compares.
	RawSHA256 string `json:"rawSHA256,omitempty"`
	RawSize   int64  `json:"rawSize,omitempty"`
}

// StatusConditions implements operatorpkg's status.Object.
func (in *ScalewayElasticMetalNodeClass) StatusConditions(opts ...status.ForOption) status.ConditionSet {
	return status.NewReadyConditions(
		ConditionTypeCredentialsReady,
		ConditionTypeProjectReady,
		ConditionTypeImageReady,
		ConditionTypeJoinConfigReady,
		ConditionTypeInstallsHealthy,
	).For(in, opts...)
}

// GetConditions implements status.Object.
func (in *ScalewayElasticMetalNodeClass) GetConditions() []status.Condition {
	return in.Status.Conditions
}

// SetConditions implements status.Object.
func (in *ScalewayElasticMetalNodeClass) SetConditions(conditions []status.Condition) {
	in.Status.Conditions = conditions
}

// Hash of the spec fields that change what runs on an existing node, for
// drift: a node whose NodeClaim was stamped with another hash is replaced,
// and each replacement is a new server (an order, or a month's fee for a
// monthly offer). So a field is in the hash only when the node it built
// would differ from one built today, never for where new servers may be
// ordered, where the same image is fetched from, or how an install runs.
// Lists are sets (order does not matter). The image itself is compared on
// its own (status.image.rawSHA256 against what was written: ImageDrift), so
// a new manifest location that serves another image still replaces nodes.
// Every spec field is decided here; TestDriftDecisionOfEveryField fails
// when a new field is not (docs/architecture.md keeps the same table):
//
//	field                          drift  why
//	zones                          no     where new servers may be ordered; a node stays in its zone
//	projectID                      no     where new servers are ordered; a server never changes project
//	image.schematicID              yes    the image identity the node booted
//	image.talosVersion             yes    the image identity the node booted
//	image.architecture             yes    the image identity (amd64 only)
//	image.bucket, prefix           no     where the same image is downloaded from (another image: ImageDrift)
//	image.manifestURL              no     idem
//	image.manifestSHA256           no     pins the manifest; another image changes rawSHA256 (ImageDrift)
//	image.formats                  no     how the same raw image travels; the disk holds the same bytes
//	talos.joinSecretRef            no     joined nodes keep their identity; rotating join material is no reason
//	                                      to replace them (docs/security.md); the Secret's content is not hashed either
//	talos.versionContract          yes    the rendered machine config
//	talos.installImage             yes    the rendered machine config (machine.install.image)
//	talos.configPatches            yes    the rendered machine config
//	talos.kernelArgs               yes    the rendered machine config
//	talos.discovery                yes    the rendered machine config
//	talos.allowValidationWarnings  no     decides whether a config is accepted, not what it is
//	talos.bootstrapToken           no     how a node joins; after joining the kubelet uses its own certificate
//	talos.configDelivery           no     how the same config reaches the disk
//	kubelet                        yes    the rendered kubelet settings
//	labels                         yes    the node's labels, rendered into its config
//	privateNetworkIDs              yes    networks attached at install, VLAN interfaces in the config
//	tags                           no     Scaleway tags of new orders; nothing on the node
//	localDisks                     yes    volumes are provisioned only when first created
//	billing, limits, warmPool      no     what is bought and kept, not what runs
//	rescue                         no     how the install runs in the rescue system
//	boot                           no     how the same disk starts (kexec or a firmware reboot)
func (in *ScalewayElasticMetalNodeClass) Hash() string {
	spec := in.Spec
	if spec.LocalDisks == LocalDisksUnused {
		// The default, written or not: nodes from before the field existed
		// are not drifted.
		spec.LocalDisks = ""
	}
	h, err := hashstructure.Hash(spec, hashstructure.FormatV2, &hashstructure.HashOptions{
		SlicesAsSets:    true,
		IgnoreZeroValue: true,
		ZeroNil:         true,
	})
	if err != nil {
		// Hash only fails on unsupported kinds (chan, func); the spec has none.
		panic(fmt.Sprintf("hashing nodeclass spec: %v", err))
	}
	return fmt.Sprint(h)
}

// ZonesOr returns the spec's zones, or def when none are set.
func (in *ScalewayElasticMetalNodeClass) ZonesOr(def string) []string {
	if len(in.Spec.Zones) > 0 {
		return in.Spec.Zones
	}
	return []string{def}
}
