package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/e2e/harness"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// editNodeClass applies change to the stored NodeClass "default".
func editNodeClass(e *harness.Env, change func(*v1alpha1.ScalewayElasticMetalNodeClass)) {
	e.T.Helper()
	nc := e.W.NodeClass("default")
	if err := e.W.Kube.Client.Get(e.Ctx, types.NamespacedName{Name: "default"}, nc); err != nil {
		e.T.Fatal(err)
	}
	change(nc)
	if err := e.W.Kube.Client.Update(e.Ctx, nc); err != nil {
		e.T.Fatal(err)
	}
}

// events lists the reasons and messages of the events on objects of kind.
func events(e *harness.Env, kind string) []string {
	l, err := e.W.Clientset.CoreV1().Events("").List(e.Ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=" + kind})
	if err != nil {
		e.T.Fatal(err)
	}
	var out []string
	for _, ev := range l.Items {
		out = append(out, ev.Reason+": "+ev.Message)
	}
	return out
}

func orders(e *harness.Env) int {
	n, err := e.W.Sim.CountCalls("POST", `/servers$`)
	if err != nil {
		e.T.Fatal(err)
	}
	return n
}

// A NodeClass whose installs always fail (spec.rescue.disk names a disk no
// server has) buys the breaker's allowance (2 servers) and no more: it turns
// InstallsHealthy=False naming the failing phase and code, with an event;
// fixing the spec resets the breaker and the pod gets its node at once.
// About 2 minutes.
func TestFailingInstallsStopOrdersUntilTheSpecIsFixed(t *testing.T) {
	e := harness.Start(t, harness.Setup{NoNodePool: true,
		Controller: world.ControllerOptions{Env: []string{"INSTALL_BREAKER_THRESHOLD=2", "INSTALL_BREAKER_BACKOFF=1h"}}})
	editNodeClass(e, func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
		nc.Spec.Rescue.Disk = "/dev/disk/by-id/nvme-not-on-this-hardware"
	})
	if err := e.W.Apply(e.Ctx, e.W.NodePool("default", "default")); err != nil {
		t.Fatal(err)
	}
	e.Run("broken", 1, "1", "1Gi", false)

	var healthy string
	e.Eventually("InstallsHealthy=False on the NodeClass", harness.WaitLong, func() (bool, string) {
		nc := e.W.NodeClass("default")
		if err := e.W.Kube.Client.Get(e.Ctx, types.NamespacedName{Name: "default"}, nc); err != nil {
			return false, err.Error()
		}
		c := nc.StatusConditions().Get(v1alpha1.ConditionTypeInstallsHealthy)
		if c == nil {
			return false, "no InstallsHealthy condition"
		}
		healthy = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
		return c.IsFalse() && !nc.StatusConditions().Root().IsTrue(), healthy + "; " + e.Summary()
	})
	t.Logf("InstallsHealthy %s", healthy)
	for _, want := range []string{"InstallsFailing", "phase imaging", "code disk_not_found", "no server is ordered before"} {
		if !strings.Contains(healthy, want) {
			t.Errorf("InstallsHealthy %q does not say %q", healthy, want)
		}
	}
	// Karpenter keeps trying (a new NodeClaim per failure, the NodePool
	// not Ready): no order gets through.
	time.Sleep(20 * time.Second)
	if n := orders(e); n != 2 {
		t.Errorf("%d orders for a NodeClass whose installs always fail, want the breaker's allowance of 2", n)
	}
	opened := false
	for _, ev := range events(e, "ScalewayElasticMetalNodeClass") {
		opened = opened || strings.HasPrefix(ev, "InstallBreakerOpened: ") && strings.Contains(ev, "disk_not_found")
	}
	if !opened {
		t.Errorf("no InstallBreakerOpened event naming disk_not_found on the NodeClass: %v", events(e, "ScalewayElasticMetalNodeClass"))
	}

	editNodeClass(e, func(nc *v1alpha1.ScalewayElasticMetalNodeClass) { nc.Spec.Rescue.Disk = "auto" })
	e.WaitBound("broken", 1, harness.WaitLong)
	if n := orders(e); n != 3 {
		t.Errorf("%d orders in all, want 2 failed and 1 after the fix", n)
	}
	e.AssertNoDuplicateOrders()
	e.AssertNothingLeaked()
}

// Monthly commitment limited to 0 and hourly spend to one EM-B111X-SATA
// (0.263 EUR/h): the cheapest offering Karpenter would take (EM-A115X-SSD,
// monthly) is refused and Create falls back to the hourly offering within
// the limits; the second node would cross the hourly limit, so it is not
// ordered and SpendLimitReached says why. About 1.5 minutes.
func TestSpendLimitsFallBackThenStopOrders(t *testing.T) {
	e := harness.Start(t, harness.Setup{NoNodePool: true})
	editNodeClass(e, func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
		nc.Spec.Billing.Periods = []string{"hourly", "monthly"}
		nc.Spec.Limits = &v1alpha1.LimitsSpec{HourlySpend: "0.3", MonthlyCommitment: "0"}
	})
	if err := e.W.Apply(e.Ctx, e.W.NodePool("default", "default",
		corev1.NodeSelectorRequirement{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"EM-A115X-SSD", "EM-B111X-SATA"}},
		corev1.NodeSelectorRequirement{Key: catalog.LabelBillingPeriod, Operator: corev1.NodeSelectorOpIn, Values: []string{"hourly", "monthly"}},
	)); err != nil {
		t.Fatal(err)
	}
	e.Run("capped", 2, "1", "1Gi", true)
	e.WaitBound("capped", 1, harness.WaitLong)
	e.Eventually("SpendLimitReached for both limits", harness.WaitLong, func() (bool, string) {
		var hourly, monthly bool
		evs := events(e, "NodeClaim")
		for _, ev := range evs {
			if strings.HasPrefix(ev, "SpendLimitReached: ") {
				hourly = hourly || strings.Contains(ev, "hourly_spend")
				monthly = monthly || strings.Contains(ev, "monthly_commitment")
			}
		}
		return hourly && monthly, fmt.Sprintf("events %v; %s", evs, e.Summary())
	})
	time.Sleep(15 * time.Second)
	servers := e.W.Sim.Servers()
	if len(servers) != 1 || servers[0].OfferName != "EM-B111X-SATA" {
		t.Errorf("servers %s, want one EM-B111X-SATA (the monthly offer over the commitment limit, a second server over the hourly one)", e.DescribeServers())
	}
	if n := orders(e); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
	bound := 0
	for _, p := range e.Pods("capped") {
		if p.Spec.NodeName != "" {
			bound++
		}
	}
	if bound != 1 {
		t.Errorf("%d pods bound, want 1 (the second node is over the limit)", bound)
	}
	text, err := e.C.Metrics(e.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`karpenter_scaleway_em_spend_limit_eur{limit="hourly_spend",nodeclass="default"} 0.3`,
		`karpenter_scaleway_em_spend_limit_eur{limit="monthly_commitment",nodeclass="default"} 0`} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	e.AssertNoDuplicateOrders()
}
