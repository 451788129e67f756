// Package invariants checks the project's money promises over the simulated
// Scaleway's ledger (scwsim.Sim.Ledger): what was ordered, tagged, rebooted
// and deleted, as the API committed it, whatever the controller believes.
// The facts the ledger cannot hold (when each NodeClaim lived, the spend
// limits, what the controller lists at the end) come from the test that ran
// the world. docs/money-safety.md states the invariants:
//
//	I1 no NodeClaim ever had more than one server ordered or taken for it;
//	I2 no server deleted, untagged or rebooted while a live NodeClaim owned it
//	   that was not being deleted (an install's own reboots, before the node
//	   registered, are its NodeClaim's; so is one normal reboot of a server
//	   whose last reboot was into rescue: a kexec-booted node that Scaleway
//	   still boots into rescue, repaired);
//	I3 no monthly server released before its paid period ends unless excused
//	   (its NodeClass's policy, a broken server), and none kept idle into a new
//	   paid period by the controller's lateness;
//	I4 no server billed longer than grace + one sweep without an owner
//	   (a live NodeClaim, a spare, a warm-pool slot);
//	I5 spend never above a NodeClass's limits;
//	I6 at the end every pod that fits is bound, and every NodeClaim that became
//	   Ready had exactly one server;
//	I7 at the end the controller's view matches the ledger;
//	I8 a NodeClass whose installs always fail buys no more servers per hour
//	   than the breaker allows.
package invariants

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// Tag keys read from the ledger (the provider's tags, controller/scaleway).
// They are repeated here on purpose: the checker reads the API's record the
// way an auditor would, without the controller's code.
const (
	tagManagedBy  = "karpenter.sh/managed-by"
	tagNodeClaim  = "karpenter.sh/nodeclaim"
	tagNodeClass  = "karpenter-scaleway-em/nodeclass"
	tagPoolSlot   = "karpenter-scaleway-em/warm-pool-slot"
	tagHandedOver = "karpenter-scaleway-em/handed-over-by"
)

// HoursPerMonth is how the spend limits spread a monthly price over hours.
const HoursPerMonth = 730

// Claim is what the cluster saw of one NodeClaim.
type Claim struct {
	Name string
	// Created is its creation; Registered when its Node registered (zero:
	// never); Deleting when its deletion began (zero: never); Gone when it
	// no longer existed (zero: still there at the end).
	Created, Registered, Deleting, Gone time.Time
}

func (c Claim) liveAt(t time.Time) bool {
	return !t.Before(c.Created) && (c.Gone.IsZero() || t.Before(c.Gone))
}

func (c Claim) deletingAt(t time.Time) bool { return !c.Deleting.IsZero() && !t.Before(c.Deleting) }

// Limits are a NodeClass's spend limits in EUR (0: none).
type Limits struct {
	Hourly, MonthlyCommitment float64
}

// Facts are what the run knows besides the ledger. Zero values switch the
// checks that need them off, except where said.
type Facts struct {
	// Cluster is the managed-by tag's value of this cluster's servers.
	Cluster string
	Claims  map[string]Claim
	// End is when the run ended: owners and periods are judged up to it.
	End time.Time
	// Grace + Sweep bound how long a server may be billed without an owner
	// (I4); Sweep is also how late a release may come (I3).
	Grace, Sweep time.Duration
	// RenewalMargin: a monthly server is released at most this long before
	// its paid period ends (I3).
	RenewalMargin time.Duration
	// PeriodEnd gives the end of the paid period a monthly server created at
	// created is in at t (default: the next calendar month boundary, UTC).
	PeriodEnd func(created, t time.Time) time.Time
	// Excused says why a monthly server may be released early or kept into
	// a new period (its NodeClass's policy, a broken server); "" = it may not.
	Excused func(server string, at time.Time) string
	// Limits by NodeClass (I5).
	Limits map[string]Limits
	// OrdersPerHour by NodeClass: what the breaker allows a NodeClass whose
	// installs always fail (I8).
	OrdersPerHour map[string]int
	// ReadyClaims: NodeClaims that became Ready (I6); UnboundPods: pods that
	// fit an available offering but were not bound at the end (I6).
	ReadyClaims []string
	UnboundPods []string
	// ControllerView: the server IDs the controller accounts for at the end
	// (List, spares, reservations); nil switches I7 off.
	ControllerView []string
}

// Violation is one broken promise, with the ledger lines that broke it.
type Violation struct {
	Invariant string
	Server    string
	Detail    string
	Entries   []scwsim.LedgerEntry
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", v.Invariant, v.Detail)
	for _, e := range v.Entries {
		b.WriteString("\n    ")
		b.WriteString(e.String())
	}
	return b.String()
}

// Report prints violations, one block each.
func Report(vs []Violation) string {
	var b strings.Builder
	for _, v := range vs {
		b.WriteString(v.String())
		b.WriteString("\n")
	}
	return b.String()
}

// Check runs every invariant over the ledger and returns what broke.
func Check(ledger []scwsim.LedgerEntry, f Facts) []Violation {
	var out []Violation
	for _, check := range []func([]scwsim.LedgerEntry, Facts) []Violation{I1, I2, I3, I4, I5, I6, I7, I8} {
		out = append(out, check(ledger, f)...)
	}
	return out
}

// byServer groups the ledger by server, each oldest first.
func byServer(ledger []scwsim.LedgerEntry) (map[string][]scwsim.LedgerEntry, []string) {
	m := map[string][]scwsim.LedgerEntry{}
	var ids []string
	for _, e := range ledger {
		if _, ok := m[e.Server]; !ok {
			ids = append(ids, e.Server)
		}
		m[e.Server] = append(m[e.Server], e)
	}
	return m, ids
}

// serversByClaim lists, for each NodeClaim in the order first seen, the
// servers ordered or taken for it and the ledger lines that gave them.
func serversByClaim(ledger []scwsim.LedgerEntry) (map[string][]string, []string, map[string][]scwsim.LedgerEntry) {
	servers := map[string][]string{}
	lines := map[string][]scwsim.LedgerEntry{}
	var claims []string
	for _, e := range ledger {
		if e.Kind != scwsim.LedgerOrder && e.Kind != scwsim.LedgerTags {
			continue
		}
		c := e.Tag(tagNodeClaim)
		if c == "" || (e.Kind == scwsim.LedgerTags && e.TagBefore(tagNodeClaim) == c) {
			continue
		}
		if _, ok := servers[c]; !ok {
			claims = append(claims, c)
		}
		lines[c] = append(lines[c], e)
		if !slices.Contains(servers[c], e.Server) {
			servers[c] = append(servers[c], e.Server)
		}
	}
	return servers, claims, lines
}

// I1 checks that no NodeClaim ever had more than one server ordered or taken for it.
func I1(ledger []scwsim.LedgerEntry, _ Facts) []Violation {
	servers, claims, lines := serversByClaim(ledger)
	var out []Violation
	for _, c := range claims {
		if len(servers[c]) > 1 {
			out = append(out, Violation{Invariant: "I1", Server: servers[c][1],
				Detail:  fmt.Sprintf("nodeclaim %s had %d servers ordered or taken: %v", c, len(servers[c]), servers[c]),
				Entries: lines[c]})
		}
	}
	return out
}

// I2 checks that no server deleted, untagged or rebooted while a live NodeClaim that
// was not being deleted owned it. Reboots before the NodeClaim's node
// registered are its install's. After that, one reboot is allowed: into
// normal, when the server's last reboot in the ledger was into rescue. Such
// a node came up without the API's reboot into Talos (kexec from rescue),
// so Scaleway boots it into rescue on its next firmware reboot, and the
// controller's repair sets the boot type back; the repair is itself the
// last reboot then, so a second one is caught.
func I2(ledger []scwsim.LedgerEntry, f Facts) []Violation {
	var out []Violation
	lastBoot := map[string]string{} // server -> boot type of its last reboot so far
	for _, e := range ledger {
		before := lastBoot[e.Server]
		if e.Kind == scwsim.LedgerReboot {
			lastBoot[e.Server] = e.BootType
		}
		owner := e.TagBefore(tagNodeClaim)
		if owner == "" || e.Kind == scwsim.LedgerOrder || e.Kind == scwsim.LedgerGone {
			continue
		}
		c, known := f.Claims[owner]
		if !known || !c.liveAt(e.At) || c.deletingAt(e.At) {
			continue
		}
		if what := takenFrom(e, owner, c, before); what != "" {
			out = append(out, Violation{Invariant: "I2", Server: e.Server,
				Detail: fmt.Sprintf("server %s %s while nodeclaim %s owned it and was not being deleted", e.Server, what, owner), Entries: []scwsim.LedgerEntry{e}})
		}
	}
	return out
}

// takenFrom says what entry e, on a server live NodeClaim c (named owner)
// owned, took from it ("" = nothing); lastBoot is the boot type of the
// server's reboot before e.
func takenFrom(e scwsim.LedgerEntry, owner string, c Claim, lastBoot string) string {
	switch e.Kind {
	case scwsim.LedgerDelete:
		return "deleted"
	case scwsim.LedgerTags:
		if e.Tag(tagNodeClaim) != owner {
			return fmt.Sprintf("retagged nodeclaim %q -> %q", owner, e.Tag(tagNodeClaim))
		}
	case scwsim.LedgerReboot, scwsim.LedgerStop:
		if c.Registered.IsZero() || e.At.Before(c.Registered) || rescueBootRepair(e, lastBoot) {
			return ""
		}
		what := fmt.Sprintf("%s (%s) after its node registered", e.Kind, e.BootType)
		if e.Kind == scwsim.LedgerReboot && e.BootType == string(scwsim.BootNormal) {
			what += fmt.Sprintf(" (its last reboot was %q, not rescue: nothing to repair)", lastBoot)
		}
		return what
	}
	return ""
}

// rescueBootRepair reports whether reboot e, of a server whose previous
// reboot was into lastBoot, is the one repair I2 allows: into normal, the
// API's boot type being rescue until then.
func rescueBootRepair(e scwsim.LedgerEntry, lastBoot string) bool {
	return e.Kind == scwsim.LedgerReboot && e.BootType == string(scwsim.BootNormal) && lastBoot == string(scwsim.BootRescue)
}

// CalendarMonthEnd is the first instant of the calendar month (UTC) after t.
func CalendarMonthEnd(_, t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
}

// state is a server's tags over [from, to).
type state struct {
	from, to time.Time
	tags     []string
}

// timeline is a server's tag states from its order to its delete (or end).
func timeline(entries []scwsim.LedgerEntry, end time.Time) []state {
	var out []state
	for _, e := range entries {
		switch e.Kind {
		case scwsim.LedgerOrder, scwsim.LedgerTags:
			if n := len(out); n > 0 {
				out[n-1].to = e.At
			}
			out = append(out, state{from: e.At, to: end, tags: e.Tags})
		case scwsim.LedgerDelete:
			if n := len(out); n > 0 {
				out[n-1].to = e.At
			}
			return out
		}
	}
	return out
}

func isSpare(tags []string) bool {
	return scwsim.TagValue(tags, tagNodeClaim) == "" && scwsim.TagValue(tags, tagNodeClass) != "" && scwsim.TagValue(tags, tagPoolSlot) == ""
}

// I3 checks that a monthly server is released only in the last RenewalMargin (+ Sweep)
// of a paid period, and no idle spare is carried into a new period by the
// controller's lateness, unless excused.
func I3(ledger []scwsim.LedgerEntry, f Facts) []Violation {
	periodEnd := f.PeriodEnd
	if periodEnd == nil {
		periodEnd = CalendarMonthEnd
	}
	excused := func(id string, at time.Time) bool { return f.Excused != nil && f.Excused(id, at) != "" }
	servers, ids := byServer(ledger)
	var out []Violation
	for _, id := range ids {
		es := servers[id]
		if es[0].Period != "monthly" || es[0].Kind != scwsim.LedgerOrder {
			continue
		}
		out = append(out, i3EarlyReleases(id, es, f, periodEnd, excused)...)
		out = append(out, i3SpareRenewals(id, es, f, periodEnd, excused)...)
	}
	return out
}

// i3EarlyReleases flags each delete of the monthly server id that gave
// back more of its paid period than the renewal margin and a sweep.
func i3EarlyReleases(id string, es []scwsim.LedgerEntry, f Facts, periodEnd func(created, t time.Time) time.Time, excused func(string, time.Time) bool) []Violation {
	var out []Violation
	created := es[0].Created
	for _, e := range es {
		if e.Kind != scwsim.LedgerDelete {
			continue
		}
		if left := periodEnd(created, e.At).Sub(e.At); left > f.RenewalMargin+f.Sweep && !excused(id, e.At) {
			out = append(out, Violation{Invariant: "I3", Server: id,
				Detail:  fmt.Sprintf("monthly server %s released with %s of its paid period left", id, left.Round(time.Minute)),
				Entries: es})
		}
	}
	return out
}

// i3SpareRenewals flags each stretch the monthly server id spent as an idle
// spare across a period boundary, a spare since well before it: a month
// renewed for nothing. One violation per stretch.
func i3SpareRenewals(id string, es []scwsim.LedgerEntry, f Facts, periodEnd func(created, t time.Time) time.Time, excused func(string, time.Time) bool) []Violation {
	var out []Violation
	created := es[0].Created
	for _, st := range timeline(es, f.End) {
		if !isSpare(st.tags) {
			continue
		}
		for b := periodEnd(created, st.from); b.Before(st.to); b = periodEnd(created, b) {
			if b.Sub(st.from) > f.Sweep+f.RenewalMargin && !excused(id, b) {
				out = append(out, Violation{Invariant: "I3", Server: id,
					Detail:  fmt.Sprintf("idle monthly spare %s carried into the paid period starting %s (a spare since %s)", id, b.UTC().Format(time.RFC3339), st.from.UTC().Format(time.RFC3339)),
					Entries: es})
				break
			}
		}
	}
	return out
}

// I4 checks that no server billed longer than Grace + Sweep without an owner: a live
// NodeClaim named by its tag, a spare, a warm-pool slot.
func I4(ledger []scwsim.LedgerEntry, f Facts) []Violation {
	if f.End.IsZero() {
		return nil
	}
	bound := f.Grace + f.Sweep
	servers, ids := byServer(ledger)
	var out []Violation
	for _, id := range ids {
		es := servers[id]
		// Ownerless stretches in time order; adjacent ones are one stretch.
		var stretches [][2]time.Time
		for _, st := range timeline(es, f.End) {
			for _, seg := range ownerless(st, f) {
				if n := len(stretches); n > 0 && !seg[0].After(stretches[n-1][1]) {
					stretches[n-1][1] = maxTime(stretches[n-1][1], seg[1])
					continue
				}
				stretches = append(stretches, seg)
			}
		}
		for _, seg := range stretches {
			if d := seg[1].Sub(seg[0]); d > bound {
				out = append(out, Violation{Invariant: "I4", Server: id,
					Detail:  fmt.Sprintf("server %s billed %s without an owner (from %s; bound %s)", id, d.Round(time.Second), seg[0].UTC().Format(time.RFC3339), bound),
					Entries: es})
				break
			}
		}
	}
	return out
}

// ownerless returns the stretches of st during which nothing owns the server.
func ownerless(st state, f Facts) [][2]time.Time {
	tags := st.tags
	if scwsim.TagValue(tags, tagManagedBy) != f.Cluster && f.Cluster != "" || scwsim.TagValue(tags, tagHandedOver) != "" {
		return nil // not this cluster's (any more): the operator's
	}
	if isSpare(tags) || scwsim.TagValue(tags, tagPoolSlot) != "" {
		return nil
	}
	name := scwsim.TagValue(tags, tagNodeClaim)
	c, known := f.Claims[name]
	if name == "" || !known {
		return [][2]time.Time{{st.from, st.to}}
	}
	var out [][2]time.Time
	if st.from.Before(c.Created) {
		out = append(out, [2]time.Time{st.from, minTime(c.Created, st.to)})
	}
	if !c.Gone.IsZero() && c.Gone.Before(st.to) {
		out = append(out, [2]time.Time{maxTime(c.Gone, st.from), st.to})
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// I5 checks that at every order, the NodeClass's hourly spend and its commitment for
// the calendar month stay within its limits.
func I5(ledger []scwsim.LedgerEntry, f Facts) []Violation {
	if len(f.Limits) == 0 {
		return nil
	}
	var servers []i5Server
	index := map[string]int{}
	var out []Violation
	for _, e := range ledger {
		switch e.Kind {
		case scwsim.LedgerOrder:
			index[e.Server] = len(servers)
			servers = append(servers, i5Server{e: e})
		case scwsim.LedgerDelete:
			if i, ok := index[e.Server]; ok {
				servers[i].deleted = e.At
			}
			continue
		default:
			continue
		}
		nc := e.Tag(tagNodeClass)
		if lim, ok := f.Limits[nc]; ok {
			hourly, commitment := i5Spend(servers, nc, e.At)
			out = append(out, i5Over(e, nc, lim, hourly, commitment)...)
		}
	}
	return out
}

// i5Server is an order in the ledger and when it was deleted, zero while
// it lives.
type i5Server struct {
	e       scwsim.LedgerEntry
	deleted time.Time
}

// i5Spend sums, over the node class's servers alive at at, the hourly
// spend (a monthly server at its month price spread over the hours) and
// this month's commitment (month prices, plus the setup fees of servers
// ordered this month).
func i5Spend(servers []i5Server, nc string, at time.Time) (hourly, commitment float64) {
	monthStart := time.Date(at.UTC().Year(), at.UTC().Month(), 1, 0, 0, 0, 0, time.UTC)
	for _, s := range servers {
		if s.e.Tag(tagNodeClass) != nc || !s.deleted.IsZero() && !s.deleted.After(at) {
			continue
		}
		if s.e.Period != "monthly" {
			hourly += s.e.PricePerHour
			continue
		}
		hourly += s.e.PricePerMonth / HoursPerMonth
		commitment += s.e.PricePerMonth
		if !s.e.At.Before(monthStart) {
			commitment += s.e.Fee
		}
	}
	return hourly, commitment
}

// i5Over flags the order e when it took the node class over either limit.
func i5Over(e scwsim.LedgerEntry, nc string, lim Limits, hourly, commitment float64) []Violation {
	const eps = 1e-6
	var out []Violation
	if lim.Hourly > 0 && hourly > lim.Hourly+eps {
		out = append(out, Violation{Invariant: "I5", Server: e.Server,
			Detail: fmt.Sprintf("nodeclass %s spends %.4f EUR/h after ordering %s, over its limit %.4f", nc, hourly, e.Server, lim.Hourly), Entries: []scwsim.LedgerEntry{e}})
	}
	if lim.MonthlyCommitment > 0 && commitment > lim.MonthlyCommitment+eps {
		out = append(out, Violation{Invariant: "I5", Server: e.Server,
			Detail: fmt.Sprintf("nodeclass %s commits %.2f EUR this month after ordering %s, over its limit %.2f", nc, commitment, e.Server, lim.MonthlyCommitment), Entries: []scwsim.LedgerEntry{e}})
	}
	return out
}

// I6 checks that every NodeClaim that became Ready had exactly one server, and no pod
// that fits was left unbound.
func I6(ledger []scwsim.LedgerEntry, f Facts) []Violation {
	var out []Violation
	if len(f.UnboundPods) > 0 {
		out = append(out, Violation{Invariant: "I6", Detail: fmt.Sprintf("%d pods that fit an available offering were never bound: %v", len(f.UnboundPods), f.UnboundPods)})
	}
	servers, _, _ := serversByClaim(ledger)
	for _, c := range f.ReadyClaims {
		if n := len(servers[c]); n != 1 {
			out = append(out, Violation{Invariant: "I6", Detail: fmt.Sprintf("nodeclaim %s became Ready with %d servers in the ledger: %v", c, n, servers[c])})
		}
	}
	return out
}

// I7 checks that the servers of the cluster the ledger shows alive at the end are the
// ones the controller accounts for, no more, no fewer.
func I7(ledger []scwsim.LedgerEntry, f Facts) []Violation {
	if f.ControllerView == nil {
		return nil
	}
	servers, ids := byServer(ledger)
	alive := map[string]bool{}
	for _, id := range ids {
		if billedToCluster(servers[id], f.Cluster) {
			alive[id] = true
		}
	}
	view := map[string]bool{}
	for _, id := range f.ControllerView {
		view[id] = true
	}
	var out []Violation
	for _, id := range ids {
		if alive[id] && !view[id] {
			out = append(out, Violation{Invariant: "I7", Server: id, Detail: fmt.Sprintf("server %s is billed but the controller does not account for it", id), Entries: servers[id]})
		}
	}
	var extra []string
	for id := range view {
		if !alive[id] {
			extra = append(extra, id)
		}
	}
	sort.Strings(extra)
	for _, id := range extra {
		out = append(out, Violation{Invariant: "I7", Server: id, Detail: fmt.Sprintf("the controller accounts for server %s, which the ledger shows gone or not the cluster's", id), Entries: servers[id]})
	}
	return out
}

// billedToCluster reports whether a server's ledger entries leave it alive,
// managed by cluster and not handed over: a server the cluster pays for.
func billedToCluster(es []scwsim.LedgerEntry, cluster string) bool {
	last := es[len(es)-1]
	deleted := slices.ContainsFunc(es, func(e scwsim.LedgerEntry) bool { return e.Kind == scwsim.LedgerDelete })
	return !deleted && last.Tag(tagManagedBy) == cluster && last.Tag(tagHandedOver) == ""
}

// I8 checks that in no hour did a NodeClass with a breaker budget order more servers
// than the budget.
func I8(ledger []scwsim.LedgerEntry, f Facts) []Violation {
	var out []Violation
	orders := map[string][]scwsim.LedgerEntry{}
	for _, e := range ledger {
		if e.Kind == scwsim.LedgerOrder {
			nc := e.Tag(tagNodeClass)
			orders[nc] = append(orders[nc], e)
		}
	}
	var ncs []string
	for nc := range f.OrdersPerHour {
		ncs = append(ncs, nc)
	}
	sort.Strings(ncs)
	for _, nc := range ncs {
		budget, os := f.OrdersPerHour[nc], orders[nc]
		for i := range os {
			j := i
			for j < len(os) && os[j].At.Sub(os[i].At) < time.Hour {
				j++
			}
			if j-i > budget {
				out = append(out, Violation{Invariant: "I8", Server: os[i].Server,
					Detail:  fmt.Sprintf("nodeclass %s ordered %d servers within an hour from %s; the breaker allows %d", nc, j-i, os[i].At.UTC().Format(time.RFC3339), budget),
					Entries: os[i:j]})
				break
			}
		}
	}
	return out
}
