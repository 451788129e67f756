package chart

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/karpenter/pkg/apis"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/chart/crdref"
)

// karpenterCRDDir is Karpenter core's CRD directory in the module cache: the
// source `make chart-crds` copies from.
func karpenterCRDDir(t *testing.T) string {
	t.Helper()
	// pkg/apis embeds the CRDs from its crds/ directory; find that directory
	// through the module's location, as `go list -m` would.
	dir, err := moduleDir("sigs.k8s.io/karpenter")
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "pkg", "apis", "crds")
}

func TestCRDsInSync(t *testing.T) {
	sources := map[string][]byte{}
	for _, dir := range []string{repoPath(t, "controller/apis/crds"), karpenterCRDDir(t)} {
		entries, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil || len(entries) == 0 {
			t.Fatalf("no CRDs in %s (%v)", dir, err)
		}
		for _, e := range entries {
			b, err := os.ReadFile(e)
			if err != nil {
				t.Fatal(err)
			}
			sources[filepath.Base(e)] = b
		}
	}
	// The embedded CRDs Karpenter's code registers are the same set: a new
	// core CRD shows up here as a missing file.
	if len(apis.CRDs)+1 != len(sources) {
		t.Errorf("%d source CRD files, want Karpenter's %d + ours", len(sources), len(apis.CRDs))
	}
	for _, dir := range []string{crdChart + "/templates", controllerChart + "/crds"} {
		entries, _ := filepath.Glob(filepath.Join(repoPath(t, dir), "*.yaml"))
		var got []string
		for _, e := range entries {
			got = append(got, filepath.Base(e))
			want, ok := sources[filepath.Base(e)]
			if !ok {
				t.Errorf("%s/%s has no source CRD: run `make chart-crds`", dir, filepath.Base(e))
				continue
			}
			b, err := os.ReadFile(e)
			if err != nil {
				t.Fatal(err)
			}
			if dir == controllerChart+"/crds" {
				want = helmOwnedCRD(want)
			}
			if !bytes.Equal(b, want) {
				t.Errorf("%s/%s differs from its source: run `make chart-crds`", dir, filepath.Base(e))
			}
		}
		for name := range sources {
			if !slices.Contains(got, name) {
				t.Errorf("%s lacks %s: run `make chart-crds`", dir, name)
			}
		}
	}
}

func TestCRDChartRendersEveryCRD(t *testing.T) {
	objs := mustRender(t, loadChart(t, crdChart), "")
	var names []string
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			t.Errorf("CRD chart renders a %s", o.GetKind())
		}
		names = append(names, o.GetName())
	}
	for _, want := range []string{"scalewayelasticmetalnodeclasses.karpenter-scaleway-em.io", "nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "nodeoverlays.karpenter.sh"} {
		if !slices.Contains(names, want) {
			t.Errorf("CRD chart lacks %s; has %v", want, names)
		}
	}
}

func TestNodeClassReferenceIsCurrent(t *testing.T) {
	data, err := os.ReadFile(repoPath(t, "controller/apis/crds/karpenter-scaleway-em.io_scalewayelasticmetalnodeclasses.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd, err := crdref.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	want, err := crdref.Markdown(crd)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(repoPath(t, "docs/nodeclass-reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("docs/nodeclass-reference.md is out of date: run `make docs`")
	}
	// Every spec field of the Go API shows up (a generator that dropped
	// nested fields would still be "current").
	for _, field := range []string{"spec.image.schematicID", "spec.talos.joinSecretRef.namespace", "spec.billing.minimumLifetime", "spec.rescue.disk", "spec.privateNetworkIDs", "spec.kubelet.maxPods"} {
		if !strings.Contains(string(got), "`"+field+"`") {
			t.Errorf("reference lacks %s", field)
		}
	}
}

func TestDefaults(t *testing.T) {
	objs := mustRender(t, loadChart(t, controllerChart), minimalValues)

	for kind, want := range map[string]int{"ServiceAccount": 1, "Secret": 1, "Deployment": 1, "PodDisruptionBudget": 1, "Service": 1,
		"ClusterRole": 4, "ClusterRoleBinding": 2, "Role": 5, "RoleBinding": 5, "ServiceMonitor": 0} {
		if got := count(objs, kind); got != want {
			t.Errorf("%d %s rendered, want %d (%s)", got, kind, want, describe(objs))
		}
	}
	for _, o := range objs {
		if o.GetLabels()["app.kubernetes.io/instance"] != releaseName {
			t.Errorf("%s %s lacks the instance label", o.GetKind(), o.GetName())
		}
	}

	d := mustFind(t, objs, "Deployment", releaseName)
	if r, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); r != 2 {
		t.Errorf("replicas %d, want 2", r)
	}
	tsc, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "topologySpreadConstraints")
	if len(tsc) != 1 {
		t.Fatalf("topologySpreadConstraints: %v", tsc)
	}
	if sel, _, _ := unstructured.NestedStringMap(tsc[0].(map[string]any), "labelSelector", "matchLabels"); sel["app.kubernetes.io/instance"] != releaseName {
		t.Errorf("topology spread constraint without the pods' selector: %v", tsc[0])
	}
	anti, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
	if len(anti) != 1 {
		t.Fatalf("pod anti-affinity: %v", anti)
	}
	if sel, _, _ := unstructured.NestedStringMap(anti[0].(map[string]any), "labelSelector", "matchLabels"); sel["app.kubernetes.io/name"] != "karpenter-scaleway-em" {
		t.Errorf("anti-affinity term without the pods' selector: %v", anti[0])
	}

	c := container(t, objs)
	sc, _ := c["securityContext"].(map[string]any)
	if sc["readOnlyRootFilesystem"] != true || sc["runAsNonRoot"] != true || sc["allowPrivilegeEscalation"] != false {
		t.Errorf("container securityContext %v", sc)
	}
	if drop, _, _ := unstructured.NestedStringSlice(sc, "capabilities", "drop"); !slices.Equal(drop, []string{"ALL"}) {
		t.Errorf("capabilities.drop %v", drop)
	}
	for _, p := range []string{"livenessProbe", "readinessProbe"} {
		if port, _, _ := unstructured.NestedString(c, p, "httpGet", "port"); port != "http" {
			t.Errorf("%s port %q", p, port)
		}
	}
	plain := map[string]string{
		"CLUSTER_NAME": "prod-1", "LOG_LEVEL": "info", "METRICS_PORT": "8080", "HEALTH_PROBE_PORT": "8081",
		"DISABLE_LEADER_ELECTION": "false", "LEADER_ELECTION_NAME": "karpenter-scaleway-em-leader-election",
		"BATCH_MAX_DURATION": "10s", "BATCH_IDLE_DURATION": "1s", "SCW_DEFAULT_ZONE": "fr-par-2",
		"SCW_DEFAULT_PROJECT_ID": testProjectID, "RESCUE_SSH_KEY_SECRET": "karpenter-scaleway-em-rescue-ssh",
		"TALOS_API_PORT": "50000", "DELIVERY_TIMEOUT": "30m", "IMAGING_TIMEOUT": "20m", "MAX_CONCURRENT_IMAGING": "8",
		"ZONE_SWEEP_INTERVAL": "10m", "JOIN_SECRET_NAMESPACES": releaseNS, "CLUSTER_ID": "", "ADOPT_SERVERS_WITHOUT_IDENTITY": "false",
		"FEATURE_GATES": "NodeRepair=false,NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false,ReservedCapacity=true,SpotToSpotConsolidation=false",
	}
	for name, want := range plain {
		if got, _, ok := envVar(c, name); !ok || got != want {
			t.Errorf("env %s = %q (set %v), want %q", name, got, ok, want)
		}
	}
	for name, want := range map[string]string{"SCW_ACCESS_KEY": "karpenter-scaleway-em-scaleway/SCW_ACCESS_KEY", "SCW_SECRET_KEY": "karpenter-scaleway-em-scaleway/SCW_SECRET_KEY"} {
		if _, ref, _ := envVar(c, name); ref != want {
			t.Errorf("env %s from secret %q, want %q", name, ref, want)
		}
	}
	// No bucket configured: no S3 settings, no bucket credentials.
	for _, name := range []string{"S3_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "IPV6_GATEWAY", "SCW_API_URL", "IMAGE_CA_BUNDLE"} {
		if _, _, ok := envVar(c, name); ok {
			t.Errorf("env %s set by default", name)
		}
	}
	// Credentials only in the Secret.
	for _, o := range objs {
		if o.GetKind() == "Secret" {
			continue
		}
		raw, _ := o.MarshalJSON()
		if bytes.Contains(raw, []byte(testSecretKey)) || bytes.Contains(raw, []byte(testAccessKey)) {
			t.Errorf("%s %s carries a credential", o.GetKind(), o.GetName())
		}
	}

	// RBAC: join Secrets are read one by one in the release namespace only;
	// no ClusterRole touches Secrets; nothing lists or watches them.
	provider := mustFind(t, objs, "ClusterRole", releaseName)
	join := mustFind(t, objs, "Role", releaseName+"-join-secrets")
	if join.GetNamespace() != releaseNS || !grants(t, join, "", "secrets", "get", "any") {
		t.Errorf("join Secret Role in %q cannot get Secrets", join.GetNamespace())
	}
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" && grants(t, o, "", "secrets", "get", "any") {
			t.Errorf("ClusterRole %s grants get on Secrets cluster-wide", o.GetName())
		}
	}
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
			continue
		}
		for _, verb := range []string{"list", "watch", "update", "patch", "delete", "deletecollection"} {
			if grants(t, o, "", "secrets", verb, "any") {
				t.Errorf("%s %s grants %s on secrets", o.GetKind(), o.GetName(), verb)
			}
		}
	}
	role := mustFind(t, objs, "Role", releaseName)
	if !grants(t, role, "", "secrets", "get", "karpenter-scaleway-em-rescue-ssh") || grants(t, role, "", "secrets", "get", "other") {
		t.Error("Role must get exactly the rescue key Secret")
	}
	if !grants(t, role, "coordination.k8s.io", "leases", "update", "karpenter-scaleway-em-leader-election") || grants(t, role, "coordination.k8s.io", "leases", "update", "other") {
		t.Error("Role must update exactly the leader election Lease")
	}
	if !grants(t, provider, "karpenter-scaleway-em.io", "scalewayelasticmetalnodeclasses/status", "patch", "x") {
		t.Error("provider ClusterRole cannot patch NodeClass status")
	}
	if grants(t, provider, "karpenter-scaleway-em.io", "scalewayelasticmetalnodeclasses", "delete", "x") {
		t.Error("provider ClusterRole may delete NodeClasses")
	}
	// Creating NodeClasses is a cluster-admin right (docs/security.md): the
	// rules that allow it aggregate into admin, never into edit or view.
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" {
			continue
		}
		labels := o.GetLabels()
		writes := grants(t, o, "karpenter-scaleway-em.io", "scalewayelasticmetalnodeclasses", "create", "")
		if writes && (labels["rbac.authorization.k8s.io/aggregate-to-edit"] != "" || labels["rbac.authorization.k8s.io/aggregate-to-view"] != "") {
			t.Errorf("ClusterRole %s may create NodeClasses and aggregates into edit or view", o.GetName())
		}
		if o.GetName() == releaseName+"-admin" && (!writes || labels["rbac.authorization.k8s.io/aggregate-to-admin"] != "true") {
			t.Errorf("ClusterRole %s does not aggregate NodeClass writes into admin", o.GetName())
		}
	}
}

func TestRepresentativeValues(t *testing.T) {
	c := loadChart(t, controllerChart)
	cases := []struct {
		name   string
		values string
		check  func(t *testing.T, objs []*unstructured.Unstructured)
	}{{
		name: "existing secrets and a private bucket",
		values: `
clusterName: prod-1
image: {repository: registry.example.com/kse, digest: "sha256:` + strings.Repeat("ab", 32) + `"}
scaleway:
  defaultZone: nl-ams-1
  credentials: {existingSecret: scw-api, accessKeyKey: access, secretKeyKey: secret}
imageBucket:
  endpoint: http://garage.garage.svc:3900
  bucket: talos-images
  presignEndpoint: https://s3.example.com
  urlExpiry: 2h
  credentials: {existingSecret: garage-reader}
provider: {ipv6Gateway: "fe80::1", rescueSSHPort: 2222}
`,
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if n := count(objs, "Secret"); n != 0 {
				t.Errorf("%d Secrets rendered with existing Secrets", n)
			}
			ctr := container(t, objs)
			if ctr["image"] != "registry.example.com/kse@sha256:"+strings.Repeat("ab", 32) {
				t.Errorf("image %v", ctr["image"])
			}
			want := map[string]string{"SCW_ACCESS_KEY": "scw-api/access", "SCW_SECRET_KEY": "scw-api/secret",
				"SCW_DEFAULT_PROJECT_ID": "scw-api/SCW_DEFAULT_PROJECT_ID",
				"AWS_ACCESS_KEY_ID":      "garage-reader/AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY": "garage-reader/AWS_SECRET_ACCESS_KEY"}
			for name, ref := range want {
				if _, got, _ := envVar(ctr, name); got != ref {
					t.Errorf("env %s from %q, want %q", name, got, ref)
				}
			}
			for name, v := range map[string]string{"S3_ENDPOINT": "http://garage.garage.svc:3900", "S3_BUCKET": "talos-images",
				"S3_PRESIGN_ENDPOINT": "https://s3.example.com", "S3_PUBLIC": "false", "IMAGE_URL_EXPIRY": "2h",
				"SCW_DEFAULT_ZONE": "nl-ams-1", "IPV6_GATEWAY": "fe80::1", "RESCUE_SSH_PORT": "2222"} {
				if got, _, _ := envVar(ctr, name); got != v {
					t.Errorf("env %s = %q, want %q", name, got, v)
				}
			}
		},
	}, {
		name: "public bucket, chart-made bucket secret absent",
		values: minimalValues + `
imageBucket: {endpoint: "https://s3.fr-par.scw.cloud", bucket: talos-public, public: true, publicURL: "https://{bucket}.s3.fr-par.scw.cloud"}
`,
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			ctr := container(t, objs)
			if v, _, _ := envVar(ctr, "S3_PUBLIC"); v != "true" {
				t.Errorf("S3_PUBLIC %q", v)
			}
			if _, _, ok := envVar(ctr, "AWS_ACCESS_KEY_ID"); ok {
				t.Error("public bucket gets credentials")
			}
		},
	}, {
		name: "bucket credentials from values",
		values: minimalValues + `
imageBucket: {endpoint: "http://garage:3900", credentials: {accessKeyID: GKabc, secretAccessKey: s3cr3t-bucket-key}}
`,
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			s := mustFind(t, objs, "Secret", releaseName+"-image-bucket")
			if data, _, _ := unstructured.NestedStringMap(s.Object, "data"); data["AWS_SECRET_ACCESS_KEY"] != "czNjcjN0LWJ1Y2tldC1rZXk=" {
				t.Errorf("bucket Secret data %v", data)
			}
			d := mustFind(t, objs, "Deployment", releaseName)
			raw, _ := d.MarshalJSON()
			if bytes.Contains(raw, []byte("s3cr3t-bucket-key")) {
				t.Error("bucket secret key in the Deployment")
			}
			if _, ref, _ := envVar(container(t, objs), "AWS_SECRET_ACCESS_KEY"); ref != releaseName+"-image-bucket/AWS_SECRET_ACCESS_KEY" {
				t.Errorf("AWS_SECRET_ACCESS_KEY from %q", ref)
			}
		},
	}, {
		name: "join secrets in named namespaces only",
		values: minimalValues + `
rbac: {joinSecretNamespaces: [team-a, team-b]}
`,
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if grants(t, mustFind(t, objs, "ClusterRole", releaseName), "", "secrets", "get", "x") {
				t.Error("cluster-wide Secret get despite joinSecretNamespaces")
			}
			if v, _, _ := envVar(container(t, objs), "JOIN_SECRET_NAMESPACES"); v != "team-a,team-b" {
				t.Errorf("JOIN_SECRET_NAMESPACES = %q", v)
			}
			var nss []string
			for _, o := range objs {
				if o.GetKind() == "Role" && o.GetName() == releaseName+"-join-secrets" && grants(t, o, "", "secrets", "get", "x") {
					nss = append(nss, o.GetNamespace())
				}
			}
			if !slices.Equal(nss, []string{"team-a", "team-b"}) {
				t.Errorf("join Secret Roles in %v", nss)
			}
		},
	}, {
		name: "CA bundle for a self-signed bucket",
		values: minimalValues + `
imageBucket: {endpoint: "https://garage.garage.svc:3900", public: true, caBundle: {configMap: garage-ca}}
`,
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			ctr := container(t, objs)
			path, _, _ := envVar(ctr, "IMAGE_CA_BUNDLE")
			mounts, _, _ := unstructured.NestedSlice(ctr, "volumeMounts")
			var dir string
			for _, m := range mounts {
				if mm := m.(map[string]any); mm["name"] == "image-ca" {
					dir, _ = mm["mountPath"].(string)
				}
			}
			if dir == "" || path != dir+"/ca.crt" {
				t.Errorf("IMAGE_CA_BUNDLE %q, mount %q", path, dir)
			}
			vols, _, _ := unstructured.NestedSlice(mustFind(t, objs, "Deployment", releaseName).Object, "spec", "template", "spec", "volumes")
			found := false
			for _, v := range vols {
				if name, _, _ := unstructured.NestedString(v.(map[string]any), "configMap", "name"); name == "garage-ca" {
					found = true
				}
			}
			if !found {
				t.Errorf("no volume from ConfigMap garage-ca: %v", vols)
			}
		},
	}, {
		name: "monitoring, one replica, tuned core settings",
		values: minimalValues + `
replicas: 1
podDisruptionBudget: {enabled: false}
leaderElection: {enabled: false, name: kse-le}
serviceMonitor: {enabled: true, additionalLabels: {release: prom}, endpointConfig: {interval: 30s}}
logLevel: debug
settings: {batchMaxDuration: 30s, batchIdleDuration: 3s, featureGates: {nodeRepair: true, nodeOverlay: true}}
controller: {env: [{name: KARPENTER_SCALEWAY_EM_API_RATE_LIMIT, value: "5"}]}
`,
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			sm := mustFind(t, objs, "ServiceMonitor", releaseName)
			if sm.GetLabels()["release"] != "prom" {
				t.Errorf("ServiceMonitor labels %v", sm.GetLabels())
			}
			eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			if len(eps) != 1 || eps[0].(map[string]any)["interval"] != "30s" || eps[0].(map[string]any)["port"] != "http-metrics" {
				t.Errorf("ServiceMonitor endpoints %v", eps)
			}
			if find(objs, "PodDisruptionBudget", "") != nil {
				t.Error("PDB rendered although disabled")
			}
			ctr := container(t, objs)
			for name, v := range map[string]string{"DISABLE_LEADER_ELECTION": "true", "LEADER_ELECTION_NAME": "kse-le", "LOG_LEVEL": "debug",
				"BATCH_MAX_DURATION": "30s", "BATCH_IDLE_DURATION": "3s", "KARPENTER_SCALEWAY_EM_API_RATE_LIMIT": "5",
				"FEATURE_GATES": "NodeRepair=true,NodeOverlay=true,StaticCapacity=false,CapacityBuffer=false,ReservedCapacity=true,SpotToSpotConsolidation=false"} {
				if got, _, _ := envVar(ctr, name); got != v {
					t.Errorf("env %s = %q, want %q", name, got, v)
				}
			}
			if !grants(t, mustFind(t, objs, "Role", releaseName), "coordination.k8s.io", "leases", "update", "kse-le") {
				t.Error("Role does not follow leaderElection.name")
			}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, mustRender(t, c, tc.values))
		})
	}
}

// TestBadValuesFail: each mistake fails the install with a message naming the value.
func TestBadValuesFail(t *testing.T) {
	c := loadChart(t, controllerChart)
	cases := []struct {
		name, values string
		want         []string // substrings of the error
	}{
		{"no cluster name", strings.Replace(minimalValues, "clusterName: prod-1", "", 1), []string{"/clusterName"}},
		{"cluster name with a space", strings.Replace(minimalValues, "prod-1", `"prod 1"`, 1), []string{"/clusterName"}},
		{"typo in a top-level key", minimalValues + "replica: 3\n", []string{"replica"}},
		{"unknown zone", minimalValues + "  defaultZone: fr-par-9\n", []string{"/scaleway/defaultZone"}},
		{"project is not a UUID", strings.Replace(minimalValues, testProjectID, "my-project", 1), []string{"/scaleway/defaultProjectID"}},
		{"access key format", strings.Replace(minimalValues, testAccessKey, "AKIA123", 1), []string{"/scaleway/credentials/accessKey"}},
		{"log level", minimalValues + "logLevel: verbose\n", []string{"/logLevel"}},
		{"batch window not a duration", minimalValues + "settings: {batchMaxDuration: 10}\n", []string{"/settings/batchMaxDuration"}},
		{"batch window unit", minimalValues + "settings: {batchIdleDuration: 1sec}\n", []string{"/settings/batchIdleDuration"}},
		{"feature gate not a bool", minimalValues + "settings: {featureGates: {nodeRepair: yes-please}}\n", []string{"/settings/featureGates/nodeRepair"}},
		{"port out of range", minimalValues + "metrics: {port: 70000}\n", []string{"/metrics/port"}},
		{"zero replicas", minimalValues + "replicas: 0\n", []string{"/replicas"}},
		{"bad image digest", minimalValues + "image: {repository: x, digest: latest}\n", []string{"/image/digest"}},
		{"bucket endpoint without scheme", minimalValues + "imageBucket: {endpoint: garage:3900}\n", []string{"/imageBucket/endpoint"}},
		{"timeout not a duration", minimalValues + "provider: {imagingTimeout: 20}\n", []string{"/provider/imagingTimeout"}},
		{"join namespace not a name", minimalValues + "rbac: {joinSecretNamespaces: [Team_A]}\n", []string{"/rbac/joinSecretNamespaces/0"}},
		{"no credentials", "clusterName: prod-1\nscaleway: {defaultProjectID: " + testProjectID + "}\n", []string{"scaleway.credentials: set existingSecret"}},
		{"only the access key", "clusterName: prod-1\nscaleway: {defaultProjectID: " + testProjectID + ", credentials: {accessKey: " + testAccessKey + "}}\n", []string{"scaleway.credentials"}},
		{"no project with chart-made Secret", strings.Replace(minimalValues, "  defaultProjectID: "+testProjectID+"\n", "", 1), []string{"scaleway.defaultProjectID is required"}},
		{"half the bucket credentials", minimalValues + "imageBucket: {endpoint: http://g:3900, credentials: {accessKeyID: GK1}}\n", []string{"imageBucket.credentials: set both"}},
		{"bucket without endpoint", minimalValues + "imageBucket: {bucket: talos}\n", []string{"imageBucket.endpoint is required"}},
		{"public bucket with credentials", minimalValues + "imageBucket: {endpoint: http://g:3900, public: true, credentials: {existingSecret: s}}\n", []string{"imageBucket.public"}},
		{"PDB with one replica", minimalValues + "replicas: 1\n", []string{"podDisruptionBudget.enabled needs replicas >= 2"}},
		{"no ServiceAccount name", minimalValues + "serviceAccount: {create: false}\n", []string{"serviceAccount.name"}},
		{"CA bundle from two places", minimalValues + "imageBucket: {caBundle: {configMap: a, secret: b}}\n", []string{"imageBucket.caBundle"}},
		{"CA bundle key", minimalValues + "imageBucket: {caBundle: {secret: b, key: \"a/b\"}}\n", []string{"/imageBucket/caBundle/key"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, c, tc.values)
			if err == nil {
				t.Fatal("rendered without error")
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), testSecretKey) {
				t.Error("error shows the secret key")
			}
		})
	}
	// The minimal values themselves are good (so each case fails for its own reason).
	if _, err := render(t, c, minimalValues); err != nil {
		t.Fatalf("minimal values: %v", err)
	}
}
