package world

import (
	"context"
	"testing"
	"time"

	"github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// A claim seen deleting keeps its deletion timestamp; one that was deleted
// and gone between two listings counts as deleting from the last listing
// that held it, never as live and not deleting until it vanished.
func TestClaimLogDeletionBetweenListings(t *testing.T) {
	cw := NewClaimLog()
	t0 := time.Date(2026, 11, 28, 18, 0, 0, 0, time.UTC)
	created := metav1.NewTime(t0.Add(-time.Minute))
	deleting := metav1.NewTime(t0.Add(time.Second))
	a := karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "a", CreationTimestamp: created}}
	b := karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "b", CreationTimestamp: created}}
	cw.Saw([]karpv1.NodeClaim{a, b}, nil, t0)
	b.DeletionTimestamp = &deleting
	cw.Saw([]karpv1.NodeClaim{a, b}, nil, t0.Add(2*time.Second))
	cw.Saw(nil, nil, t0.Add(5*time.Second))
	got := cw.Claims()
	lastListed := t0.Add(2 * time.Second)
	if c := got["a"]; !c.Deleting.Equal(lastListed) || !c.Gone.Equal(t0.Add(5*time.Second)) {
		t.Errorf("a, gone between polls: deleting %s gone %s, want %s and %s", c.Deleting, c.Gone, lastListed, t0.Add(5*time.Second))
	}
	if c := got["b"]; !c.Deleting.Equal(deleting.Time) || !c.Gone.Equal(t0.Add(5*time.Second)) {
		t.Errorf("b, seen deleting: deleting %s gone %s, want %s", c.Deleting, c.Gone, deleting.Time)
	}
}

// A listing shows the cluster as it was when its request began, so that is
// the time it is stamped with. Here the NodeClaim is deleted, and gone,
// while the listing that still holds it is on its way back (a loaded API
// server answers in seconds): the claim's deletion must count from no later
// than that, or a server released with it looks taken from a live claim.
func TestClaimLogStampsAListingWithItsStart(t *testing.T) {
	ctx := context.Background()
	claim := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	var deleted time.Time
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(claim).
		WithInterceptorFuncs(interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := c.List(ctx, list, opts...); err != nil {
				return err
			}
			if l, ok := list.(*karpv1.NodeClaimList); ok && len(l.Items) > 0 && deleted.IsZero() {
				if err := c.Delete(ctx, claim); err != nil {
					return err
				}
				deleted = time.Now()
				time.Sleep(20 * time.Millisecond) // the answer's way back
			}
			return nil
		}}).Build()
	l := NewClaimLog()
	for range 2 {
		if _, _, err := l.Look(ctx, kube); err != nil {
			t.Fatal(err)
		}
	}
	c := l.Claims()["a"]
	if c.Gone.IsZero() || c.Deleting.After(deleted) {
		t.Fatalf("claim deleted at %s counts as deleting from %s (gone %s): later than its deletion",
			deleted.Format(time.StampMicro), c.Deleting.Format(time.StampMicro), c.Gone.Format(time.StampMicro))
	}
}

// TestCheckMoneyFindsADoubleOrderAndALeak orders servers through the SDK
// against a simulated Scaleway of its own: two for one NodeClaim (I1) and
// one for a NodeClaim the cluster never had, still billed an hour later
// (I4). A server of a live NodeClaim breaks nothing.
func TestCheckMoneyFindsADoubleOrderAndALeak(t *testing.T) {
	sim := scwsim.New(scwsim.Options{})
	url, err := sim.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	w := &World{Sim: sim, SimURL: url, ClusterName: "money", Opts: Options{Profile: "fast"}}
	client, err := w.SDKClient()
	if err != nil {
		t.Fatal(err)
	}
	bm := baremetal.NewAPI(client)
	offerID, _ := sim.OfferID("fr-par-2", "EM-A116X-SSD", "hourly")
	order := func(claim string) {
		t.Helper()
		if _, err := bm.CreateServer(&baremetal.CreateServerRequest{OfferID: offerID, Name: claim,
			Tags: []string{TagManagedBy + "=money", TagNodeClaim + "=" + claim}}); err != nil {
			t.Fatal(err)
		}
	}
	claims := NewClaimLog()
	created := metav1.NewTime(time.Now().Add(-time.Minute))
	claims.Saw([]karpv1.NodeClaim{
		{ObjectMeta: metav1.ObjectMeta{Name: "live", CreationTimestamp: created}},
		{ObjectMeta: metav1.ObjectMeta{Name: "doubled", CreationTimestamp: created}},
	}, nil, time.Now())

	order("live")
	if vs := w.CheckMoney(claims.Claims(), time.Now().Add(time.Hour)); len(vs) != 0 {
		t.Fatalf("a live NodeClaim's server broke %v", vs)
	}
	order("doubled")
	order("doubled")
	order("ghost")
	got := map[string]int{}
	for _, v := range w.CheckMoney(claims.Claims(), time.Now().Add(time.Hour)) {
		got[v.Invariant]++
	}
	if got["I1"] != 1 || got["I4"] != 1 || len(got) != 2 {
		t.Errorf("violations by invariant %v, want one I1 (doubled) and one I4 (ghost)", got)
	}
}

// TestClaimLogRegisteredNeedsItsNode: a NodeClaim counts as registered from
// the time of its Registered condition only once the Node it names is there
// with its providerID; a condition written with a made-up providerID and no
// such Node (as the regression suite's garbage-collection spec does) leaves
// it unregistered.
func TestClaimLogRegisteredNeedsItsNode(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 2, 0, 0, 0, time.UTC)
	claim := func(name, node, providerID string) karpv1.NodeClaim {
		nc := karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(-time.Minute))},
			Status: karpv1.NodeClaimStatus{NodeName: node, ProviderID: providerID}}
		nc.StatusConditions().SetTrue(karpv1.ConditionTypeRegistered)
		return nc
	}
	served := claim("real", "node-a", "scaleway-em://fr-par-2/a")
	forged := claim("forged", "test-node-name", "Provider:///AZ/i-01234567890123456")
	early := claim("early", "node-b", "scaleway-em://fr-par-2/b")
	nodes := []corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Spec: corev1.NodeSpec{ProviderID: "scaleway-em://fr-par-2/a"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: corev1.NodeSpec{ProviderID: "Provider:///AZ/i-01234567890123456"}},
	}
	l := NewClaimLog()
	l.Saw([]karpv1.NodeClaim{served, forged, early}, nodes, t0)
	got := l.Claims()
	if got["real"].Registered.IsZero() {
		t.Error("a NodeClaim whose Node is there is not registered")
	}
	if !got["forged"].Registered.IsZero() {
		t.Errorf("a NodeClaim registered by its condition alone, with no Node of its providerID: %v", got["forged"].Registered)
	}
	if !got["early"].Registered.IsZero() {
		t.Error("registered before its Node was listed")
	}
	// Its Node comes: registered from the condition's time, which is exact.
	nodes = append(nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}, Spec: corev1.NodeSpec{ProviderID: "scaleway-em://fr-par-2/b"}})
	l.Saw([]karpv1.NodeClaim{served, forged, early}, nodes, t0.Add(time.Second))
	cond := early.StatusConditions().Get(karpv1.ConditionTypeRegistered)
	if got := l.Claims()["early"].Registered; !got.Equal(cond.LastTransitionTime.Time) {
		t.Errorf("registered at %v, want the condition's %v", got, cond.LastTransitionTime.Time)
	}
}
