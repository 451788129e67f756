package chart

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// TestLayoutHostedControllerRunsOnTenantRBAC runs the real controller
// (bin/karpenter-scaleway-em) as layout (c) has it: against the tenant (the
// simulated world's API server) through a kubeconfig made of the token of the
// ServiceAccount that the tenant-side rendering (tenant.rbacOnly) creates,
// at the path and with the variables of the management-side Deployment. With
// only that RBAC it wins its Lease in the tenant, makes its NodeClass Ready and
// brings a pending pod's node up: nothing it needs is missing from the chart's
// tenant RBAC.
func TestLayoutHostedControllerRunsOnTenantRBAC(t *testing.T) {
	w := world.Start(t, world.Options{})
	ctx := t.Context()
	c := loadChart(t, controllerChart)
	values := minimalValues + strings.Replace(hostedValues, "namespace: "+tenantNS, "namespace: "+w.SystemNamespace, 1)

	tenantObjs, err := helmRenderNS(c, strings.Replace(values, "tenant:\n", "tenant:\n  rbacOnly: true\n", 1), w.SystemNamespace)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range tenantObjs {
		// The world has no kube-controller-manager to fill a token Secret.
		if o.GetKind() == "Secret" {
			continue
		}
		if err := apply(ctx, w.Kube.Client, o, false); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	mgmtObjs, err := helmRenderNS(c, values, mgmtNS)
	if err != nil {
		t.Fatal(err)
	}
	ctr := container(t, mgmtObjs)
	kubeconfigPath, _, _ := envVar(ctr, "KUBECONFIG")
	if kubeconfigPath == "" {
		t.Fatal("the management-side Deployment sets no KUBECONFIG")
	}

	// The kubeconfig of docs/install.md: the tenant's server, its CA and the
	// ServiceAccount's token (a TokenRequest stands in for the token Secret).
	sa := mustFind(t, tenantObjs, "ServiceAccount", releaseName)
	data, err := w.ServiceAccountKubeconfig(ctx, w.SystemNamespace, sa.GetName())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), kubeconfigPath)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o440); err != nil {
		t.Fatal(err)
	}

	// The Deployment's plain variables that say where the controller's state
	// is, then the kubeconfig as the pod mounts it (last wins over the
	// world's admin kubeconfig).
	env := []string{"KUBECONFIG=" + path}
	for _, name := range []string{"SYSTEM_NAMESPACE", "LEADER_ELECTION_NAMESPACE", "LEADER_ELECTION_NAME", "JOIN_SECRET_NAMESPACES", "RESCUE_SSH_KEY_SECRET"} {
		v, _, ok := envVar(ctr, name)
		if !ok || v == "" {
			t.Fatalf("the management-side Deployment sets no %s", name)
		}
		env = append(env, name+"="+v)
	}
	controller := world.StartController(t, w, world.ControllerOptions{LeaderElection: true, Env: env})
	if _, err := controller.WaitLeading(ctx, 2*time.Minute); err != nil {
		t.Fatalf("no Lease won in the tenant: %v\n%s", err, controller.LogTail(40))
	}

	if err := w.Apply(ctx, w.NodeClass("hosted"), w.NodePool("hosted", "hosted")); err != nil {
		t.Fatal(err)
	}
	pods := w.RunWorkloadOn("default", "hosted-app", 1, "3", "1Gi", map[string]string{"karpenter.sh/nodepool": "hosted"})
	defer pods.Stop()
	// A request the tenant's RBAC refuses shows as "forbidden" in the log:
	// stop there rather than wait for a node that cannot come.
	refused := func() {
		if lines := controller.LogLines("forbidden"); lines != "" {
			t.Fatalf("the controller was refused something by the tenant's RBAC:\n%s", lines)
		}
	}
	world.Eventually(ctx, t, "the pending pod bound to a node the controller brought up", 5*time.Minute, func() (bool, string) {
		refused()
		bound, _, err := pods.Bound(context.WithoutCancel(ctx))
		return err == nil && bound >= 1, controller.LogTail(5)
	})
	refused()
}
