package nodeclass_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/breaker"
)

// An open install-failure breaker in the status (as a controller before a
// restart left it) makes InstallsHealthy, and so Ready, False; the status
// check comes back when the backoff ends, and then lets the probe through
// (InstallsHealthy True, ProbeAllowed).
func TestOpenBreakerMakesTheNodeClassNotReadyUntilTheBackoffEnds(t *testing.T) {
	e := start(t)
	e.c.Installs = &breaker.Store{Kube: e.kube.Client, Secrets: e.kube.Client}
	nc := e.nodeClass(t, "tripped")
	sec := &corev1.Secret{}
	if err := e.kube.Client.Get(e.ctx, types.NamespacedName{Namespace: "karpenter", Name: "cluster-join"}, sec); err != nil {
		t.Fatal(err)
	}
	stored := nc.DeepCopy()
	next := metav1.NewTime(time.Now().Add(5 * time.Second).Truncate(time.Second))
	nc.Status.Installs = &v1alpha1.InstallsStatus{ConsecutiveFailures: 2, Opened: 1, NextAttempt: &next,
		Generation: nc.Generation, JoinSecretResourceVersion: sec.ResourceVersion,
		LastFailure: &v1alpha1.InstallFailure{Phase: "imaging", Code: "disk_not_found", NodeClaim: "x", Offering: "fr-par-2/EM-A116X-SSD/hourly"}}
	if err := e.kube.Client.Status().Patch(e.ctx, nc, client.MergeFrom(stored)); err != nil {
		t.Fatal(err)
	}

	res, err := e.c.Reconcile(e.ctx, get(t, e, "tripped"))
	if err != nil {
		t.Fatal(err)
	}
	nc = get(t, e, "tripped")
	c := nc.StatusConditions().Get(v1alpha1.ConditionTypeInstallsHealthy)
	if c == nil || !c.IsFalse() || c.Reason != breaker.ReasonInstallsFailing || !strings.Contains(c.Message, "disk_not_found") {
		t.Fatalf("InstallsHealthy = %+v, want False %s naming the code", c, breaker.ReasonInstallsFailing)
	}
	if nc.StatusConditions().Root().IsTrue() {
		t.Error("Ready while the breaker is open")
	}
	if res.RequeueAfter > 6*time.Second {
		t.Errorf("requeued after %s: the condition must be checked again when the backoff ends (5s)", res.RequeueAfter)
	}

	time.Sleep(time.Until(next.Time) + time.Second)
	nc = e.reconcile(t, "tripped")
	if c := nc.StatusConditions().Get(v1alpha1.ConditionTypeInstallsHealthy); c == nil || !c.IsTrue() || c.Reason != breaker.ReasonProbeAllowed {
		t.Errorf("after the backoff InstallsHealthy = %+v, want True %s", c, breaker.ReasonProbeAllowed)
	}
	if !nc.StatusConditions().Root().IsTrue() {
		t.Errorf("not Ready after the backoff: %+v", nc.Status.Conditions)
	}
}

func get(t *testing.T, e *env, name string) *v1alpha1.ScalewayElasticMetalNodeClass {
	t.Helper()
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	if err := e.kube.Client.Get(e.ctx, types.NamespacedName{Name: name}, nc); err != nil {
		t.Fatal(err)
	}
	return nc
}
