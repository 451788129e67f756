// Package capacity feeds the catalog with what registered nodes really have:
// an offer's memory and disk after firmware and Talos are only estimated
// until a node of that offer reports its capacity, and later instance types
// of that offer use the measured figures.
package capacity

import (
	"context"
	"strings"
	"time"

	"github.com/awslabs/operatorpkg/reconciler"
	"github.com/awslabs/operatorpkg/singleton"
	corev1 "k8s.io/api/core/v1"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
)

// Observer is the catalog (catalog.Catalog.ObserveCapacity).
type Observer interface {
	ObserveCapacity(offerName, localDisks string, capacity corev1.ResourceList)
}

// Controller reads Ready nodes of this provider every Interval.
type Controller struct {
	Kube     client.Client
	Catalog  Observer
	Interval time.Duration
}

// Reconcile reports each offer's capacity from its Ready nodes.
func (c *Controller) Reconcile(ctx context.Context) (reconciler.Result, error) {
	nodes := &corev1.NodeList{}
	if err := c.Kube.List(ctx, nodes); err != nil {
		return reconciler.Result{}, err
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		offer := n.Labels[corev1.LabelInstanceTypeStable]
		if offer == "" || !strings.HasPrefix(n.Spec.ProviderID, scaleway.ProviderIDScheme) || !ready(n) {
			continue
		}
		c.Catalog.ObserveCapacity(offer, n.Labels[localdisks.LabelPolicy], n.Status.Capacity)
	}
	interval := c.Interval
	if interval == 0 {
		interval = 5 * time.Minute
	}
	return reconciler.Result{RequeueAfter: interval}, nil
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Register adds the singleton to the manager.
func (c *Controller) Register(_ context.Context, m manager.Manager) error {
	return controllerruntime.NewControllerManagedBy(m).
		Named("scaleway-em.capacity").
		WatchesRawSource(singleton.Source()).
		Complete(singleton.AsReconciler(c))
}
