package soak

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/invariants"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// The NodeClasses and NodePools of a soak world.
const (
	MainNodeClass   = "main"
	BrokenNodeClass = "broken"
	namespace       = "default"
)

// What the controller runs with in the world (world.ControllerEnv, "fast"
// profile) and what the invariants are judged with.
const (
	gcGrace    = 30 * time.Second // GC_GRACE_PERIOD
	gcInterval = 5 * time.Second  // GC_INTERVAL
	// breakerThreshold is INSTALL_BREAKER_THRESHOLD's default. The default
	// backoff (30 minutes) is longer than a run, so no probe comes; the
	// breaker counts failures, not orders, so while fewer than the threshold
	// have failed every pending pod may have an install in flight: with B
	// pods, threshold + B - 1 orders (docs/money-safety.md, "Counting").
	breakerThreshold = 2
	// limitLag: an order this soon after a limit changed may have been
	// decided under the old limit (the controller reads the NodeClass from
	// its cache); it is judged against the more lenient of the two.
	limitLag = 5 * time.Second
	// SettleTimeout bounds the wait, after the schedule, for a quiet world:
	// every pod bound, every live server accounted for. It covers the
	// provider's out-of-stock mark (an order refused out of stock hides the
	// offering that long, as Karpenter's own unavailable-offerings cache
	// does), then the collector's grace and a few sweeps. Seed 100 ended a
	// stockout as the settle began, with every other offering over quota:
	// its pods could bind only after the mark, which outlasted a 150 s settle.
	SettleTimeout = catalog.DefaultOutOfStockTTL + 90*time.Second
)

// Options tune a run.
type Options struct {
	// Dir keeps the logs of a schedule that broke in Dir/seed-<n> (empty: a
	// temporary directory, removed).
	Dir string
	// Logf receives progress lines (nil: none).
	Logf func(format string, args ...any)
}

// Result is what one schedule did and broke.
type Result struct {
	Seed       uint64
	Schedule   Schedule
	Violations []invariants.Violation
	// Orders the ledger holds, NodeClaims seen.
	Orders, Claims int
	Duration       time.Duration
	// Err: the run itself failed (a world that did not start...): no verdict.
	Err error
	// Teardown: the world's stop went wrong after the verdict (a component
	// that had to be killed under load). Printed, but the verdict stands.
	Teardown error
	// Dir holds the logs when Options.Dir was set.
	Dir string
}

// Run plays the schedule of seed against a new world and the real
// controller, lets the world settle and checks the invariants.
func Run(ctx context.Context, seed uint64, opts Options) Result {
	start := time.Now()
	s := Generate(seed)
	res := Result{Seed: seed, Schedule: s}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	dir := opts.Dir
	if dir != "" {
		dir = filepath.Join(dir, fmt.Sprintf("seed-%d", seed))
		_ = os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			res.Err = err
			return res
		}
		res.Dir = dir
	}
	r := &runner{s: s, logf: logf, claims: map[string]*invariants.Claim{}, ready: map[string]bool{}}
	res.Violations, res.Err = r.run(ctx, dir)
	res.Teardown = r.teardown
	res.Orders, res.Claims = r.orders, len(r.claims)
	res.Duration = time.Since(start)
	if dir != "" && res.Err == nil && len(res.Violations) == 0 {
		// Disks and images take hundreds of MiB a schedule: only the logs
		// of a schedule that broke are worth keeping.
		_ = os.RemoveAll(dir)
		res.Dir = ""
	}
	return res
}

type runner struct {
	s    Schedule
	logf func(string, ...any)
	w    *world.World
	apps map[string]*world.Workload

	// opMu serializes what is done to the replicas (kill, pause, resume,
	// restart): the schedule's steps and the background restarts of leader
	// changes both act on them.
	opMu     sync.Mutex
	replicas []*replica
	// bgCtx and bg: the goroutines a step leaves behind (waiting for a
	// takeover, restarting an old leader once the other one leads).
	bgCtx context.Context
	bg    sync.WaitGroup
	// settling: the schedule is over; a leader change still waiting for
	// a leader changes nothing any more.
	settling atomic.Bool

	mu     sync.Mutex
	claims map[string]*invariants.Claim
	ready  map[string]bool
	// limits and lifetimes: the main NodeClass's spec over time.
	limits    []limitsAt
	lifetimes []lifetimeAt
	// outage: the longest stretch the controller was down or starting.
	outage time.Duration
	orders int
	// teardown: the world's stop failed after a verdict.
	teardown error
}

type limitsAt struct {
	at  time.Time
	lim invariants.Limits
}

type lifetimeAt struct {
	at       time.Time
	lifetime string
}

func (r *runner) run(ctx context.Context, dir string) (vs []invariants.Violation, err error) {
	s := r.s
	w, err := world.New(ctx, world.Options{Profile: scwsim.ProfileFast, Dir: dir, ClusterName: "soak",
		Sim: func(o *scwsim.Options) {
			o.ListLag, o.StaleLag, o.StaleReadsByID, o.Seed = s.ListLag, s.StaleLag, s.StaleReadsByID, s.Seed
		}})
	if err != nil {
		return nil, fmt.Errorf("world: %w", err)
	}
	r.w = w
	defer func() {
		if r.teardown = w.Stop(); err != nil {
			err, r.teardown = errors.Join(err, r.teardown), nil
		}
	}()
	defer r.stopReplicas()
	if err := r.startReplicas(ctx); err != nil {
		return nil, err
	}
	if err := r.setup(ctx); err != nil {
		return nil, err
	}

	pollCtx, stopPoll := context.WithCancel(ctx)
	polled, watched := make(chan struct{}), make(chan struct{})
	go func() { defer close(polled); r.pollClaims(pollCtx) }()
	go func() { defer close(watched); r.watchDeletions(pollCtx) }()
	r.bgCtx = pollCtx
	defer func() { stopPoll(); <-polled; <-watched; r.bg.Wait() }()

	r.logf("seed %d: playing %d actions", s.Seed, len(s.Actions))
	if err := r.play(ctx); err != nil {
		return nil, err
	}
	r.logf("seed %d: settling", s.Seed)
	if err := r.settle(ctx); err != nil {
		return nil, err
	}
	end := time.Now()
	stopPoll()
	<-polled
	return r.check(ctx, end)
}

// setup applies the NodeClasses and NodePools and starts the workloads.
func (r *runner) setup(ctx context.Context) error {
	w, s := r.w, r.s
	nc := w.NodeClass(MainNodeClass)
	nc.Spec.Billing.Periods = s.Periods
	// Two pods a node: a wave of pods is a wave of orders, whatever the
	// offer's size (Karpenter would otherwise put a wave on one large server).
	nc.Spec.Kubelet = &v1alpha1.KubeletConfiguration{MaxPods: ptr(int32(maxPodsPerNode))}
	objs := []client.Object{nc, w.NodePool(MainNodeClass, MainNodeClass,
		corev1.NodeSelectorRequirement{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: Offers},
		corev1.NodeSelectorRequirement{Key: catalog.LabelBillingPeriod, Operator: corev1.NodeSelectorOpIn, Values: s.Periods})}
	if s.BrokenNodeClass {
		b := w.NodeClass(BrokenNodeClass)
		b.Spec.Rescue.Disk = "/dev/disk/by-id/nvme-not-on-this-hardware"
		objs = append(objs, b, w.NodePool(BrokenNodeClass, BrokenNodeClass,
			corev1.NodeSelectorRequirement{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"EM-A116X-SSD"}},
			corev1.NodeSelectorRequirement{Key: catalog.LabelBillingPeriod, Operator: corev1.NodeSelectorOpIn, Values: []string{"hourly"}}))
	}
	for _, o := range objs {
		if err := w.Apply(ctx, o); err != nil {
			return err
		}
	}
	now := time.Now()
	r.limits = []limitsAt{{at: now}}
	r.lifetimes = []lifetimeAt{{at: now}}
	r.apps = map[string]*world.Workload{}
	for _, app := range []string{App, Broken} {
		r.apps[app] = w.RunWorkloadOn(namespace, app, 0, "1", "1Gi", map[string]string{karpv1.NodePoolLabelKey: poolOf(app)})
	}
	return nil
}

// maxPodsPerNode is the main NodeClass's kubelet maxPods.
const maxPodsPerNode = 2

func ptr[T any](v T) *T { return &v }

func poolOf(app string) string {
	if app == Broken {
		return BrokenNodeClass
	}
	return MainNodeClass
}

// step is one thing to do at a time: an action's start or its end.
type step struct {
	at time.Duration
	do func(ctx context.Context) error
}

// play runs the schedule's steps in time order.
func (r *runner) play(ctx context.Context) error {
	var steps []step
	for _, a := range r.s.Actions {
		steps = append(steps, r.steps(a)...)
	}
	slices.SortStableFunc(steps, func(a, b step) int { return int(a.at - b.at) })
	t0 := time.Now()
	for _, st := range steps {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(t0.Add(st.at))):
		}
		if err := st.do(ctx); err != nil {
			return err
		}
	}
	return nil
}

// steps turns an action into what the runner does, and when.
func (r *runner) steps(a Action) []step {
	w := r.w
	one := func(do func(ctx context.Context) error) []step { return []step{{at: a.At, do: do}} }
	switch a.Kind {
	case KindPods:
		return one(func(ctx context.Context) error {
			if a.App == Broken && !r.s.BrokenNodeClass {
				return nil
			}
			return r.apps[a.App].Scale(ctx, a.Pods)
		})
	case KindLimits:
		return one(func(ctx context.Context) error { return r.setLimits(ctx, a.Hourly, a.Monthly) })
	case KindMinimumLifetime:
		return one(func(ctx context.Context) error { return r.setMinimumLifetime(ctx, a.MinimumLifetime) })
	case KindWarmPool:
		return one(func(ctx context.Context) error { return r.setWarmPool(ctx, a) })
	case KindFault:
		var id scwsim.FaultID
		return []step{{at: a.At, do: func(context.Context) (err error) {
			id, err = w.Sim.Inject(a.Fault)
			return err
		}}, {at: a.At + a.For, do: func(context.Context) error { w.Sim.RemoveFault(id); return nil }}}
	case KindOutOfStock:
		var had int
		return []step{{at: a.At, do: func(context.Context) error {
			had = w.Sim.Stock(Zone, a.Offer)
			return w.Sim.SetStock(Zone, a.Offer, 0)
		}}, {at: a.At + a.For, do: func(context.Context) error { return w.Sim.SetStock(Zone, a.Offer, max(had, 100)) }}}
	case KindQuota:
		return []step{{at: a.At, do: func(context.Context) error {
			return w.Sim.SetQuota("", a.Offer, r.serversOf(a.Offer))
		}}, {at: a.At + a.For, do: func(context.Context) error { return w.Sim.SetQuota("", a.Offer, -1) }}}
	case KindKill:
		return r.killSteps(a)
	case KindLeaderChange:
		return r.leaderChange(a)
	}
	return one(func(context.Context) error { return fmt.Errorf("soak: the world cannot play a %s action yet", a.Kind) })
}

// setMinimumLifetime sets the main NodeClass's billing.minimumLifetime
// (none when empty) and notes when, for the invariants.
func (r *runner) setMinimumLifetime(ctx context.Context, lifetime string) error {
	err := r.editMain(ctx, func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
		nc.Spec.Billing.MinimumLifetime = nil
		if lifetime != "" {
			d, _ := time.ParseDuration(lifetime)
			nc.Spec.Billing.MinimumLifetime = &metav1.Duration{Duration: d}
		}
	})
	r.mu.Lock()
	r.lifetimes = append(r.lifetimes, lifetimeAt{at: time.Now(), lifetime: lifetime})
	r.mu.Unlock()
	return err
}

// setWarmPool sets the main NodeClass's warm pool to the action's one
// entry, or none when it asks for no servers.
func (r *runner) setWarmPool(ctx context.Context, a Action) error {
	return r.editMain(ctx, func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
		nc.Spec.WarmPool = nil
		if a.Servers > 0 {
			nc.Spec.WarmPool = []v1alpha1.WarmPoolEntry{{Offer: a.Offer, Zone: Zone, BillingPeriod: a.Period, Servers: int32(a.Servers)}}
		}
	})
}

// serversOf counts the simulator's servers of an offer: a quota at that
// count lets none more be ordered.
func (r *runner) serversOf(offer string) int {
	n := 0
	for _, sv := range r.w.Sim.Servers() {
		if sv.OfferName == offer {
			n++
		}
	}
	return n
}

// killSteps kill the leader (or, during a takeover, the replica about to
// lead) at the action's time and restart it For later.
func (r *runner) killSteps(a Action) []step {
	i := -1
	return []step{{at: a.At, do: func(context.Context) error {
		if i = r.leader(); i < 0 {
			// A takeover under way: the replica about to lead dies.
			if i = r.standby(); i < 0 {
				return nil
			}
		}
		return r.kill(i)
	}}, {at: a.At + a.For, do: func(ctx context.Context) error {
		if i < 0 {
			return nil
		}
		return r.restart(ctx, i)
	}}}
}

// replica is one controller process of the two the soak runs.
type replica struct {
	c      *world.Controller
	paused bool
	// kills counts the schedule's SIGKILLs of this replica: a kill that
	// lands while a restart waits for the process to become healthy is the
	// schedule's doing, not a failed run.
	kills int
	// The acquisition of the Lease by start #leadStart (Leading reads the
	// log; a found one is kept, so the log is read again only while the
	// replica waits to lead).
	leadStart int
	leadAt    time.Time
}

// startReplicas starts the two replicas with leader election, each behind
// its own recording proxy (HoldAnswers), and waits until one leads and
// the other is healthy.
func (r *runner) startReplicas(ctx context.Context) error {
	for i := 1; i <= Replicas; i++ {
		// An order whose answer was lost is looked for this long before
		// the NodeClaim orders again: scaled to the fast profile as the
		// world scales the collector's grace, and over three times the
		// longest listing lag, so that a lost order shows before it ends
		// (I1 would catch one that did not).
		c, err := r.w.NewController(world.ControllerOptions{LeaderElection: true, RecordAPICalls: true,
			LogName: fmt.Sprintf("replica-%d.log", i), Env: []string{"KARPENTER_SCALEWAY_EM_ORDER_SETTLE=30s"}})
		if err != nil {
			return err
		}
		r.replicas = append(r.replicas, &replica{c: c})
		hctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		if i == 1 {
			_, err = c.WaitLeading(hctx, 2*time.Minute)
		} else {
			err = c.WaitHealthy(hctx)
		}
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// stopReplicas ends every replica (a frozen one with SIGKILL: SIGTERM
// would wait for it to wake up).
func (r *runner) stopReplicas() {
	r.opMu.Lock()
	defer r.opMu.Unlock()
	for _, rp := range r.replicas {
		if rp.paused {
			_ = rp.c.Kill()
			continue
		}
		_ = rp.c.Stop()
	}
}

// leader is the index of the replica that leads, -1 if none does: of the
// running replicas not frozen, the one that acquired the Lease last (a
// frozen one still believes it leads; the Lease is the other's once it
// expired).
func (r *runner) leader() int {
	r.opMu.Lock()
	defer r.opMu.Unlock()
	best, at := -1, time.Time{}
	for i, rp := range r.replicas {
		if rp.paused || !rp.c.Running() {
			continue
		}
		if start := rp.c.Starts(); rp.leadStart != start || rp.leadAt.IsZero() {
			if t, ok := rp.c.Leading(); ok {
				rp.leadStart, rp.leadAt = start, t
			} else {
				continue
			}
		}
		if best < 0 || rp.leadAt.After(at) {
			best, at = i, rp.leadAt
		}
	}
	return best
}

// standby is the index of a running replica that is not frozen, -1 if
// none is.
func (r *runner) standby() int {
	r.opMu.Lock()
	defer r.opMu.Unlock()
	for i, rp := range r.replicas {
		if !rp.paused && rp.c.Running() {
			return i
		}
	}
	return -1
}

// kill ends replica i with SIGKILL (its Lease is not released) and
// watches for the takeover.
func (r *runner) kill(i int) error {
	r.opMu.Lock()
	rp := r.replicas[i]
	if !rp.c.Running() {
		r.opMu.Unlock()
		return nil
	}
	down := time.Now()
	err := rp.c.Kill()
	rp.paused = false
	rp.kills++
	r.opMu.Unlock()
	r.watchTakeover(down)
	return err
}

// watchTakeover records, in the background, how long the world goes
// without a leader from down: the longest such outage stretches the sweep
// I4 allows.
func (r *runner) watchTakeover(down time.Time) {
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		for r.bgCtx.Err() == nil {
			if r.leader() >= 0 {
				r.mu.Lock()
				r.outage = max(r.outage, time.Since(down))
				r.mu.Unlock()
				return
			}
			select {
			case <-r.bgCtx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
}

// restart starts replica i again if it is not running (a new pod after a
// kill) and waits until it is healthy: it leads, or stands by.
func (r *runner) restart(ctx context.Context, i int) error {
	r.opMu.Lock()
	rp := r.replicas[i]
	if rp.c.Running() {
		r.opMu.Unlock()
		return nil
	}
	err := rp.c.Restart()
	rp.paused = false
	kills := rp.kills
	r.opMu.Unlock()
	if err != nil {
		return err
	}
	hctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err = rp.c.WaitHealthy(hctx)
	r.opMu.Lock()
	killed := rp.kills != kills
	r.opMu.Unlock()
	if err != nil && killed {
		// Another action (a kill, a leader change) killed the new process
		// before it was healthy: a pod killed while it starts. Whoever
		// killed it starts it again.
		r.logf("seed %d: replica-%d was killed by the schedule while it started", r.s.Seed, i+1)
		return nil
	}
	return err
}

// leaderChange plays a KindLeaderChange in the background, from its
// instant on: it waits for a leader (a kill just before may have left
// none: the change then follows the takeover), holds the leader's answers
// to the calls Hold names until the first one is held (or HoldFor passed),
// then kills or freezes the leader; the standby takes over once the Lease
// expires. A killed leader comes back as the standby once the other leads
// and For has passed; a frozen one is woken after For, must stop on its
// own (it may have lost its Lease: the controller's leader fence), and is
// started again.
func (r *runner) leaderChange(a Action) []step {
	return []step{{at: a.At, do: func(context.Context) error {
		r.bg.Add(1)
		go func() {
			defer r.bg.Done()
			if err := r.changeLeader(a); err != nil && r.bgCtx.Err() == nil {
				r.logf("seed %d: %s: %v", r.s.Seed, a, err)
			}
		}()
		return nil
	}}}
}

// sleep waits d or until the run ends (false).
func (r *runner) sleep(d time.Duration) bool {
	select {
	case <-r.bgCtx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func (r *runner) changeLeader(a Action) error {
	l, err := r.waitLeader(r.bgCtx, 30*time.Second)
	if err != nil {
		if r.bgCtx.Err() == nil {
			r.logf("seed %d: %s: no replica leads after 30s, nothing changed", r.s.Seed, a)
		}
		return nil
	}
	held, ok := r.hold(a, l)
	if !ok {
		return nil
	}
	if r.settling.Load() {
		r.logf("seed %d: %s: the schedule ended first, nothing changed", r.s.Seed, a)
		if a.Hold != "" {
			r.replicas[l].c.HoldAnswers(nil)
		}
		return nil
	}
	frozen := false
	if err := r.leave(a, l, held, &frozen); err != nil || !frozen {
		return err
	}
	if !r.sleep(a.For) {
		return nil
	}
	return r.wake(a, l)
}

// waitLeader waits up to d for a replica to lead and returns it.
func (r *runner) waitLeader(ctx context.Context, d time.Duration) (int, error) {
	deadline := time.Now().Add(d)
	for {
		if l := r.leader(); l >= 0 {
			return l, nil
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("no replica leads after %s", d)
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// hold holds from leader l the answers of a.Hold, if any, and returns how
// many it held: the leader goes as soon as the API acted on a call whose
// answer it will never get, or after a.HoldFor. False when the run ends.
func (r *runner) hold(a Action, l int) (int, bool) {
	h, ok := Holds[a.Hold]
	if !ok {
		return 0, true
	}
	path := regexp.MustCompile(h.Path)
	ch := r.replicas[l].c.HoldAnswers(func(c world.APICall) bool { return c.Method == h.Method && path.MatchString(c.Path) })
	select {
	case <-ch:
		return 1, true
	case <-time.After(a.HoldFor):
		return 0, true
	case <-r.bgCtx.Done():
		return 0, false
	}
}

// wake wakes replica l, frozen by the leader change a. It stalled past its
// Lease: it must exit by itself, writing nothing, and is started again as
// the standby.
func (r *runner) wake(a Action, l int) error {
	r.opMu.Lock()
	rp := r.replicas[l]
	if !rp.paused {
		r.opMu.Unlock()
		return nil
	}
	err := rp.c.Resume()
	rp.paused = false
	r.opMu.Unlock()
	if err != nil {
		return err
	}
	if !r.waitStopped(rp) {
		r.logf("seed %d: replica-%d, frozen %s, did not stop after waking up", r.s.Seed, l+1, a.For)
		return nil
	}
	r.logf("seed %d: replica-%d stopped after waking up (%v), starting it again", r.s.Seed, l+1, rp.c.ExitErr())
	return r.restart(r.bgCtx, l)
}

// waitStopped gives a woken replica 20 s to exit by itself.
func (r *runner) waitStopped(rp *replica) bool {
	for deadline := time.Now().Add(20 * time.Second); rp.c.Running() && time.Now().Before(deadline); {
		if !r.sleep(100 * time.Millisecond) {
			break
		}
	}
	return !rp.c.Running()
}

// leave makes replica l, the leader at the leader change a, go: killed
// (and back as the standby once the other leads and a.For passed) or
// frozen (*frozen set; the wake step wakes it). held: the answers held
// from it. A replica an earlier action already killed or froze stays as it is.
func (r *runner) leave(a Action, l, held int, frozen *bool) error {
	rp := r.replicas[l]
	defer func() {
		if a.Hold != "" {
			rp.c.HoldAnswers(nil)
		}
	}()
	r.opMu.Lock()
	if rp.paused || !rp.c.Running() {
		r.opMu.Unlock()
		r.logf("seed %d: leader change: replica-%d already went (killed or frozen by another action, %d %s answer held)", r.s.Seed, l+1, held, a.Hold)
		return nil
	}
	r.opMu.Unlock()
	how := a.Shape
	if a.Hold != "" {
		how += fmt.Sprintf(", %d %s answer held", held, a.Hold)
	}
	r.logf("seed %d: leader change: replica-%d goes (%s)", r.s.Seed, l+1, how)
	if a.Shape == LeaderKill {
		err := r.kill(l)
		back := time.Now().Add(a.For)
		r.bg.Add(1)
		go r.rejoin(l, back)
		return err
	}
	r.opMu.Lock()
	down := time.Now()
	err := rp.c.Pause()
	rp.paused = err == nil
	*frozen = rp.paused
	r.opMu.Unlock()
	r.watchTakeover(down)
	return err
}

// rejoin restarts replica l as the standby once another replica leads
// (else it could take the Lease back), and not before back. It runs in the
// background, under r.bg.
func (r *runner) rejoin(l int, back time.Time) {
	defer r.bg.Done()
	for r.bgCtx.Err() == nil {
		if o := r.leader(); o >= 0 && o != l && time.Now().After(back) {
			break
		}
		select {
		case <-r.bgCtx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
	if err := r.restart(r.bgCtx, l); err != nil && r.bgCtx.Err() == nil {
		r.logf("seed %d: restarting replica-%d after a leader change: %v", r.s.Seed, l+1, err)
	}
}

// editMain changes the main NodeClass's spec (retrying on conflicts with the
// controller's status writes).
func (r *runner) editMain(ctx context.Context, change func(*v1alpha1.ScalewayElasticMetalNodeClass)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
		if err := r.w.Kube.Client.Get(ctx, types.NamespacedName{Name: MainNodeClass}, nc); err != nil {
			return err
		}
		change(nc)
		return r.w.Kube.Client.Update(ctx, nc)
	})
}

func (r *runner) setLimits(ctx context.Context, hourly, monthly string) error {
	err := r.editMain(ctx, func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
		nc.Spec.Limits = nil
		if hourly != "" || monthly != "" {
			nc.Spec.Limits = &v1alpha1.LimitsSpec{HourlySpend: hourly, MonthlyCommitment: monthly}
		}
	})
	r.mu.Lock()
	r.limits = append(r.limits, limitsAt{at: time.Now(), lim: invariants.Limits{Hourly: eur(hourly), MonthlyCommitment: eur(monthly)}})
	r.mu.Unlock()
	return err
}

// zeroLimit stands for a limit of 0 EUR: in invariants.Limits 0 means no
// limit, and a limit of nothing at all must still refuse every order.
const zeroLimit = 1e-9

func eur(limit string) float64 {
	v, ok := v1alpha1.EUR(limit)
	if !ok {
		return 0
	}
	if v == 0 {
		return zeroLimit
	}
	return v
}

// pollClaims records every NodeClaim's life until ctx ends. Created and
// Deleting are the API server's timestamps (whole seconds, rounded down:
// never later than the truth); Registered and Gone are when a poll first
// saw them (at most one interval late).
func (r *runner) pollClaims(ctx context.Context) {
	for ctx.Err() == nil {
		var l karpv1.NodeClaimList
		if err := r.w.Kube.Client.List(ctx, &l); err == nil {
			r.noteClaims(l.Items, time.Now())
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// noteClaims records what one listing of the NodeClaims shows at now:
// new claims, deletions, registration and readiness, and claims gone.
func (r *runner) noteClaims(items []karpv1.NodeClaim, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for i := range items {
		nc := &items[i]
		seen[nc.Name] = true
		c := r.claimLocked(nc)
		if nc.DeletionTimestamp != nil && c.Deleting.IsZero() {
			c.Deleting = nc.DeletionTimestamp.Time
		}
		if c.Registered.IsZero() && nc.StatusConditions().Get(karpv1.ConditionTypeRegistered).IsTrue() {
			c.Registered = now
		}
		if nc.StatusConditions().Get(karpv1.ConditionTypeInitialized).IsTrue() || nc.StatusConditions().Root().IsTrue() {
			r.ready[nc.Name] = true
		}
	}
	for name, c := range r.claims {
		if !seen[name] && c.Gone.IsZero() {
			c.Gone = now
		}
	}
}

// claimLocked is the record of a NodeClaim, made when first seen. Caller
// holds r.mu.
func (r *runner) claimLocked(nc *karpv1.NodeClaim) *invariants.Claim {
	c := r.claims[nc.Name]
	if c == nil {
		c = &invariants.Claim{Name: nc.Name, Created: nc.CreationTimestamp.Time}
		r.claims[nc.Name] = c
	}
	return c
}

// watchDeletions records when each NodeClaim's deletion began from a watch:
// a claim deleted and gone between two polls (core's termination of a claim
// whose hourly server is released at once takes milliseconds) was seen by
// the poll only as gone, after its server's release, and I2 flagged the
// release as made under a live claim. The API server's deletionTimestamp is
// used (whole seconds, rounded down); a claim deleted without finalizers
// carries none, and the event's arrival stands in for it.
func (r *runner) watchDeletions(ctx context.Context) {
	wc, err := client.NewWithWatch(r.w.Kube.Config, client.Options{Scheme: r.w.Kube.Scheme})
	if err != nil {
		r.logf("watching nodeclaims: %v (deletions are seen by the poll only)", err)
		return
	}
	for ctx.Err() == nil {
		w, err := wc.Watch(ctx, &karpv1.NodeClaimList{})
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		for ev := range w.ResultChan() {
			r.noteDeletion(ev)
		}
		w.Stop()
	}
}

// noteDeletion records when a watched NodeClaim started deleting: its
// deletion timestamp, or now for a delete seen without one.
func (r *runner) noteDeletion(ev watch.Event) {
	nc, ok := ev.Object.(*karpv1.NodeClaim)
	if !ok || (nc.DeletionTimestamp == nil && ev.Type != watch.Deleted) {
		return
	}
	at := time.Now()
	if nc.DeletionTimestamp != nil {
		at = nc.DeletionTimestamp.Time
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.claimLocked(nc); c.Deleting.IsZero() {
		c.Deleting = at
	}
}

// settle ends every fault and limit, brings the controller back, scales
// the broken workload down and waits for a quiet world: every pod of the
// main workload bound and every live server of the cluster accounted for.
func (r *runner) settle(ctx context.Context) error {
	r.settling.Store(true)
	r.clearTrouble()
	if err := r.allUp(ctx); err != nil {
		return err
	}
	if _, err := r.waitLeader(ctx, time.Minute); err != nil {
		return fmt.Errorf("after the schedule: %w", err)
	}
	if err := r.setLimits(ctx, "", ""); err != nil {
		return err
	}
	if err := r.apps[Broken].Scale(ctx, 0); err != nil {
		return err
	}
	want := r.s.finalPods()
	deadline := time.Now().Add(SettleTimeout)
	for time.Now().Before(deadline) {
		if r.quiet(ctx, want) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	r.logf("seed %d: not quiet after %s", r.s.Seed, SettleTimeout)
	return nil
}

// clearTrouble ends the schedule's faults, quotas and stockouts.
func (r *runner) clearTrouble() {
	r.w.Sim.ClearFaults()
	for _, o := range Offers {
		_ = r.w.Sim.SetQuota("", o, -1)
		if r.w.Sim.Stock(Zone, o) == 0 {
			_ = r.w.Sim.SetStock(Zone, o, 100)
		}
	}
}

// allUp brings every replica up: a frozen one is woken (it must stop by
// itself, as in the wake step of its leader change), a stopped one started
// again.
func (r *runner) allUp(ctx context.Context) error {
	var woken []*replica
	r.opMu.Lock()
	for _, rp := range r.replicas {
		if rp.paused {
			if err := rp.c.Resume(); err == nil {
				woken = append(woken, rp)
			}
			rp.paused = false
		}
	}
	r.opMu.Unlock()
	for _, rp := range woken {
		if !r.waitStopped(rp) {
			r.logf("seed %d: %s did not stop after waking up in the settle", r.s.Seed, rp.c.LogPath)
		}
	}
	for i := range r.replicas {
		if err := r.restart(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// quiet: the main workload has its want pods, all bound, every NodeClaim of
// the main NodePool is initialized, and the live servers of the cluster are
// the ones the controller accounts for.
func (r *runner) quiet(ctx context.Context, want int) bool {
	bound, total, err := r.apps[App].Bound(ctx)
	if err != nil || bound != want || total != want {
		return false
	}
	var l karpv1.NodeClaimList
	if err := r.w.Kube.Client.List(ctx, &l); err != nil {
		return false
	}
	for _, nc := range l.Items {
		if nc.Labels[karpv1.NodePoolLabelKey] == MainNodeClass && !nc.StatusConditions().Get(karpv1.ConditionTypeInitialized).IsTrue() {
			return false
		}
	}
	view, err := r.view(ctx)
	return err == nil && slices.Equal(view, r.alive())
}

// unbound lists the main workload's pods not bound to a node.
func (r *runner) unbound(ctx context.Context) ([]string, error) {
	l, err := r.w.Clientset.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + App})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil && p.Spec.NodeName == "" {
			out = append(out, p.Name)
		}
	}
	return out, nil
}

// view is what the controller accounts for, sorted: the servers its
// NodeClaims name (what Karpenter's List gets), the spares and warm-pool
// servers its tags keep for a NodeClass. The controller runs as another
// process and has no endpoint that lists its view, so the view is what it
// reads back from the cluster and the API.
func (r *runner) view(ctx context.Context) ([]string, error) {
	var l karpv1.NodeClaimList
	if err := r.w.Kube.Client.List(ctx, &l); err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for _, nc := range l.Items {
		if nc.Status.ProviderID == "" {
			continue
		}
		if _, id, err := scaleway.ParseProviderID(nc.Status.ProviderID); err == nil {
			ids[id] = true
		}
	}
	for _, sv := range r.w.Sim.Servers() {
		tags := sv.Tags
		if scwsim.TagValue(tags, world.TagManagedBy) != r.w.ClusterName || scwsim.TagValue(tags, world.TagNodeClaim) != "" {
			continue
		}
		if scwsim.TagValue(tags, "karpenter-scaleway-em/nodeclass") != "" {
			ids[sv.ID] = true // a spare or a warm-pool slot
		}
	}
	out := make([]string, 0, len(ids))
	for id := range ids {
		out = append(out, id)
	}
	sort.Strings(out)
	return out, nil
}

// alive lists the servers of the cluster the ledger shows not deleted, sorted.
func (r *runner) alive() []string {
	last := map[string]scwsim.LedgerEntry{}
	deleted := map[string]bool{}
	for _, e := range r.w.Sim.Ledger() {
		last[e.Server] = e
		if e.Kind == scwsim.LedgerDelete {
			deleted[e.Server] = true
		}
	}
	var out []string
	for id, e := range last {
		if !deleted[id] && e.Tag(world.TagManagedBy) == r.w.ClusterName && e.Tag("karpenter-scaleway-em/handed-over-by") == "" {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// check collects the facts and runs the invariants over the ledger.
func (r *runner) check(ctx context.Context, end time.Time) ([]invariants.Violation, error) {
	ledger := r.w.Sim.Ledger()
	unbound, err := r.unbound(ctx)
	if err != nil {
		return nil, err
	}
	view, err := r.view(ctx)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f := invariants.Facts{Cluster: r.w.ClusterName, Claims: map[string]invariants.Claim{}, End: end,
		Grace: gcGrace, Sweep: gcInterval + r.outage, RenewalMargin: billingRenewalMargin,
		UnboundPods: unbound, ControllerView: view}
	for name, c := range r.claims {
		f.Claims[name] = *c
	}
	for name := range r.ready {
		f.ReadyClaims = append(f.ReadyClaims, name)
	}
	sort.Strings(f.ReadyClaims)
	if r.s.BrokenNodeClass {
		pods := 0
		for _, a := range r.s.Actions {
			if a.Kind == KindPods && a.App == Broken {
				pods = max(pods, a.Pods)
			}
		}
		f.OrdersPerHour = map[string]int{BrokenNodeClass: breakerThreshold + max(pods, 1) - 1}
	}
	f.Excused = excuses(ledger, r.lifetimes)
	for _, e := range ledger {
		if e.Kind == scwsim.LedgerOrder {
			r.orders++
		}
	}
	vs := invariants.Check(ledger, f) // f.Limits is nil: I5 is judged per limit below
	vs = append(vs, limitViolations(ledger, r.limits)...)
	return vs, nil
}

// billingRenewalMargin is how long before a renewal the controller releases
// a monthly spare (controller/billing.RenewalMargin, an hour).
const billingRenewalMargin = time.Hour

// excuses says why a monthly server may leave before its paid period ends:
// the main NodeClass's minimumLifetime was 0s (never keep one) when it
// went, or a moment before (the controller reads it from its cache), or
// the server was broken (status error) when deleted.
func excuses(ledger []scwsim.LedgerEntry, lifetimes []lifetimeAt) func(string, time.Time) string {
	return func(id string, at time.Time) string {
		for _, e := range ledger {
			if e.Server == id && e.Kind == scwsim.LedgerDelete && e.At.Equal(at) && e.Status == "error" {
				return "broken (status error)"
			}
		}
		for i, l := range lifetimes {
			next := time.Time{}
			if i+1 < len(lifetimes) {
				next = lifetimes[i+1].at
			}
			inForce := !at.Before(l.at) && (next.IsZero() || at.Before(next.Add(limitLag)))
			if inForce && l.lifetime == "0s" {
				return "minimumLifetime 0s"
			}
		}
		return ""
	}
}

// limitViolations judges I5 per stretch of constant limits: orders in a
// stretch against its limits, save the first limitLag of it, judged against
// the more lenient of its limits and the previous ones.
func limitViolations(ledger []scwsim.LedgerEntry, limits []limitsAt) []invariants.Violation {
	var out []invariants.Violation
	judge := func(from, to time.Time, lim invariants.Limits) {
		var prefix []scwsim.LedgerEntry
		for _, e := range ledger {
			if to.IsZero() || e.At.Before(to) {
				prefix = append(prefix, e)
			}
		}
		for _, v := range invariants.I5(prefix, invariants.Facts{Limits: map[string]invariants.Limits{MainNodeClass: lim}}) {
			if len(v.Entries) > 0 && !v.Entries[0].At.Before(from) {
				out = append(out, v)
			}
		}
	}
	for i, l := range limits {
		var to time.Time
		if i+1 < len(limits) {
			to = limits[i+1].at
		}
		from := l.at
		if i > 0 {
			lag := from.Add(limitLag)
			if !to.IsZero() && to.Before(lag) {
				lag = to
			}
			judge(from, lag, lenient(limits[i-1].lim, l.lim))
			from = lag
		}
		judge(from, to, l.lim)
	}
	return out
}

// lenient is the looser of two limits (0: none).
func lenient(a, b invariants.Limits) invariants.Limits {
	loose := func(x, y float64) float64 {
		if x == 0 || y == 0 {
			return 0
		}
		return max(x, y)
	}
	return invariants.Limits{Hourly: loose(a.Hourly, b.Hourly), MonthlyCommitment: loose(a.MonthlyCommitment, b.MonthlyCommitment)}
}
