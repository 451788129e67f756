package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// watcher remembers what was already said, so that each NodeClaim, node
// Ready and the first Ready pod are told once, and the counts only when they
// change.
type watcher struct {
	w        *world.World
	log      *world.ClaimLog
	printf   func(string, ...any)
	claims   map[string]bool
	ready    map[string]bool
	podReady bool
	counts   string
}

// watch prints what happens to NodeClaims, nodes and pods until ctx ends:
// a look every half second (a world for exploring, not a benchmark). Every
// listing of the NodeClaims goes into log, for the money check at the end.
func watch(ctx context.Context, w *world.World, log *world.ClaimLog, printf func(string, ...any)) {
	wa := &watcher{w: w, log: log, printf: printf, claims: map[string]bool{}, ready: map[string]bool{}}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := wa.look(ctx); err != nil && ctx.Err() == nil {
			printf("watch: %v", err)
		}
	}
}

func (wa *watcher) look(ctx context.Context) error {
	claims, nodes, err := wa.log.Look(ctx, wa.w.Kube.Client)
	if err != nil {
		return err
	}
	var pods corev1.PodList
	if err := wa.w.Kube.Client.List(ctx, &pods); err != nil {
		return err
	}
	readyNodes := wa.nodes(claims, nodes)
	readyPods, pending := wa.pods(pods.Items)
	counts := fmt.Sprintf("nodeclaims %d, nodes %d (%d Ready), pods %d (%d Ready, %d Pending)",
		len(claims), len(nodes), readyNodes, len(pods.Items), readyPods, pending)
	if counts != wa.counts {
		wa.counts = counts
		wa.printf("%s", counts)
	}
	return nil
}

// nodes tells new NodeClaims and nodes newly Ready, and counts Ready nodes.
func (wa *watcher) nodes(claims []karpv1.NodeClaim, nodes []corev1.Node) int {
	created := map[string]time.Time{} // node name -> its NodeClaim's creation
	for _, nc := range claims {
		if !wa.claims[nc.Name] {
			wa.claims[nc.Name] = true
			wa.printf("nodeclaim %s created (nodepool %s)", nc.Name, nc.Labels[karpv1.NodePoolLabelKey])
		}
		if nc.Status.NodeName != "" {
			created[nc.Status.NodeName] = nc.CreationTimestamp.Time
		}
	}
	ready := 0
	for _, n := range nodes {
		if !nodeReady(&n) {
			continue
		}
		ready++
		if wa.ready[n.Name] {
			continue
		}
		wa.ready[n.Name] = true
		since := ""
		if t, ok := created[n.Name]; ok {
			since = fmt.Sprintf(", %s after its NodeClaim was created", time.Since(t).Round(100*time.Millisecond))
		}
		wa.printf("node %s Ready (%s%s)", n.Name, n.Spec.ProviderID, since)
	}
	return ready
}

// pods tells the first Ready pod, and counts Ready and Pending pods.
func (wa *watcher) pods(pods []corev1.Pod) (ready, pending int) {
	for _, p := range pods {
		switch {
		case testenv.PodReady(&p):
			ready++
			if !wa.podReady {
				wa.podReady = true
				wa.printf("first pod Ready: %s/%s on node %s, %s after it was created", p.Namespace, p.Name, p.Spec.NodeName,
					time.Since(p.CreationTimestamp.Time).Round(100*time.Millisecond))
			}
		case p.Status.Phase == corev1.PodPending:
			pending++
		}
	}
	return ready, pending
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
