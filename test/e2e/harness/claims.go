package harness

import (
	"context"
	"sync"
	"time"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/invariants"
)

// ClaimWatch records, for the invariants over the ledger, when each
// NodeClaim was created, registered, began its deletion and was gone. The
// first three come from the API server's own timestamps; Gone is when a
// poll first missed it (at most the poll interval late, which makes the
// claim live a little longer: the checks err on the strict side for I2
// only while its deletion had not begun, and that start is exact).
type ClaimWatch struct {
	mu     sync.Mutex
	claims map[string]invariants.Claim
	seen   map[string]time.Time // the last poll that listed each claim
	stop   context.CancelFunc
	done   chan struct{}
}

// WatchClaims polls the NodeClaims every interval until the test ends.
func (e *Env) WatchClaims(interval time.Duration) *ClaimWatch {
	ctx, cancel := context.WithCancel(e.Ctx)
	cw := &ClaimWatch{claims: map[string]invariants.Claim{}, seen: map[string]time.Time{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(cw.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			var l karpv1.NodeClaimList
			if err := e.W.Kube.Client.List(ctx, &l); err == nil {
				cw.saw(l.Items, time.Now())
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

func (cw *ClaimWatch) saw(items []karpv1.NodeClaim, now time.Time) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	present := map[string]bool{}
	for _, nc := range items {
		present[nc.Name] = true
		c := cw.claims[nc.Name]
		c.Name, c.Created = nc.Name, nc.CreationTimestamp.Time
		if r := nc.StatusConditions().Get(karpv1.ConditionTypeRegistered); r != nil && r.IsTrue() && c.Registered.IsZero() {
			c.Registered = r.LastTransitionTime.Time
		}
		if nc.DeletionTimestamp != nil && c.Deleting.IsZero() {
			c.Deleting = nc.DeletionTimestamp.Time
		}
		cw.claims[nc.Name] = c
		cw.seen[nc.Name] = now
	}
	for name, c := range cw.claims {
		if !present[name] && c.Gone.IsZero() {
			c.Gone = now
			// Deleted and gone between two polls: its deletion began after
			// the last poll that listed it without one. The earliest such
			// time is taken, so that nothing the deletion allowed in that
			// gap is blamed on a live claim (seen with polls slowed down by
			// a loaded machine: the keep's untag counted as taking the
			// server from a claim still live).
			if c.Deleting.IsZero() {
				c.Deleting = cw.seen[name]
			}
			cw.claims[name] = c
		}
	}
}

// Stop ends the polling.
func (cw *ClaimWatch) Stop() {
	cw.stop()
	<-cw.done
}

// Claims is what was seen so far, by name.
func (cw *ClaimWatch) Claims() map[string]invariants.Claim {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	out := make(map[string]invariants.Claim, len(cw.claims))
	for k, v := range cw.claims {
		out[k] = v
	}
	return out
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
