package soak

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// Kind is what one action of a schedule does. Actions are data: the runner
// plays each kind with one case, so a new kind is a new constant, a new case
// in the runner's steps and a new branch in Generate, nothing else.
type Kind string

// The kinds of actions.
const (
	// KindPods scales the workload App to Pods pods (pod waves and removals;
	// Karpenter's consolidation follows the removals).
	KindPods Kind = "pods"
	// KindLimits sets the main NodeClass's spend limits (Hourly,
	// Monthly: EUR as the CRD spells them, "" = no limit).
	KindLimits Kind = "limits"
	// KindMinimumLifetime sets the main NodeClass's
	// spec.billing.minimumLifetime ("" = unset, "0s" = never keep a monthly server).
	KindMinimumLifetime Kind = "minimum-lifetime"
	// KindWarmPool sets the main NodeClass's warm pool to Servers servers of
	// Offer billed per Period (Servers 0: the pool is off).
	KindWarmPool Kind = "warm-pool"
	// KindFault injects Fault into the simulated Scaleway for For (or for
	// Fault.Times requests, whichever ends first).
	KindFault Kind = "fault"
	// KindOutOfStock empties the stock of Offer for For (orders answer
	// out_of_stock), then restores it.
	KindOutOfStock Kind = "out-of-stock"
	// KindQuota caps the project's servers of Offer at what it has for For
	// (orders answer quota exceeded), then lifts the cap.
	KindQuota Kind = "quota"
	// KindKill kills the leading replica with SIGKILL and starts a new
	// process after For (a crashed or evicted pod). The Lease is not
	// released: the standby or the new process leads once it expires.
	KindKill Kind = "kill"
	// KindLeaderChange hands leadership to the other replica in the shape
	// Shape: the leader is killed (LeaderKill) or frozen (LeaderPause) and
	// the standby takes over once the Lease expires; with Hold set, the
	// leader's answers to the calls Hold names are held from it first
	// (the API acts, the leader never learns it did), and it is killed or
	// frozen as soon as one is held, or after HoldFor, as in test/e2e's
	// leader tests. For: how long the
	// old leader stays down (killed) or frozen (paused) before it comes
	// back as the standby (a frozen one wakes up, must stop on its own,
	// and is started again).
	KindLeaderChange Kind = "leader-change"
)

// Shapes of a leader change (Action.Shape).
const (
	LeaderKill  = "kill"
	LeaderPause = "pause"
)

// Holds lists the calls whose answers a leader change may hold from the leader
// before it goes (Action.Hold): an order, a tag edit (a take, a release, a
// phase), a reboot.
var Holds = map[string]struct{ Method, Path string }{
	"order":    {http.MethodPost, `/servers$`},
	"tag-edit": {http.MethodPatch, `/servers/[^/]+$`},
	"reboot":   {http.MethodPost, `/reboot$`},
}

// holdNames is Holds's keys in a fixed order (Generate draws from it).
var holdNames = []string{"order", "tag-edit", "reboot"}

// Workloads: App pods go to the main NodePool, Broken pods to the NodePool
// of the NodeClass whose installs always fail.
const (
	App    = "app"
	Broken = "broken"
)

// Offers the soak's NodePools may use, in fr-par-2: one hourly only
// (EM-A116X-SSD), one monthly only (EM-A115X-SSD), one both (EM-B111X-SATA).
var Offers = []string{"EM-A116X-SSD", "EM-A115X-SSD", "EM-B111X-SATA"}

// Zone of every server of the soak (the controller's default zone).
const Zone = "fr-par-2"

// Action is one step of a schedule, At after the schedule starts.
type Action struct {
	At   time.Duration
	Kind Kind

	// KindPods.
	App  string
	Pods int
	// KindLimits.
	Hourly, Monthly string
	// KindMinimumLifetime.
	MinimumLifetime string
	// KindWarmPool, KindOutOfStock, KindQuota.
	Offer   string
	Period  string
	Servers int
	// KindFault.
	Fault scwsim.Fault
	// KindFault, KindOutOfStock, KindQuota: how long it lasts; KindKill: how
	// long the controller stays down; KindLeaderChange: how long the old
	// leader stays down or frozen.
	For time.Duration
	// KindLeaderChange: LeaderKill or LeaderPause; Hold ("" or a key of
	// Holds) and how long answers are held at most before the leader goes.
	Shape   string
	Hold    string
	HoldFor time.Duration
}

func (a Action) String() string {
	at := fmt.Sprintf("%5.1fs", a.At.Seconds())
	switch a.Kind {
	case KindPods:
		return fmt.Sprintf("%s pods %s=%d", at, a.App, a.Pods)
	case KindLimits:
		return fmt.Sprintf("%s limits hourly=%q monthly=%q", at, a.Hourly, a.Monthly)
	case KindMinimumLifetime:
		return fmt.Sprintf("%s minimumLifetime=%q", at, a.MinimumLifetime)
	case KindWarmPool:
		return fmt.Sprintf("%s warm pool %d x %s %s", at, a.Servers, a.Offer, a.Period)
	case KindFault:
		return at + a.faultString()
	case KindOutOfStock, KindQuota:
		return fmt.Sprintf("%s %s %s for %s", at, a.Kind, a.Offer, a.For)
	case KindKill:
		return fmt.Sprintf("%s kill, down %s", at, a.For)
	case KindLeaderChange:
		return at + a.leaderChangeString()
	}
	return fmt.Sprintf("%s %s", at, a.Kind)
}

// faultString describes a fault action after its time: the fault, the
// status and count when set, and how long it stays.
func (a Action) faultString() string {
	f := a.Fault
	s := fmt.Sprintf(" fault %s %s %s", f.Kind, f.Method, f.Path)
	if f.Status != 0 {
		s += fmt.Sprintf(" status=%d", f.Status)
	}
	if f.Times != 0 {
		s += fmt.Sprintf(" times=%d", f.Times)
	}
	return s + fmt.Sprintf(" for %s", a.For)
}

// leaderChangeString describes a leader change after its time: its shape,
// the answer held back when one is, and how long the old leader is frozen
// or down.
func (a Action) leaderChangeString() string {
	s := fmt.Sprintf(" leader change: %s", a.Shape)
	if a.Hold != "" {
		s += fmt.Sprintf(" after holding a %s answer (at most %s)", a.Hold, a.HoldFor)
	}
	if a.Shape == LeaderPause {
		return s + fmt.Sprintf(", frozen %s", a.For)
	}
	return s + fmt.Sprintf(", down %s", a.For)
}

// Schedule is one seeded chaos run: how the world is set up, then the
// actions in time order.
type Schedule struct {
	Seed uint64
	// Length: the last action is before it; the runner settles afterwards.
	Length time.Duration
	// ListLag of the simulated Scaleway's listings (scwsim.Options.ListLag).
	ListLag time.Duration
	// StaleLag and StaleReadsByID of the simulated Scaleway
	// (scwsim.Options): listings (and, with StaleReadsByID, reads by ID)
	// serve every server as it was StaleLag ago, tag edits, status changes
	// and deletions included.
	StaleLag       time.Duration
	StaleReadsByID bool
	// Periods the main NodeClass and NodePool allow: hourly, monthly or both.
	Periods []string
	// BrokenNodeClass: a second NodeClass whose installs always fail
	// (rescue.disk names a disk no server has), with its own NodePool.
	BrokenNodeClass bool
	Actions         []Action
}

// String is the schedule, one action a line, as the runner prints it with -v.
func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %s, list lag %s, stale lag %s, stale reads by ID %v, periods %v, broken nodeclass %v, %d replicas, %d actions\n",
		s.Seed, s.Length, s.ListLag, s.StaleLag, s.StaleReadsByID, s.Periods, s.BrokenNodeClass, Replicas, len(s.Actions))
	for _, a := range s.Actions {
		b.WriteString("  ")
		b.WriteString(a.String())
		b.WriteString("\n")
	}
	return b.String()
}

// Length of every generated schedule: about a minute in the fast profile.
const Length = 60 * time.Second

// Replicas of the controller in every soak world, with leader election, as
// the chart deploys it.
const Replicas = 2

// Generate returns the schedule of a seed: a pure function of it (PCG seeded
// by the seed; no clock, no map order).
func Generate(seed uint64) Schedule {
	r := rand.New(rand.NewPCG(seed, 0x736f616b)) // "soak"
	s := Schedule{Seed: seed, Length: Length}
	s.ListLag = []time.Duration{0, 0, 2 * time.Second, 5 * time.Second, 10 * time.Second}[r.IntN(5)]
	s.Periods = [][]string{{"hourly"}, {"monthly"}, {"hourly", "monthly"}}[r.IntN(3)]
	s.BrokenNodeClass = r.IntN(3) == 0
	at := func() time.Duration { return time.Duration(r.Int64N(int64(Length))).Round(100 * time.Millisecond) }

	// Pod waves: the first at the start, so that every schedule has nodes
	// to disturb; the others at random, removals among them.
	s.Actions = append(s.Actions, Action{At: 0, Kind: KindPods, App: App, Pods: 1 + r.IntN(4)})
	for range 2 + r.IntN(4) {
		s.Actions = append(s.Actions, Action{At: at(), Kind: KindPods, App: App, Pods: r.IntN(7)})
	}
	if s.BrokenNodeClass {
		s.Actions = append(s.Actions, Action{At: at(), Kind: KindPods, App: Broken, Pods: 1 + r.IntN(2)})
	}
	// NodeClass edits.
	for range r.IntN(3) {
		a := Action{At: at(), Kind: KindLimits}
		a.Hourly = []string{"", "0.3", "0.6", "1.5"}[r.IntN(4)]
		a.Monthly = []string{"", "0", "150", "400"}[r.IntN(4)]
		s.Actions = append(s.Actions, a)
	}
	if slices.Contains(s.Periods, "monthly") {
		for range r.IntN(2) {
			s.Actions = append(s.Actions, Action{At: at(), Kind: KindMinimumLifetime,
				MinimumLifetime: []string{"", "0s", "1h", "720h"}[r.IntN(4)]})
		}
	}
	if r.IntN(2) == 0 {
		on := at()
		a := Action{At: on, Kind: KindWarmPool, Servers: 1 + r.IntN(2)}
		a.Period = s.Periods[r.IntN(len(s.Periods))]
		a.Offer = offerFor(r, a.Period)
		s.Actions = append(s.Actions, a)
		if r.IntN(2) == 0 {
			off := a
			off.At, off.Servers = on+time.Duration(r.Int64N(int64(Length-on)+1)).Round(100*time.Millisecond), 0
			s.Actions = append(s.Actions, off)
		}
	}
	// API faults.
	for range 2 + r.IntN(5) {
		s.Actions = append(s.Actions, Action{At: at(), Kind: KindFault, Fault: randomFault(r),
			For: time.Duration(1+r.IntN(10)) * time.Second})
	}
	if r.IntN(2) == 0 {
		s.Actions = append(s.Actions, Action{At: at(), Kind: KindOutOfStock, Offer: Offers[r.IntN(len(Offers))],
			For: time.Duration(3+r.IntN(15)) * time.Second})
	}
	if r.IntN(3) == 0 {
		s.Actions = append(s.Actions, Action{At: at(), Kind: KindQuota, Offer: Offers[r.IntN(len(Offers))],
			For: time.Duration(3+r.IntN(15)) * time.Second})
	}
	// Controller kills at random instants: inside an order, an install or a
	// sweep is a matter of where the instant falls.
	for range r.IntN(4) {
		s.Actions = append(s.Actions, Action{At: at(), Kind: KindKill,
			For: time.Duration(200+r.IntN(2800)) * time.Millisecond})
	}
	s.Actions = append(s.Actions, unkind(seed, &s)...)
	slices.SortStableFunc(s.Actions, func(a, b Action) int { return int(a.At - b.At) })
	return s
}

// unkind draws what came with two replicas and stale reads: the simulated
// Scaleway's stale lag and the leader changes. They come from a stream of
// their own, so that every action drawn above is what it was before they
// existed (a seed found before replays the same pod waves and faults).
func unkind(seed uint64, s *Schedule) []Action {
	r := rand.New(rand.NewPCG(seed, 0x6c656164)) // "lead"
	// Stale reads up to 8s: ORDER_SETTLE (30s) stays above three times the
	// longest lag, so a lost order still shows before the settle ends.
	s.StaleLag = []time.Duration{0, 0, 2 * time.Second, 4 * time.Second, 8 * time.Second}[r.IntN(5)]
	s.StaleReadsByID = s.StaleLag > 0 && r.IntN(2) == 0
	var out []Action
	for range []int{0, 1, 1, 2}[r.IntN(4)] {
		// Before 45s: the takeover (a Lease of 15s) happens inside the
		// schedule, not in the settle.
		a := Action{At: time.Duration(r.Int64N(int64(45 * time.Second))).Round(100 * time.Millisecond), Kind: KindLeaderChange}
		a.Shape = []string{LeaderKill, LeaderPause}[r.IntN(2)]
		if r.IntN(3) > 0 {
			a.Hold = holdNames[r.IntN(len(holdNames))]
			a.HoldFor = time.Duration(2+r.IntN(7)) * time.Second
		}
		if a.Shape == LeaderPause {
			// Longer than the Lease (15s) and its retry: the standby
			// leads before the old leader wakes up.
			a.For = time.Duration(20+r.IntN(10)) * time.Second
		} else {
			a.For = time.Duration(200+r.IntN(4800)) * time.Millisecond
		}
		out = append(out, a)
	}
	return out
}

// offerFor picks an offer sold for period.
func offerFor(r *rand.Rand, period string) string {
	if period == "monthly" {
		return []string{"EM-A115X-SSD", "EM-B111X-SATA"}[r.IntN(2)]
	}
	return []string{"EM-A116X-SSD", "EM-B111X-SATA"}[r.IntN(2)]
}

// faultTargets are the calls that move money or servers: orders, tag edits
// (takes, releases, phases), reboots, deletes, and the listings and reads
// every decision rests on.
var faultTargets = []struct{ method, path string }{
	{http.MethodPost, `/servers$`},
	{http.MethodPatch, `/servers/[^/]+$`},
	{http.MethodPost, `/reboot$`},
	{http.MethodDelete, `/servers/[^/]+$`},
	{http.MethodGet, `/servers$`},
	{http.MethodGet, `/servers/[^/]+$`},
}

// randomFault is a request fault: a 5xx, a bare 429, or an answer lost after
// the commit in one of its shapes (those only on calls that change something).
func randomFault(r *rand.Rand) scwsim.Fault {
	t := faultTargets[r.IntN(len(faultTargets))]
	f := scwsim.Fault{Method: t.method, Path: t.path, Times: 1 + r.IntN(3)}
	kinds := []scwsim.FaultKind{scwsim.FaultStatus, scwsim.FaultRateLimit}
	if t.method != http.MethodGet {
		kinds = append(kinds, scwsim.AfterCommitKinds...)
		kinds = append(kinds, scwsim.AfterCommitKinds...) // the faults the money promises are about
	}
	f.Kind = kinds[r.IntN(len(kinds))]
	if f.Kind == scwsim.FaultStatus {
		f.Status = []int{500, 502, 503}[r.IntN(3)]
	}
	return f
}

// finalPods is the replica count the schedule leaves App at: what the last
// pods action for it asked, 0 when none did.
func (s Schedule) finalPods() int {
	want := 0
	for _, a := range s.Actions {
		if a.Kind == KindPods && a.App == App {
			want = a.Pods
		}
	}
	return want
}
