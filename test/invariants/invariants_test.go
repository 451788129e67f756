package invariants

import (
	"strings"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

var t0 = time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)

const cluster = "c1"

// book builds a ledger by hand, as the simulator would write it.
type book struct {
	es   []scwsim.LedgerEntry
	tags map[string][]string
	of   map[string]scwsim.LedgerEntry
}

func newBook() *book {
	return &book{tags: map[string][]string{}, of: map[string]scwsim.LedgerEntry{}}
}

func (b *book) add(e scwsim.LedgerEntry) {
	e.Seq = len(b.es) + 1
	b.es = append(b.es, e)
}

// order orders server id at t0+at with an offer of period, for nodeclass nc
// and claim ("" = none: a warm-pool or spare-like order).
func (b *book) order(at time.Duration, id, period, nc, claim string, extra ...string) {
	tags := []string{"karpenter.sh/managed-by=" + cluster, "karpenter-scaleway-em/nodeclass=" + nc}
	if claim != "" {
		tags = append(tags, "karpenter.sh/nodeclaim="+claim)
	}
	tags = append(tags, extra...)
	e := scwsim.LedgerEntry{At: t0.Add(at), Kind: scwsim.LedgerOrder, Server: id, Zone: "fr-par-2", Offer: "EM-X",
		Period: period, PricePerHour: 0.5, PricePerMonth: 200, Fee: 50, Created: t0.Add(at), Tags: tags}
	b.of[id], b.tags[id] = e, tags
	b.add(e)
}

func (b *book) entry(at time.Duration, kind scwsim.LedgerKind, id string) scwsim.LedgerEntry {
	e := b.of[id]
	e.At, e.Kind, e.Before, e.Tags = t0.Add(at), kind, b.tags[id], b.tags[id]
	return e
}

// claim retags server id for claim ("" = untag: a spare).
func (b *book) claim(at time.Duration, id, claim string) {
	e := b.entry(at, scwsim.LedgerTags, id)
	var tags []string
	for _, t := range e.Before {
		if !strings.HasPrefix(t, "karpenter.sh/nodeclaim=") {
			tags = append(tags, t)
		}
	}
	if claim != "" {
		tags = append(tags, "karpenter.sh/nodeclaim="+claim)
	}
	e.Tags, b.tags[id] = tags, tags
	b.add(e)
}

func (b *book) reboot(at time.Duration, id, mode string) {
	e := b.entry(at, scwsim.LedgerReboot, id)
	e.BootType = mode
	b.add(e)
}

func (b *book) del(at time.Duration, id string) { b.add(b.entry(at, scwsim.LedgerDelete, id)) }

func claimOf(name string, created, registered, deleting, gone time.Duration) Claim {
	c := Claim{Name: name, Created: t0.Add(created)}
	for _, p := range []struct {
		d time.Duration
		t *time.Time
	}{{registered, &c.Registered}, {deleting, &c.Deleting}, {gone, &c.Gone}} {
		if p.d >= 0 {
			*p.t = t0.Add(p.d)
		}
	}
	return c
}

// expect runs one invariant over b and checks it found want violations.
func expect(t *testing.T, name string, check func([]scwsim.LedgerEntry, Facts) []Violation, b *book, f Facts, want int) {
	t.Helper()
	vs := check(b.es, f)
	if len(vs) != want {
		t.Fatalf("%s: %d violations, want %d:\n%s", name, len(vs), want, Report(vs))
	}
	for _, v := range vs {
		if v.Invariant == "" || v.Detail == "" {
			t.Fatalf("%s: a violation without invariant or detail: %+v", name, v)
		}
	}
}

func TestInvariantI1OneServerPerNodeClaim(t *testing.T) {
	ok := newBook()
	ok.order(0, "s1", "hourly", "nc", "a")
	ok.claim(time.Minute, "s1", "a") // a phase edit keeps the same owner
	ok.order(time.Minute, "s2", "monthly", "nc", "b")
	ok.claim(time.Hour, "s2", "") // kept as a spare
	ok.claim(2*time.Hour, "s2", "c")
	expect(t, "clean", I1, ok, Facts{}, 0)

	lost := newBook() // an order whose answer was lost, ordered again
	lost.order(0, "s1", "hourly", "nc", "a")
	lost.order(time.Minute, "s2", "hourly", "nc", "a")
	expect(t, "double order", I1, lost, Facts{}, 1)

	taken := newBook() // a spare taken while the claim's own order was in flight
	taken.order(0, "s1", "hourly", "nc", "a")
	taken.order(0, "spare", "monthly", "nc", "")
	taken.claim(time.Minute, "spare", "a")
	expect(t, "order and take", I1, taken, Facts{}, 1)
}

func TestInvariantI2NothingTakenFromALiveNodeClaim(t *testing.T) {
	facts := Facts{Claims: map[string]Claim{
		"a": claimOf("a", 0, 10*time.Minute, 2*time.Hour, 2*time.Hour+time.Minute),
	}}
	ok := newBook()
	ok.order(0, "s1", "hourly", "nc", "a")
	ok.reboot(5*time.Minute, "s1", "rescue") // the install's own reboots
	ok.reboot(8*time.Minute, "s1", "normal")
	ok.del(2*time.Hour+30*time.Second, "s1") // deleted while the claim is being deleted
	expect(t, "clean", I2, ok, facts, 0)

	for name, f := range map[string]func(b *book){
		"deleted under its claim":  func(b *book) { b.del(time.Hour, "s1") },
		"untagged under its claim": func(b *book) { b.claim(time.Hour, "s1", "") },
		"rebooted after joining":   func(b *book) { b.reboot(time.Hour, "s1", "rescue") },
	} {
		b := newBook()
		b.order(0, "s1", "hourly", "nc", "a")
		f(b)
		expect(t, name, I2, b, facts, 1)
	}
}

// The rescue-boot repair: a node that came up by kexec from the install's
// rescue boot (no normal reboot in the ledger) may be rebooted normal once
// after it registered. Any other reboot of a live node is still caught: a
// normal one when the last reboot was normal already (an API-booted node,
// or a second repair), one into rescue, and a stop.
func TestInvariantI2AllowsOnlyTheKexecRescueBootRepair(t *testing.T) {
	facts := Facts{Claims: map[string]Claim{
		"a": claimOf("a", 0, 10*time.Minute, -1, -1),
	}}
	kexec := func(b *book) {
		b.order(0, "s1", "hourly", "nc", "a")
		b.reboot(5*time.Minute, "s1", "rescue") // the install's rescue; Talos by kexec, no normal reboot
	}
	ok := newBook()
	kexec(ok)
	ok.reboot(time.Hour, "s1", "normal") // the repair
	expect(t, "repair", I2, ok, facts, 0)

	for name, c := range map[string]struct {
		f    func(b *book)
		want int
	}{
		"normal reboot of an API-booted node": {func(b *book) {
			b.order(0, "s1", "hourly", "nc", "a")
			b.reboot(5*time.Minute, "s1", "rescue")
			b.reboot(8*time.Minute, "s1", "normal")
			b.reboot(time.Hour, "s1", "normal")
		}, 1},
		"a second repair without a rescue boot between": {func(b *book) {
			kexec(b)
			b.reboot(time.Hour, "s1", "normal")
			b.reboot(2*time.Hour, "s1", "normal")
		}, 1},
		"rescue reboot of a kexec-booted node": {func(b *book) {
			kexec(b)
			b.reboot(time.Hour, "s1", "rescue")
		}, 1},
		"stop of a kexec-booted node": {func(b *book) {
			kexec(b)
			b.add(b.entry(time.Hour, scwsim.LedgerStop, "s1"))
		}, 1},
		"normal reboot never preceded by a rescue boot": {func(b *book) {
			b.order(0, "s1", "hourly", "nc", "a")
			b.reboot(time.Hour, "s1", "normal")
		}, 1},
	} {
		b := newBook()
		c.f(b)
		expect(t, name, I2, b, facts, c.want)
	}
}

func TestInvariantI3MonthsAreNotThrownAway(t *testing.T) {
	// t0 is 10 March 12:00; March ends 21 days 12 hours later.
	monthEnd := 21*24*time.Hour + 12*time.Hour
	facts := Facts{RenewalMargin: time.Hour, Sweep: 2 * time.Minute, End: t0.Add(60 * 24 * time.Hour)}

	ok := newBook()
	ok.order(0, "m1", "monthly", "nc", "a")
	ok.claim(time.Hour, "m1", "")         // a spare
	ok.del(monthEnd-50*time.Minute, "m1") // released within the margin
	expect(t, "released on time", I3, ok, facts, 0)

	early := newBook()
	early.order(0, "m1", "monthly", "nc", "a")
	early.del(2*time.Hour, "m1")
	expect(t, "released early", I3, early, facts, 1)
	excused := facts
	excused.Excused = func(string, time.Time) string { return "sparesOnDeletion: Delete" }
	expect(t, "released early by policy", I3, early, excused, 0)

	late := newBook()
	late.order(0, "m1", "monthly", "nc", "a")
	late.claim(time.Hour, "m1", "")
	late.del(monthEnd+time.Hour, "m1") // renewed for April, then released
	if vs := I3(late.es, facts); len(vs) != 2 {
		t.Fatalf("released late: %d violations, want 2 (carried into April, released early in it):\n%s", len(vs), Report(vs))
	}
}

func TestInvariantI4NoServerWithoutAnOwner(t *testing.T) {
	facts := Facts{Cluster: cluster, Grace: 10 * time.Minute, Sweep: 2 * time.Minute, End: t0.Add(3 * time.Hour),
		Claims: map[string]Claim{"a": claimOf("a", 0, 5*time.Minute, time.Hour, time.Hour+time.Minute)}}
	ok := newBook()
	ok.order(0, "s1", "hourly", "nc", "a")
	ok.del(time.Hour+5*time.Minute, "s1")  // released 4 minutes after its claim went
	ok.order(0, "m1", "monthly", "nc", "") // a spare (no claim)
	expect(t, "clean", I4, ok, facts, 0)

	leaked := newBook()
	leaked.order(0, "s1", "hourly", "nc", "a") // never released
	expect(t, "leaked", I4, leaked, facts, 1)

	unknown := newBook()
	unknown.order(0, "s1", "hourly", "nc", "nobody") // a claim the cluster never had
	expect(t, "ordered for no claim", I4, unknown, facts, 1)
}

func TestInvariantI5SpendWithinLimits(t *testing.T) {
	facts := Facts{Limits: map[string]Limits{"nc": {Hourly: 1.2, MonthlyCommitment: 500}}}
	ok := newBook()
	ok.order(0, "s1", "hourly", "nc", "a")
	ok.order(time.Minute, "s2", "hourly", "nc", "b")
	ok.del(time.Hour, "s1")
	ok.order(2*time.Hour, "s3", "hourly", "nc", "c") // two at 0.5 each: 1.0
	ok.order(0, "x", "hourly", "other", "z")         // another NodeClass
	expect(t, "clean", I5, ok, facts, 0)

	over := newBook()
	for i, c := range []string{"a", "b", "c"} { // 1.5 EUR/h
		over.order(time.Duration(i)*time.Minute, "s"+c, "hourly", "nc", c)
	}
	expect(t, "hourly over", I5, over, facts, 1)

	commit := newBook()
	commit.order(0, "m1", "monthly", "nc", "a") // 250 with its fee
	commit.order(time.Minute, "m2", "monthly", "nc", "b")
	expect(t, "commitment over", I5, commit, Facts{Limits: map[string]Limits{"nc": {MonthlyCommitment: 450}}}, 1)
}

func TestInvariantI6ReadyClaimsHadOneServerAndPodsAreBound(t *testing.T) {
	b := newBook()
	b.order(0, "s1", "hourly", "nc", "a")
	expect(t, "clean", I6, b, Facts{ReadyClaims: []string{"a"}}, 0)
	expect(t, "ready without a server", I6, b, Facts{ReadyClaims: []string{"a", "b"}}, 1)
	expect(t, "pods left pending", I6, b, Facts{UnboundPods: []string{"default/web-1"}}, 1)
	b.order(time.Minute, "s2", "hourly", "nc", "a")
	expect(t, "ready with two servers", I6, b, Facts{ReadyClaims: []string{"a"}}, 1)
}

func TestInvariantI7ControllerViewMatchesTheLedger(t *testing.T) {
	b := newBook()
	b.order(0, "s1", "hourly", "nc", "a")
	b.order(0, "s2", "hourly", "nc", "b")
	b.del(time.Hour, "s2")
	expect(t, "clean", I7, b, Facts{Cluster: cluster, ControllerView: []string{"s1"}}, 0)
	expect(t, "forgotten", I7, b, Facts{Cluster: cluster, ControllerView: []string{}}, 1)
	expect(t, "phantom", I7, b, Facts{Cluster: cluster, ControllerView: []string{"s1", "s2"}}, 1)
}

func TestInvariantI8BreakerBoundsOrders(t *testing.T) {
	facts := Facts{OrdersPerHour: map[string]int{"broken": 2}}
	ok := newBook()
	ok.order(0, "s1", "hourly", "broken", "a")
	ok.order(20*time.Minute, "s2", "hourly", "broken", "b")
	ok.order(70*time.Minute, "s3", "hourly", "broken", "c")
	ok.order(0, "x1", "hourly", "fine", "x") // not bounded
	ok.order(0, "x2", "hourly", "fine", "y")
	ok.order(0, "x3", "hourly", "fine", "z")
	expect(t, "clean", I8, ok, facts, 0)
	ok.order(50*time.Minute, "s4", "hourly", "broken", "d")
	expect(t, "three in an hour", I8, ok, facts, 1)
}

// Check runs them all and the report names the invariant and its lines.
func TestInvariantCheckReportsTheLedgerLines(t *testing.T) {
	b := newBook()
	b.order(0, "s1", "hourly", "nc", "a")
	b.order(time.Minute, "s2", "hourly", "nc", "a")
	vs := Check(b.es, Facts{})
	if len(vs) != 1 {
		t.Fatalf("%d violations:\n%s", len(vs), Report(vs))
	}
	r := Report(vs)
	if !strings.HasPrefix(r, "I1: ") || !strings.Contains(r, "order  s2") || !strings.Contains(r, "order  s1") {
		t.Fatalf("report lacks the invariant or its ledger lines:\n%s", r)
	}
}
