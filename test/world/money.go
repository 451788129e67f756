package world

import (
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

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
// server's own timestamps; Gone is when a listing first missed it (at most
// one listing late, which makes the claim live a little longer: the checks
// err on the strict side for I2 only while its deletion had not begun, and
// that start is exact).
type ClaimLog struct {
	mu     sync.Mutex
	claims map[string]invariants.Claim
	seen   map[string]time.Time // the last listing that held each claim
}

// NewClaimLog returns an empty log.
func NewClaimLog() *ClaimLog {
	return &ClaimLog{claims: map[string]invariants.Claim{}, seen: map[string]time.Time{}}
}

// Saw records a listing of every NodeClaim and Node made at now. A
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
	if w.Opts.Profile == "realistic" {
		grace, sweep = 10*time.Minute, 2*time.Minute // the controller's defaults (controller/operator/options)
	}
	ledger := w.Sim.Ledger()
	f := invariants.Facts{Cluster: w.ClusterName, Claims: claims, End: end, Grace: grace, Sweep: sweep}
	var vs []invariants.Violation
	for _, check := range []func([]scwsim.LedgerEntry, invariants.Facts) []invariants.Violation{invariants.I1, invariants.I2, invariants.I4} {
		vs = append(vs, check(ledger, f)...)
	}
	return vs
}
