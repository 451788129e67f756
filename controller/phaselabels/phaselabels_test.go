package phaselabels_test

import (
	"context"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/controllers/nodeclaim/lifecycle"
	"sigs.k8s.io/karpenter/pkg/events"
	"sigs.k8s.io/karpenter/pkg/state/nodepoolhealth"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/phaselabels"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

// launcher is the provider side core calls. The install controller starts
// as soon as Create has ordered, so the first label is written while core
// still holds its copy of the NodeClaim from before: core's write of what
// Create returned must not undo it.
type launcher struct {
	cloudprovider.CloudProvider
	kube client.Client
}

func (launcher) Name() string { return "scaleway-em" }
func (launcher) GetSupportedNodeClasses() []status.Object {
	return []status.Object{&v1alpha1.ScalewayElasticMetalNodeClass{}}
}
func (l launcher) Create(ctx context.Context, nc *karpv1.NodeClaim) (*karpv1.NodeClaim, error) {
	if err := phaselabels.Set(ctx, l.kube, nc.Name, phaselabels.State{Phase: install.PhaseOrdered}); err != nil {
		return nil, err
	}
	out := nc.DeepCopy()
	out.Status.ProviderID = "scaleway-em://fr-par-2/" + nc.Name
	return out, nil
}

// The labels follow the install through Karpenter core's real NodeClaim
// lifecycle controller on a real API server: written between core's
// reconciles, never undone by them, copied by core onto the Node at
// registration and taken off it again by Settle.
func TestLabelsFollowTheInstallThroughCoresLifecycle(t *testing.T) {
	kube := testenv.StartKube(t, testenv.KubeOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cached := kube.CachedClient(t)
	direct := kube.Client
	core := lifecycle.NewController(clock.RealClock{}, cached, launcher{kube: direct}, events.NewRecorder(&record.FakeRecorder{}), nodepoolhealth.NewState(), nil)

	claim := &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "claim-1", Labels: map[string]string{"team": "a"}},
		Spec: karpv1.NodeClaimSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: v1alpha1.SchemeGroupVersion.Group, Kind: "ScalewayElasticMetalNodeClass", Name: "default"},
			Requirements: []karpv1.NodeSelectorRequirementWithMinValues{},
		},
	}
	if err := direct.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	get := func() *karpv1.NodeClaim {
		t.Helper()
		got := &karpv1.NodeClaim{}
		if err := direct.Get(ctx, types.NamespacedName{Name: claim.Name}, got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	reconcile := func() *karpv1.NodeClaim {
		t.Helper()
		if _, err := core.Reconcile(ctx, get()); err != nil {
			t.Fatalf("core lifecycle: %v", err)
		}
		return get()
	}
	shows := func(obj client.Object, want phaselabels.State) {
		t.Helper()
		if !want.Shown(obj) {
			t.Fatalf("%s labels %v, want %+v shown", obj.GetName(), obj.GetLabels(), want)
		}
		if obj.GetLabels()["team"] != "a" {
			t.Fatalf("%s lost the user's label: %v", obj.GetName(), obj.GetLabels())
		}
	}

	var got *karpv1.NodeClaim
	for range 5 {
		if got = reconcile(); got.StatusConditions().Get(karpv1.ConditionTypeLaunched).IsTrue() {
			break
		}
	}
	if got.Status.ProviderID == "" {
		t.Fatalf("core did not launch: %+v", got.Status)
	}
	shows(got, phaselabels.State{Phase: install.PhaseOrdered})

	for _, s := range []phaselabels.State{
		{Phase: install.PhaseRescue}, {Phase: install.PhaseImaging}, {Phase: install.PhaseImaging, Percent: 40},
		{Phase: install.PhaseBooting},
	} {
		if err := phaselabels.Set(ctx, direct, claim.Name, s); err != nil {
			t.Fatal(err)
		}
		shows(reconcile(), s)
	}
	if _, ok := get().Labels[v1alpha1.LabelImagingProgress]; ok {
		t.Fatal("the imaging percentage stayed after imaging")
	}

	// The node registers: core copies the NodeClaim's labels onto it.
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Spec:       corev1.NodeSpec{ProviderID: got.Status.ProviderID, Taints: []corev1.Taint{karpv1.UnregisteredNoExecuteTaint}},
	}
	if err := direct.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for got = reconcile(); !got.StatusConditions().Get(karpv1.ConditionTypeRegistered).IsTrue(); got = reconcile() {
		if time.Now().After(deadline) {
			t.Fatalf("core never registered the node: %+v", got.Status.Conditions)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := direct.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
		t.Fatal(err)
	}
	if node.Labels[v1alpha1.LabelInstallPhase] != string(install.PhaseBooting) {
		t.Fatalf("core did not copy the phase label onto the node: %v (Settle has nothing to do)", node.Labels)
	}

	if err := phaselabels.Settle(ctx, direct, got); err != nil {
		t.Fatal(err)
	}
	shows(reconcile(), phaselabels.State{Phase: install.PhaseJoined})
	if err := direct.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
		t.Fatal(err)
	}
	if _, ok := node.Labels[v1alpha1.LabelInstallPhase]; ok || node.Labels["team"] != "a" {
		t.Fatalf("node labels after Settle: %v, want the install's gone and the user's kept", node.Labels)
	}
}
