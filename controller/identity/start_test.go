package identity_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/simapi"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testlog"
)

// At start, a sweep by identity retags the servers ordered under a previous
// name, so that listings by the new name (List, the garbage collector, spare
// takes) find them again; a server of another identity with the old name
// stays another cluster's. The identity and name are recorded.
func TestRenamedClusterRetagsItsServersAtStart(t *testing.T) {
	ctx := context.Background()
	sim, api := simapi.Start(t, zone)
	old := identity.Identity{Name: "prod", ID: "uid-1"}
	seen := order(t, api, sim, "a", old.Tags()...)
	swept := order(t, api, sim, "b", old.Tags()...)
	other := order(t, api, sim, "c", identity.Identity{Name: "prod", ID: "uid-2"}.Tags()...)
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()
	renamed := &identity.Owner{Identity: identity.Identity{Name: "prod-eu", ID: "uid-1"}, API: api, Kube: kube, Log: testlog.New(t)}

	if err := renamed.Start(ctx, kube, "karpenter", []string{string(zone)}); err != nil {
		t.Fatal(err)
	}
	listed, err := api.ListServers(ctx, zone, []string{scaleway.Tag(scaleway.TagManagedBy, "prod-eu")})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, s := range listed {
		ids[s.ID] = true
	}
	if !ids[seen.ID] || !ids[swept.ID] || ids[other.ID] || len(listed) != 2 {
		t.Fatalf("servers listed under the new name: %v; want %s and %s, not %s (another identity)", ids, seen.ID, swept.ID, other.ID)
	}
	if s, _ := sim.Server(other.ID); !scaleway.HasTags(s.Tags, scaleway.Tag(scaleway.TagManagedBy, "prod")) {
		t.Fatalf("a server of another identity was retagged: %v", s.Tags)
	}
	// The identity and name are recorded for the next start.
	cm := &corev1.ConfigMap{}
	if err := kube.Get(ctx, types.NamespacedName{Namespace: "karpenter", Name: identity.RecordName}, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["clusterID"] != "uid-1" || cm.Data["clusterName"] != "prod-eu" {
		t.Fatalf("recorded identity %v", cm.Data)
	}
}

// A changed CLUSTER_ID while servers carry the previous identity (with
// this cluster's name) is refused at start with an error that says what to
// do; once none carries it (retagged or deleted), the new identity starts.
func TestChangedClusterIDIsRefusedWhileServersCarryThePreviousOne(t *testing.T) {
	ctx := context.Background()
	sim, api := simapi.Start(t, zone)
	prev := identity.Identity{Name: "prod", ID: "uid-1"}
	held := order(t, api, sim, "a", prev.Tags()...)
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "karpenter", Name: identity.RecordName},
		Data:       map[string]string{"clusterID": "uid-1", "clusterName": "prod"},
	}).Build()
	changed := &identity.Owner{Identity: identity.Identity{Name: "prod", ID: "restored-2"}, API: api, Kube: kube, Log: testlog.New(t)}

	err := changed.Start(ctx, kube, "karpenter", []string{string(zone)})
	var ce *identity.ChangedError
	if !errors.As(err, &ce) || len(ce.Servers) != 1 || ce.Servers[0] != string(zone)+"/"+held.ID {
		t.Fatalf("Start with a changed CLUSTER_ID = %v; want a ChangedError naming %s", err, held.ID)
	}
	for _, want := range []string{"CLUSTER_ID", `back to "uid-1"`, "karpenter-scaleway-em/cluster-id=restored-2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if rec := record(t, kube); rec["clusterID"] != "uid-1" {
		t.Fatalf("a refused start overwrote the record: %v", rec)
	}
	// Set back: it starts.
	back := &identity.Owner{Identity: prev, API: api, Kube: kube, Log: testlog.New(t)}
	if err := back.Start(ctx, kube, "karpenter", []string{string(zone)}); err != nil {
		t.Fatalf("Start with the previous identity: %v", err)
	}
	// Retagged as the error says: the new identity starts and is recorded.
	if _, err := api.EditTags(ctx, zone, held.ID, func(tags []string) ([]string, bool) {
		return scaleway.SetTagIn(tags, scaleway.TagClusterID, "restored-2")
	}); err != nil {
		t.Fatal(err)
	}
	if err := changed.Start(ctx, kube, "karpenter", []string{string(zone)}); err != nil {
		t.Fatalf("Start once no server carries the previous identity: %v", err)
	}
	if rec := record(t, kube); rec["clusterID"] != "restored-2" {
		t.Fatalf("record after the accepted change: %v", rec)
	}
}

func record(t *testing.T, kube client.Client) map[string]string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := kube.Get(context.Background(), types.NamespacedName{Namespace: "karpenter", Name: identity.RecordName}, cm); err != nil {
		t.Fatal(err)
	}
	return cm.Data
}
