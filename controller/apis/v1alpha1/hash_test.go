package v1alpha1

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sparesOnDeletion changes nothing on the nodes: setting it must not drift them.
func TestSparesOnDeletionIsNotDrift(t *testing.T) {
	nc := &ScalewayElasticMetalNodeClass{}
	nc.Spec.Billing.Periods = []string{"monthly"}
	before := nc.Hash()
	nc.Spec.Billing.SparesOnDeletion = SparesKeep
	if after := nc.Hash(); after != before {
		t.Fatalf("hash %s -> %s: setting sparesOnDeletion would replace every node", before, after)
	}
}

// driftBase is a NodeClass with every field set, so that each edit below
// changes a value (clearing one too is a change the hash must see or not).
func driftBase() *ScalewayElasticMetalNodeClass {
	ptr := func(v int32) *int32 { return &v }
	on := true
	return &ScalewayElasticMetalNodeClass{Spec: ScalewayElasticMetalNodeClassSpec{
		Zones:     []string{"fr-par-1"},
		ProjectID: "11111111-2222-4333-8444-555555555555",
		Image: ImageSpec{
			Bucket: "talos", Prefix: "images", SchematicID: strings.Repeat("a", 64), TalosVersion: "v1.12.4",
			ManifestURL: "https://images.example.com/manifest.json", ManifestSHA256: strings.Repeat("b", 64),
			Formats: []string{"zst", "xz"}, Architecture: "amd64",
		},
		Talos: TalosSpec{
			JoinSecretRef:   SecretReference{Name: "join", Namespace: "karpenter"},
			VersionContract: "v1.12", InstallImage: "ghcr.io/siderolabs/installer:v1.12.4",
			ConfigPatches: []string{"machine: {}"}, KernelArgs: []string{"console=ttyS0"}, Discovery: &on,
			AllowValidationWarnings: true, BootstrapToken: BootstrapTokenPerNodeClaim, ConfigDelivery: ConfigDeliveryDisk,
		},
		Kubelet: &KubeletConfiguration{
			MaxPods: ptr(110), KubeReserved: map[string]string{"cpu": "100m"}, SystemReserved: map[string]string{"cpu": "100m"},
			EvictionHard: map[string]string{"memory.available": "5%"}, ImageGCHighThresholdPercent: ptr(85), ImageGCLowThresholdPercent: ptr(80),
		},
		Labels:            map[string]string{"team": "a"},
		PrivateNetworkIDs: []string{"11111111-2222-4333-8444-000000000001"},
		Tags:              []string{"env=prod"},
		LocalDisks:        "Ephemeral",
		Billing: BillingSpec{Periods: []string{"hourly"}, MonthlyCommitmentMonths: 1,
			MinimumLifetime: &metav1.Duration{Duration: 730 * time.Hour}, SparesOnDeletion: SparesRelease},
		Rescue:   RescueSpec{Disk: "auto", VerifyReadback: true},
		Boot:     BootAuto,
		Limits:   &LimitsSpec{HourlySpend: "10", MonthlyCommitment: "1000"},
		WarmPool: []WarmPoolEntry{{Offer: "EM-A115X-SSD", Zone: "fr-par-1", BillingPeriod: "hourly", Servers: 1}},
	}}
}

type specEdit func(*ScalewayElasticMetalNodeClassSpec)

// driftDecisions is the decision of every spec field (Hash's table): an edit
// of it, and whether that edit replaces the nodes. A replaced node is a new
// server, so "no" is the answer unless the node itself would differ.
var driftDecisions = map[string]struct {
	drift bool
	edit  specEdit
}{
	"zones":                         {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Zones = append(s.Zones, "fr-par-2") }},
	"projectID":                     {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.ProjectID = "" }},
	"image.bucket":                  {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Image.Bucket = "mirror" }},
	"image.prefix":                  {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Image.Prefix = "talos/images" }},
	"image.schematicID":             {true, func(s *ScalewayElasticMetalNodeClassSpec) { s.Image.SchematicID = strings.Repeat("c", 64) }},
	"image.talosVersion":            {true, func(s *ScalewayElasticMetalNodeClassSpec) { s.Image.TalosVersion = "v1.12.5" }},
	"image.manifestURL":             {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Image.ManifestURL = "s3://talos/manifest.json" }},
	"image.manifestSHA256":          {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Image.ManifestSHA256 = strings.Repeat("d", 64) }},
	"image.formats":                 {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Image.Formats = []string{"xz", "raw"} }},
	"image.architecture":            {true, func(s *ScalewayElasticMetalNodeClassSpec) { s.Image.Architecture = "arm64" }},
	"talos.joinSecretRef.name":      {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Talos.JoinSecretRef.Name = "join-v2" }},
	"talos.joinSecretRef.namespace": {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Talos.JoinSecretRef.Namespace = "kube-system" }},
	"talos.versionContract":         {true, func(s *ScalewayElasticMetalNodeClassSpec) { s.Talos.VersionContract = "v1.11" }},
	"talos.installImage": {true, func(s *ScalewayElasticMetalNodeClassSpec) {
		s.Talos.InstallImage = "ghcr.io/siderolabs/installer:v1.12.5"
	}},
	"talos.configPatches": {true, func(s *ScalewayElasticMetalNodeClassSpec) {
		s.Talos.ConfigPatches = append(s.Talos.ConfigPatches, "cluster: {}")
	}},
	"talos.kernelArgs":              {true, func(s *ScalewayElasticMetalNodeClassSpec) { s.Talos.KernelArgs = []string{"console=tty0"} }},
	"talos.discovery":               {true, func(s *ScalewayElasticMetalNodeClassSpec) { s.Talos.Discovery = nil }},
	"talos.allowValidationWarnings": {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Talos.AllowValidationWarnings = false }},
	"talos.bootstrapToken":          {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Talos.BootstrapToken = BootstrapTokenShared }},
	"talos.configDelivery":          {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Talos.ConfigDelivery = ConfigDeliveryMaintenanceAPI }},
	"kubelet.maxPods":               {true, func(s *ScalewayElasticMetalNodeClassSpec) { *s.Kubelet.MaxPods = 200 }},
	"kubelet.kubeReserved":          {true, func(s *ScalewayElasticMetalNodeClassSpec) { s.Kubelet.KubeReserved["memory"] = "1Gi" }},
	"kubelet.systemReserved":        {true, func(s *ScalewayElasticMetalNodeClassSpec) { s.Kubelet.SystemReserved["cpu"] = "200m" }},
	"kubelet.evictionHard":          {true, func(s *ScalewayElasticMetalNodeClassSpec) { s.Kubelet.EvictionHard["memory.available"] = "10%" }},
	"kubelet.imageGCHighThresholdPercent": {true, func(s *ScalewayElasticMetalNodeClassSpec) {
		*s.Kubelet.ImageGCHighThresholdPercent = 90
	}},
	"kubelet.imageGCLowThresholdPercent": {true, func(s *ScalewayElasticMetalNodeClassSpec) {
		*s.Kubelet.ImageGCLowThresholdPercent = 70
	}},
	"labels":                          {true, func(s *ScalewayElasticMetalNodeClassSpec) { s.Labels["team"] = "b" }},
	"privateNetworkIDs":               {true, func(s *ScalewayElasticMetalNodeClassSpec) { s.PrivateNetworkIDs = nil }},
	"tags":                            {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Tags = append(s.Tags, "team=a") }},
	"localDisks":                      {true, func(s *ScalewayElasticMetalNodeClassSpec) { s.LocalDisks = "Raw" }},
	"billing.periods":                 {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Billing.Periods = []string{"monthly"} }},
	"billing.monthlyCommitmentMonths": {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Billing.MonthlyCommitmentMonths = 12 }},
	"billing.minimumLifetime": {false, func(s *ScalewayElasticMetalNodeClassSpec) {
		s.Billing.MinimumLifetime = &metav1.Duration{Duration: 2000 * time.Hour}
	}},
	"billing.sparesOnDeletion":   {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Billing.SparesOnDeletion = SparesKeep }},
	"rescue.disk":                {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Rescue.Disk = "/dev/nvme1n1" }},
	"boot":                       {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Boot = BootReboot }},
	"rescue.verifyReadback":      {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Rescue.VerifyReadback = false }},
	"limits.hourlySpend":         {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Limits.HourlySpend = "20" }},
	"limits.monthlyCommitment":   {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Limits.MonthlyCommitment = "" }},
	"warmPool":                   {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.WarmPool[0].Servers = 3 }},
	"zones (reordered)":          {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Zones = []string{"fr-par-2", "fr-par-1"} }},
	"zones (removed)":            {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.Zones = nil }},
	"labels (added)":             {true, func(s *ScalewayElasticMetalNodeClassSpec) { s.Labels["tier"] = "batch" }},
	"localDisks (Unused, unset)": {false, func(s *ScalewayElasticMetalNodeClassSpec) { s.LocalDisks = "" }},
}

// specFields lists the JSON paths of the spec's fields, descending into the
// package's own structs (a list or map of them is one field).
func specFields(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		path := prefix + name
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft.PkgPath() == t.PkgPath() {
			out = append(out, specFields(ft, path+".")...)
			continue
		}
		out = append(out, path)
	}
	return out
}

// Drift replaces every node of the NodeClass, each with a new server: only
// what changes what runs on an existing node may drift it. Adding a zone
// for capacity, moving the image bucket or renaming the join Secret must
// leave the nodes alone; the image identity and the rendered config must not.
func TestDriftDecisionOfEveryField(t *testing.T) {
	for _, field := range specFields(reflect.TypeFor[ScalewayElasticMetalNodeClassSpec](), "") {
		if _, ok := driftDecisions[field]; !ok {
			t.Errorf("spec.%s has no drift decision: add it to Hash's table and to driftDecisions", field)
		}
	}
	names := make([]string, 0, len(driftDecisions))
	for name := range driftDecisions {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		d := driftDecisions[name]
		t.Run(name, func(t *testing.T) {
			nc := driftBase()
			if name == "localDisks (Unused, unset)" {
				nc.Spec.LocalDisks = LocalDisksUnused
			}
			before := nc.Hash()
			d.edit(&nc.Spec)
			if drifted := nc.Hash() != before; drifted != d.drift {
				t.Errorf("editing spec.%s: drifted=%v, want %v", name, drifted, d.drift)
			}
		})
	}
}
