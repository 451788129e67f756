package world

import (
	"context"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/operator/options"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/invariants"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// GC timings the controller runs with in the world's "test" and "fast"
// profiles (ControllerEnv); "realistic" keeps the controller's defaults.
const (
	GCGracePeriod = 30 * time.Second
	GCInterval    = 5 * time.Second
)

// ClaimLog records, for the money invariants over the ledger, when each
// NodeClaim was created, registered, began its deletion and was gone, from
// successive listings of the NodeClaims. The first three come from the API
// server's own timestamps; Gone is the start of the first listing that
// missed it. A listing is stamped with the time its request began, not when
// it returned: on a loaded API server a listing takes seconds, and what it
// shows may be as old as its start (stamped at its return, a claim whose
// deletion began, and whose server went, while the listing was on its way
// counted as live and not deleting: a false I2).
type ClaimLog struct {
	mu     sync.Mutex
	claims map[string]invariants.Claim
	seen   map[string]time.Time // the last listing that held each claim
	looks  int                  // listings made by Look
	slow   time.Duration        // the longest of them
}

// NewClaimLog returns an empty log.
func NewClaimLog() *ClaimLog {
	return &ClaimLog{claims: map[string]invariants.Claim{}, seen: map[string]time.Time{}}
}

// Look lists every NodeClaim and Node through c, records the listing (Saw)
// stamped with the time it began, and returns it.
func (l *ClaimLog) Look(ctx context.Context, c client.Reader) ([]karpv1.NodeClaim, []corev1.Node, error) {
	began := time.Now()
	var claims karpv1.NodeClaimList
	if err := c.List(ctx, &claims); err != nil {
		return nil, nil, err
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, nil, err
	}
	l.Saw(claims.Items, nodes.Items, began)
	l.mu.Lock()
	l.looks++
	l.slow = max(l.slow, time.Since(began))
	l.mu.Unlock()
	return claims.Items, nodes.Items, nil
}

// Listings is how many listings Look made and how long the slowest took:
// how far behind the API server fell, for the report of a money check.
func (l *ClaimLog) Listings() (int, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.looks, l.slow
}

// Saw records a listing of every NodeClaim and Node that began at now. A
// NodeClaim counts as registered only once its Node is there too (the Node
// it names, with its providerID): a NodeClaim's Registered condition alone
// can be written by anyone (Karpenter's regression suite marks a NodeClaim
// registered with a made-up providerID while the provider still installs
// the server it ordered for it), and the invariants ask whether a node
// served from the server.
func (l *ClaimLog) Saw(items []karpv1.NodeClaim, nodes []corev1.Node, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	providerIDs := make(map[string]string, len(nodes))
	for _, n := range nodes {
		providerIDs[n.Name] = n.Spec.ProviderID
	}
	present := map[string]bool{}
	for _, nc := range items {
		present[nc.Name] = true
		c := l.claims[nc.Name]
		c.Name, c.Created = nc.Name, nc.CreationTimestamp.Time
		if c.Registered.IsZero() {
			c.Registered = registered(nc, providerIDs)
		}
		if nc.DeletionTimestamp != nil && c.Deleting.IsZero() {
			c.Deleting = nc.DeletionTimestamp.Time
		}
		l.claims[nc.Name] = c
		l.seen[nc.Name] = now
	}
	for name, c := range l.claims {
		if !present[name] && c.Gone.IsZero() {
			c.Gone = now
			// Deleted and gone between two listings: its deletion began
			// after the last listing that held it without one. The earliest
			// such time is taken, so that nothing the deletion allowed in
			// that gap is blamed on a live claim (seen with polls slowed down
			// by a loaded machine: the keep's untag counted as taking the
			// server from a claim still live).
			if c.Deleting.IsZero() {
				c.Deleting = l.seen[name]
			}
			l.claims[name] = c
		}
	}
}

// registered is when the NodeClaim's Registered condition turned true, if
// the Node it names is listed with its providerID; zero otherwise.
func registered(nc karpv1.NodeClaim, providerIDs map[string]string) time.Time {
	r := nc.StatusConditions().Get(karpv1.ConditionTypeRegistered)
	node, ok := providerIDs[nc.Status.NodeName]
	if r == nil || !r.IsTrue() || !ok || node == "" || node != nc.Status.ProviderID {
		return time.Time{}
	}
	return r.LastTransitionTime.Time
}

// Claims is what was seen so far, by name.
func (l *ClaimLog) Claims() map[string]invariants.Claim {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.claims)
}

// CheckMoney checks the money invariants that need no more than the
// simulated Scaleway's ledger and the NodeClaims' lives (test/invariants):
// no NodeClaim got two servers (I1), no server was taken from a live
// NodeClaim (I2), and none was billed without an owner for longer than the
// controller's GC grace period and one sweep (I4), judged up to end.
func (w *World) CheckMoney(claims map[string]invariants.Claim, end time.Time) []invariants.Violation {
	grace, sweep := GCGracePeriod, GCInterval
	if w.Opts.Profile == "realistic" { // the controller runs with its defaults
		grace, sweep = options.DefaultGCGracePeriod, options.DefaultGCInterval
	}
	ledger := w.Sim.Ledger()
	f := invariants.Facts{Cluster: w.ClusterName, Claims: claims, End: end, Grace: grace, Sweep: sweep}
	var vs []invariants.Violation
	for _, check := range []func([]scwsim.LedgerEntry, invariants.Facts) []invariants.Violation{invariants.I1, invariants.I2, invariants.I4} {
		vs = append(vs, check(ledger, f)...)
	}
	return vs
}
