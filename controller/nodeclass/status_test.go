package nodeclass_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scaleway/scaleway-sdk-go/scw"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/imagesource"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/kubeversion"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/nodeclass"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/manifest"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

const controllerProject = "11111111-2222-4333-8444-555555555555"

// images answers Resolve with a fixed image, or err.
type images struct{ err error }

func (i *images) Resolve(context.Context, imagesource.Settings) (*imagesource.Image, error) {
	if i.err != nil {
		return nil, i.err
	}
	return &imagesource.Image{SchematicID: strings.Repeat("a", 64), TalosVersion: "v1.12.4", Arch: "amd64", Format: "zstd",
		RawSHA256: strings.Repeat("b", 64), RawSize: 1 << 30,
		Manifest: &manifest.Manifest{Boot: &manifest.Boot{KernelArgs: "talos.config=metal-iso", Source: manifest.BootSourceFlag, MetalISO: true}}}, nil
}

type credentials struct{ zones []string }

func (c *credentials) CheckCredentials(_ context.Context, zones []scw.Zone) error {
	for _, z := range zones {
		c.zones = append(c.zones, string(z))
	}
	return nil
}

type env struct {
	ctx    context.Context
	kube   *testenv.Kube
	cs     kubernetes.Interface
	images *images
	creds  *credentials
	c      *nodeclass.StatusController
}

// shared is one API server (with the join Secret) for every test: each test
// works on NodeClasses of its own names.
var shared struct {
	once sync.Once
	kube *testenv.Kube
	cs   kubernetes.Interface
	rec  events.Recorder
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.kube != nil {
		_ = shared.kube.Stop()
	}
	os.Exit(code)
}

func startShared(ctx context.Context) error {
	kube, err := testenv.NewKube(ctx, testenv.KubeOptions{CRDs: apis.CRDs})
	if err != nil {
		return err
	}
	shared.kube = kube
	if shared.cs, err = kubernetes.NewForConfig(kube.Config); err != nil {
		return err
	}
	// Karpenter's recorder over client-go's broadcaster, as the operator
	// builds it: events reach the API server for real.
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: shared.cs.CoreV1().Events("")})
	shared.rec = events.NewRecorder(b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "karpenter-scaleway-em"}))

	bundle, err := os.ReadFile("../../talosgen/testdata/test-only-secrets.yaml")
	if err != nil {
		return err
	}
	if _, err := shared.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "karpenter"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err = shared.cs.CoreV1().Secrets("karpenter").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-join", Namespace: "karpenter"},
		Data:       map[string][]byte{"secrets.yaml": bundle, "endpoint": []byte("https://k8s.example.test:6443"), "cluster-name": []byte("test")},
	}, metav1.CreateOptions{})
	return err
}

func start(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	shared.once.Do(func() { shared.err = startShared(ctx) })
	if shared.err != nil {
		t.Fatalf("API server: %v", shared.err)
	}
	e := &env{ctx: ctx, kube: shared.kube, cs: shared.cs, images: &images{}, creds: &credentials{}}
	controlPlane, err := kubeversion.FromConfig(shared.kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	e.c = &nodeclass.StatusController{Kube: shared.kube.Client, Secrets: shared.kube.Client, Images: e.images, Credentials: e.creds,
		DefaultZone: "fr-par-2", ProjectID: controllerProject, Recorder: shared.rec, ControlPlane: controlPlane}
	return e
}

func (e *env) nodeClass(t *testing.T, name string) *v1alpha1.ScalewayElasticMetalNodeClass {
	t.Helper()
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ScalewayElasticMetalNodeClassSpec{
			Image: v1alpha1.ImageSpec{SchematicID: strings.Repeat("a", 64), TalosVersion: "v1.12.4"},
			Talos: v1alpha1.TalosSpec{JoinSecretRef: v1alpha1.SecretReference{Namespace: "karpenter", Name: "cluster-join"}},
		},
	}
	if err := e.kube.Client.Create(e.ctx, nc); err != nil {
		t.Fatal(err)
	}
	return nc
}

// reconcile runs the controller on the stored object and returns the result.
func (e *env) reconcile(t *testing.T, name string) *v1alpha1.ScalewayElasticMetalNodeClass {
	t.Helper()
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	if err := e.kube.Client.Get(e.ctx, types.NamespacedName{Name: name}, nc); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Reconcile(e.ctx, nc); err != nil {
		t.Fatal(err)
	}
	if err := e.kube.Client.Get(e.ctx, types.NamespacedName{Name: name}, nc); err != nil {
		t.Fatal(err)
	}
	return nc
}

type event struct{ typ, reason, message string }

// events waits until the NodeClass's events (cluster-scoped objects' events
// go to the default namespace) number want, and returns them oldest first.
func (e *env) events(t *testing.T, name string, want int) []event {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := e.cs.CoreV1().Events("default").List(e.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			t.Fatal(err)
		}
		items := list.Items
		slices.SortStableFunc(items, func(a, b corev1.Event) int { return a.FirstTimestamp.Compare(b.FirstTimestamp.Time) })
		var out []event
		for _, ev := range items {
			if ev.InvolvedObject.Kind != "ScalewayElasticMetalNodeClass" {
				t.Errorf("event %s involves kind %q", ev.Reason, ev.InvolvedObject.Kind)
			}
			out = append(out, event{ev.Type, ev.Reason, ev.Message})
		}
		if len(out) >= want || time.Now().After(deadline) {
			if len(out) != want {
				t.Fatalf("%d events on %s, want %d: %+v", len(out), name, want, out)
			}
			return out
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func reasons(evs []event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.typ+"/"+ev.reason)
	}
	slices.Sort(out)
	return out
}

// A NodeClass naming another project is not Ready under its own condition,
// ProjectReady, while its credentials stay Ready; each change of a condition
// is one event, and a reconcile that changes nothing emits none.
func TestConditionsAndTheirEvents(t *testing.T) {
	e := start(t)
	e.nodeClass(t, "general")

	nc := e.reconcile(t, "general")
	if !nc.StatusConditions().Root().IsTrue() {
		t.Fatalf("not Ready: %+v", nc.Status.Conditions)
	}
	if !slices.Equal(nc.Status.Zones, []string{"fr-par-2"}) {
		t.Errorf("status.zones = %v, want the default zone", nc.Status.Zones)
	}
	got := reasons(e.events(t, "general", 6))
	want := []string{"Normal/CredentialsReady", "Normal/ImageReady", "Normal/InstallsHealthy", "Normal/JoinConfigReady", "Normal/ProjectReady", "Normal/Ready"}
	if !slices.Equal(got, want) {
		t.Errorf("events after the first reconcile: %v, want %v", got, want)
	}

	e.reconcile(t, "general")
	e.events(t, "general", 6)

	nc.Spec.ProjectID = "99999999-2222-4333-8444-555555555555"
	if err := e.kube.Client.Update(e.ctx, nc); err != nil {
		t.Fatal(err)
	}
	nc = e.reconcile(t, "general")
	project := nc.StatusConditions().Get(v1alpha1.ConditionTypeProjectReady)
	if project == nil || !project.IsFalse() || project.Reason != nodeclass.ReasonProjectMismatch || !strings.Contains(project.Message, controllerProject) {
		t.Fatalf("ProjectReady = %+v, want False/ProjectMismatch naming the controller's project", project)
	}
	if c := nc.StatusConditions().Get(v1alpha1.ConditionTypeCredentialsReady); c == nil || !c.IsTrue() {
		t.Errorf("CredentialsReady = %+v: a project mismatch is not a credentials problem", c)
	}
	if nc.StatusConditions().Root().IsTrue() {
		t.Error("Ready although ProjectReady is False")
	}
	evs := e.events(t, "general", 8)
	last := evs[6:]
	if got := reasons(last); !slices.Equal(got, []string{"Warning/NotReady", "Warning/ProjectMismatch"}) {
		t.Errorf("events after the project change: %v", got)
	}
	for _, ev := range last {
		if !strings.Contains(ev.message, "ProjectReady") {
			t.Errorf("event %s message %q does not name the condition", ev.reason, ev.message)
		}
	}

	nc.Spec.ProjectID = ""
	if err := e.kube.Client.Update(e.ctx, nc); err != nil {
		t.Fatal(err)
	}
	if nc = e.reconcile(t, "general"); !nc.StatusConditions().Root().IsTrue() {
		t.Fatalf("not Ready after the fix: %+v", nc.Status.Conditions)
	}
	if got := reasons(e.events(t, "general", 10)[8:]); !slices.Equal(got, []string{"Normal/ProjectReady", "Normal/Ready"}) {
		t.Errorf("events after the fix: %v", got)
	}
}

// A change of reason while a condition stays False is news too (the
// operator fixed one thing and hit the next).
func TestReasonChangeWhileFalse(t *testing.T) {
	e := start(t)
	e.images.err = &imagesource.Error{Reason: imagesource.ReasonManifestMissing, Err: errors.New("talos/x/manifest.json: not found")}
	e.nodeClass(t, "img")
	e.reconcile(t, "img")
	e.events(t, "img", 6) // four True, ImageManifestMissing, NotReady
	e.images.err = &imagesource.Error{Reason: imagesource.ReasonAccessDenied, Err: errors.New("access denied")}
	nc := e.reconcile(t, "img")
	if c := nc.StatusConditions().Get(v1alpha1.ConditionTypeImageReady); c == nil || c.Reason != string(imagesource.ReasonAccessDenied) {
		t.Fatalf("ImageReady = %+v", c)
	}
	// The root stays False with the same reason: one event, the image's.
	evs := e.events(t, "img", 7)
	if ev := evs[6]; ev.typ != corev1.EventTypeWarning || ev.reason != string(imagesource.ReasonAccessDenied) {
		t.Errorf("last event %+v, want Warning/%s", ev, imagesource.ReasonAccessDenied)
	}
}

// The ZONES column (server-side printing, what kubectl get shows) holds the
// effective zones, also when spec.zones is empty.
func TestZonesColumnShowsEffectiveZones(t *testing.T) {
	e := start(t)
	e.nodeClass(t, "defaulted")
	e.reconcile(t, "defaulted")
	multi := e.nodeClass(t, "multi")
	multi.Spec.Zones = []string{"fr-par-1", "nl-ams-1"}
	if err := e.kube.Client.Update(e.ctx, multi); err != nil {
		t.Fatal(err)
	}
	e.reconcile(t, "multi")

	table := &metav1.Table{}
	err := e.cs.CoreV1().RESTClient().Get().AbsPath("/apis", apis.Group, "v1alpha1", "scalewayelasticmetalnodeclasses").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(e.ctx).Into(table)
	if err != nil {
		t.Fatal(err)
	}
	col := slices.IndexFunc(table.ColumnDefinitions, func(c metav1.TableColumnDefinition) bool { return c.Name == "Zones" })
	if col < 0 {
		t.Fatalf("no Zones column in %+v", table.ColumnDefinitions)
	}
	got := map[string]string{}
	for _, row := range table.Rows {
		var name string
		if m, ok := row.Object.Object.(*metav1.PartialObjectMetadata); ok {
			name = m.Name
		} else {
			name, _ = row.Cells[0].(string)
		}
		s, _ := row.Cells[col].(string)
		got[name] = s
	}
	if !strings.Contains(got["defaulted"], "fr-par-2") {
		t.Errorf("ZONES of a NodeClass without spec.zones = %q, want the default zone", got["defaulted"])
	}
	if !strings.Contains(got["multi"], "fr-par-1") || !strings.Contains(got["multi"], "nl-ams-1") {
		t.Errorf("ZONES of multi = %q", got["multi"])
	}
}

// The CRD refuses what can never work, saying why, and accepts a NodeClass
// that takes the controller's default bucket.
func TestCRDRefusesWhatCannotWork(t *testing.T) {
	e := start(t)
	base := func(name string) *v1alpha1.ScalewayElasticMetalNodeClass {
		return &v1alpha1.ScalewayElasticMetalNodeClass{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.ScalewayElasticMetalNodeClassSpec{
				Image: v1alpha1.ImageSpec{SchematicID: strings.Repeat("a", 64), TalosVersion: "v1.12.4"},
				Talos: v1alpha1.TalosSpec{JoinSecretRef: v1alpha1.SecretReference{Namespace: "karpenter", Name: "cluster-join"}},
			},
		}
	}
	if err := e.kube.Client.Create(e.ctx, base("default-bucket")); err != nil {
		t.Errorf("a NodeClass without spec.image.bucket (the controller's S3_BUCKET) is refused: %v", err)
	}
	s3 := base("s3-manifest")
	s3.Spec.Image = v1alpha1.ImageSpec{ManifestURL: "s3://talos-images/talos/x/v1.12.4/manifest.json"}
	if err := e.kube.Client.Create(e.ctx, s3); err != nil {
		t.Errorf("an s3:// manifestURL (supported by the controller) is refused: %v", err)
	}
	for _, tc := range []struct {
		name, want string
		edit       func(*v1alpha1.ScalewayElasticMetalNodeClass)
	}{
		{"arm64", "only amd64 is supported", func(nc *v1alpha1.ScalewayElasticMetalNodeClass) { nc.Spec.Image.Architecture = "arm64" }},
		{"no-image", "needs either manifestURL, or schematicID and talosVersion", func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
			nc.Spec.Image = v1alpha1.ImageSpec{Bucket: "talos-images"}
		}},
		{"ftp-manifest", "spec.image.manifestURL", func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
			nc.Spec.Image = v1alpha1.ImageSpec{ManifestURL: "ftp://example.com/manifest.json"}
		}},
	} {
		nc := base(tc.name)
		tc.edit(nc)
		err := e.kube.Client.Create(e.ctx, nc)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Create = %v, want a refusal saying %q", tc.name, err, tc.want)
		}
	}
}

// Servers of a namesake cluster are a warning on every NodeClass, not a
// reason to stop ordering: Ready stays True; the condition appears only
// once there is something to say, and turns True when they are gone.
func TestForeignServersWarnWithoutChangingReady(t *testing.T) {
	e := start(t)
	var alone []identity.LeftAlone
	e.c.LeftAlone = func() []identity.LeftAlone { return alone }
	e.nodeClass(t, "namesake")
	nc := e.reconcile(t, "namesake")
	if c := nc.StatusConditions().Get(v1alpha1.ConditionTypeClusterIdentityUnique); c != nil {
		t.Fatalf("ClusterIdentityUnique = %+v with nothing left alone, want no condition", c)
	}
	e.events(t, "namesake", 6) // four sub-conditions, InstallsHealthy, Ready

	alone = []identity.LeftAlone{{ID: "srv-1", Zone: "fr-par-2", ClusterID: "uid-production", Reason: identity.ReasonForeignIdentity}}
	nc = e.reconcile(t, "namesake")
	c := nc.StatusConditions().Get(v1alpha1.ConditionTypeClusterIdentityUnique)
	if c == nil || !c.IsFalse() || c.Reason != nodeclass.ReasonForeignServers ||
		!strings.Contains(c.Message, "fr-par-2/srv-1 (identity uid-production)") {
		t.Fatalf("ClusterIdentityUnique = %+v, want False/ForeignServers naming the server", c)
	}
	if !nc.StatusConditions().Root().IsTrue() {
		t.Errorf("Ready is not True: %+v", nc.StatusConditions().Root())
	}
	if ev := e.events(t, "namesake", 7)[6]; ev.typ != corev1.EventTypeWarning || ev.reason != nodeclass.ReasonForeignServers {
		t.Errorf("event %+v, want Warning/%s", ev, nodeclass.ReasonForeignServers)
	}

	alone = nil
	nc = e.reconcile(t, "namesake")
	if c := nc.StatusConditions().Get(v1alpha1.ConditionTypeClusterIdentityUnique); c == nil || !c.IsTrue() {
		t.Fatalf("ClusterIdentityUnique = %+v once the servers are gone, want True", c)
	}
}

// A join Secret naming a kubelet newer than the API server (the envtest
// kube-apiserver) makes the NodeClass not Ready before any server is bought;
// one naming none gets the API server's version and is Ready.
func TestKubeletNewerThanTheAPIServerIsNotReady(t *testing.T) {
	e := start(t)
	bundle, err := e.cs.CoreV1().Secrets("karpenter").Get(e.ctx, "cluster-join", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{"kubernetes-version": []byte("1.99.0")}
	for k, v := range bundle.Data {
		if k != "kubernetes-version" {
			data[k] = v
		}
	}
	if _, err := e.cs.CoreV1().Secrets("karpenter").Create(e.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "join-too-new", Namespace: "karpenter"}, Data: data,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nc := e.nodeClass(t, "kubelet-too-new")
	nc.Spec.Talos.JoinSecretRef.Name = "join-too-new"
	if err := e.kube.Client.Update(e.ctx, nc); err != nil {
		t.Fatal(err)
	}
	got := e.reconcile(t, "kubelet-too-new").StatusConditions().Get(v1alpha1.ConditionTypeJoinConfigReady)
	if !got.IsFalse() || got.Reason != nodeclass.ReasonVersionSkew || !strings.Contains(got.Message, "newer than the API server") {
		t.Fatalf("JoinConfigReady = %s/%s %q, want False/%s", got.Status, got.Reason, got.Message, nodeclass.ReasonVersionSkew)
	}
	e.nodeClass(t, "kubelet-default")
	if got := e.reconcile(t, "kubelet-default").StatusConditions().Get(v1alpha1.ConditionTypeJoinConfigReady); !got.IsTrue() {
		t.Fatalf("JoinConfigReady without kubernetes-version = %s/%s %q, want True (the API server's version)", got.Status, got.Reason, got.Message)
	}
}
