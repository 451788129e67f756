package harness

import (
	"context"
	"time"

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
			_, _, _ = cw.Look(ctx, e.W.Kube.Client) // a listing that fails is the next one's to make
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
