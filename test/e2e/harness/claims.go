package harness

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/invariants"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// ClaimWatch polls the NodeClaims into a world.ClaimLog: when each was
// created, registered, began its deletion and was gone, for the invariants
// over the ledger.
type ClaimWatch struct {
	*world.ClaimLog
	stop context.CancelFunc
	done chan struct{}
}

// WatchClaims polls the NodeClaims every interval until the test ends.
func (e *Env) WatchClaims(interval time.Duration) *ClaimWatch {
	ctx, cancel := context.WithCancel(e.Ctx)
	cw := &ClaimWatch{ClaimLog: world.NewClaimLog(), stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(cw.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			var l karpv1.NodeClaimList
			var nodes corev1.NodeList
			if err := e.W.Kube.Client.List(ctx, &l); err == nil {
				if err := e.W.Kube.Client.List(ctx, &nodes); err == nil {
					cw.Saw(l.Items, nodes.Items, time.Now())
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	e.T.Cleanup(cw.Stop)
	return cw
}

// Stop ends the polling.
func (cw *ClaimWatch) Stop() {
	cw.stop()
	<-cw.done
}

// AssertNoServerTakenFromALiveClaim fails on every I2 violation in the
// ledger: a server deleted, retagged or rebooted while a live NodeClaim
// that was not being deleted owned it.
func (e *Env) AssertNoServerTakenFromALiveClaim(cw *ClaimWatch) {
	e.T.Helper()
	for _, v := range invariants.I2(e.W.Sim.Ledger(), invariants.Facts{Claims: cw.Claims()}) {
		e.T.Error(v)
	}
}
