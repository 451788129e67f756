package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/e2e/harness"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// metricSum adds up the series of a controller's metrics whose line starts
// with prefix (a name, or a name and the start of its labels).
func metricSum(ctx context.Context, c *world.Controller, prefix string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	text, err := c.Metrics(ctx)
	if err != nil {
		return 0, err
	}
	sum, found := 0.0, false
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("%q: %w", line, err)
		}
		sum, found = sum+v, true
	}
	if !found {
		return 0, fmt.Errorf("no series %s in the metrics", prefix)
	}
	return sum, nil
}

// A staging cluster installed with production's values: the same
// clusterName and Scaleway project, but its own Kubernetes (so its own
// kube-system UID, and none of production's NodeClaims). Before cluster
// identities its garbage collector released every production server after
// the grace period. Now, through many sweeps, it touches none, counts them,
// and says so on its NodeClass; production, meanwhile, adopts a server of
// its own that an earlier version ordered without an identity.
func TestNamesakeClusterLeavesServersAlone(t *testing.T) {
	e := harness.Start(t, harness.Setup{})
	e.Run("prod", 2, "3", "1Gi", true)
	e.WaitBound("prod", 2, harness.WaitLong)
	prodID, err := e.W.ClusterID(e.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	idTag := world.TagClusterID + "=" + prodID
	prod := e.W.Sim.Servers()
	if len(prod) != 2 {
		t.Fatalf("%d servers, want 2", len(prod))
	}
	for _, s := range prod {
		if world.TagValue(s.Tags, world.TagClusterID) != prodID {
			t.Fatalf("server %s ordered without the cluster's identity: %v", s.ID, s.Tags)
		}
	}

	// One server as an earlier version left it: the name, no identity.
	client, err := e.W.SDKClient()
	if err != nil {
		t.Fatal(err)
	}
	legacy := prod[0]
	var nameOnly []string
	for _, tag := range legacy.Tags {
		if !strings.HasPrefix(tag, world.TagClusterID+"=") {
			nameOnly = append(nameOnly, tag)
		}
	}
	if _, err := baremetal.NewAPI(client).UpdateServer(&baremetal.UpdateServerRequest{Zone: scw.Zone(legacy.Zone),
		ServerID: legacy.ID, Tags: &nameOnly}, scw.WithContext(e.Ctx)); err != nil {
		t.Fatal(err)
	}
	e.Eventually("production adopts its name-only server (its NodeClaim names it)", harness.WaitLong, func() (bool, string) {
		s, _ := e.W.Sim.Server(legacy.ID)
		return world.TagValue(s.Tags, world.TagClusterID) == prodID, fmt.Sprintf("tags %v", s.Tags)
	})
	if n, err := metricSum(e.Ctx, e.C, "karpenter_scaleway_em_servers_adopted_total"); err != nil || n != 1 {
		t.Errorf("production servers_adopted_total = %v (%v), want 1", n, err)
	}
	if n := strings.Count(e.C.LogTail(100000), "adopted a server ordered before cluster identities"); n != 1 {
		t.Errorf("%d adoption log lines, want 1", n)
	}

	// Staging: its own API server, production's name and project.
	before := len(e.W.Sim.Calls())
	dir := filepath.Join(e.W.Dir, "kube-staging")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	staging, err := testenv.NewKube(e.Ctx, testenv.KubeOptions{Dir: dir, CRDs: apis.CRDs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = staging.Stop() })
	if err := staging.Client.Create(e.Ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.W.SystemNamespace}}); err != nil {
		t.Fatal(err)
	}
	if err := staging.Client.Create(e.Ctx, e.W.NodeClass("default")); err != nil {
		t.Fatal(err)
	}
	sc := world.StartController(t, e.W, world.ControllerOptions{LogName: "staging.log", Env: []string{"KUBECONFIG=" + staging.KubeconfigPath}})
	hctx, hcancel := context.WithTimeout(e.Ctx, 2*time.Minute)
	defer hcancel()
	if err := sc.WaitHealthy(hctx); err != nil {
		t.Fatal(err)
	}

	foreign := `karpenter_scaleway_em_servers_left_alone{reason="foreign_identity"}`
	e.Eventually("staging counts production's servers as another cluster's", harness.WaitLong, func() (bool, string) {
		n, err := metricSum(e.Ctx, sc, foreign)
		return err == nil && n == 2, fmt.Sprintf("%s = %v (%v)", foreign, n, err)
	})
	// Then several of staging's sweeps, every server past the grace period.
	sweeps := `controller_runtime_reconcile_total{controller="scaleway-em.garbagecollection"`
	start, err := metricSum(e.Ctx, sc, sweeps)
	if err != nil {
		t.Fatal(err)
	}
	e.Eventually("five more garbage collection sweeps in staging", harness.WaitLong, func() (bool, string) {
		n, err := metricSum(e.Ctx, sc, sweeps)
		return err == nil && n >= start+5, fmt.Sprintf("%v sweeps since (%v)", n-start, err)
	})

	for _, s := range prod {
		got, ok := e.W.Sim.Server(s.ID)
		if !ok || got.Status == string(baremetal.ServerStatusDeleting) {
			t.Errorf("production server %s released", s.ID)
		} else if !strings.Contains(strings.Join(got.Tags, " "), idTag) {
			t.Errorf("production server %s lost its identity: %v", s.ID, got.Tags)
		}
	}
	// Servers only: a sweep also removes the rescue SSH key from IAM once
	// no install needs it (DELETE /iam/.../ssh-keys/<id>).
	for _, c := range e.W.Sim.Calls()[before:] {
		if (c.Method == "DELETE" && strings.Contains(c.Path, "/servers/")) || strings.HasSuffix(c.Path, "/reboot") {
			t.Errorf("%s %s while no node was disrupted", c.Method, c.Path)
		}
	}
	nodes := e.Nodes()
	if len(nodes) != 2 {
		t.Errorf("%d production nodes, want 2", len(nodes))
	}
	for i := range nodes {
		if !nodeIsReady(&nodes[i]) {
			t.Errorf("node %s not Ready", nodes[i].Name)
		}
	}
	if n := strings.Count(sc.LogTail(100000), "another cluster's identity"); n != 2 {
		t.Errorf("staging logged %d warnings, want one per server (2)", n)
	}
	nc := e.W.NodeClass("default")
	if err := staging.Client.Get(e.Ctx, types.NamespacedName{Name: "default"}, nc); err != nil {
		t.Fatal(err)
	}
	cond := nc.StatusConditions().Get("ClusterIdentityUnique")
	if cond == nil || !cond.IsFalse() || cond.Reason != "ForeignServers" || !strings.Contains(cond.Message, prodID) {
		t.Errorf("staging NodeClass ClusterIdentityUnique = %+v, want False/ForeignServers naming production's identity", cond)
	}
	if n, err := metricSum(e.Ctx, e.C, foreign); err != nil || n != 0 {
		t.Errorf("production %s = %v (%v), want 0: staging orders nothing", foreign, n, err)
	}
}

// Issue 31 item 8: a cluster renamed (clusterName changed in the chart's
// values) keeps its servers. Before, the restarted controller saw none of
// them: Get answered NotFound for every NodeClaim, Karpenter deleted them
// and ordered replacements, and the old servers stayed billed. Now they
// carry the cluster's identity and are retagged with the new name: the
// NodeClaims stay, nothing is ordered, nothing is released.
func TestRenamedClusterKeepsItsServers(t *testing.T) {
	e := harness.Start(t, harness.Setup{})
	e.Run("app", 2, "3", "1Gi", true)
	e.WaitBound("app", 2, harness.WaitLong)
	claims := map[string]bool{}
	for _, c := range e.NodeClaims() {
		claims[c.Name] = true
	}
	servers := e.W.Sim.Servers()
	if len(servers) != 2 || len(claims) != 2 {
		t.Fatalf("%d servers and %d nodeclaims, want 2 each", len(servers), len(claims))
	}
	if err := e.C.Stop(); err != nil {
		t.Fatal(err)
	}
	renamed := e.W.ClusterName + "-renamed"
	e.C = world.StartController(t, e.W, world.ControllerOptions{LogName: "renamed.log", Env: []string{"CLUSTER_NAME=" + renamed}})
	hctx, hcancel := context.WithTimeout(e.Ctx, 2*time.Minute)
	defer hcancel()
	if err := e.C.WaitHealthy(hctx); err != nil {
		t.Fatal(err)
	}
	e.Eventually("the servers retagged with the new name", harness.WaitLong, func() (bool, string) {
		for _, s := range servers {
			now, _ := e.W.Sim.Server(s.ID)
			if world.TagValue(now.Tags, world.TagManagedBy) != renamed {
				return false, fmt.Sprintf("server %s tags %v", s.ID, now.Tags)
			}
		}
		return true, ""
	})
	// Several garbage collection sweeps of the renamed controller, every
	// server past the grace period: nothing leaves, nothing is ordered.
	sweeps := `controller_runtime_reconcile_total{controller="scaleway-em.garbagecollection"`
	e.Eventually("five garbage collection sweeps after the rename", harness.WaitLong, func() (bool, string) {
		n, err := metricSum(e.Ctx, e.C, sweeps)
		return err == nil && n >= 5, fmt.Sprintf("%v sweeps (%v)", n, err)
	})
	now := map[string]bool{}
	for _, c := range e.NodeClaims() {
		now[c.Name] = c.DeletionTimestamp == nil
	}
	for name := range claims {
		if !now[name] {
			t.Errorf("nodeclaim %s deleted after the rename", name)
		}
	}
	if got := e.W.Sim.Servers(); len(got) != 2 {
		t.Errorf("%d servers after the rename, want the same 2", len(got))
	}
	for _, s := range e.W.Sim.Servers() {
		if s.Status == string(baremetal.ServerStatusDeleting) {
			t.Errorf("server %s released after the rename", s.ID)
		}
	}
	if n := strings.Count(e.C.LogTail(100000), "carried another cluster name (the cluster was renamed)"); n != 2 {
		t.Errorf("%d rename log lines, want 2 (one per server)", n)
	}
	e.WaitBound("app", 2, harness.WaitLong)
}
