// Package nodetimes splits each node's time to Ready into Scaleway's share
// (the delivery and the reboots, as the simulator models them), the node's own
// boot and join, and the provider's overhead (everything else: noticing a
// transition, API calls, SSH, imaging), and lists the Scaleway API calls made
// about each server. `make bench` and `make demo` print it.
//
// It reads what test/world's Tracker saw (API status, phase tag, NodeClaim
// tag and nodes, polled every 100 ms or so: the figures are that precise) and
// the simulator's call record.
package nodetimes

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// Wait is one stretch during which Scaleway was busy with the server: its
// delivery or a reboot (the API status was anything but "ready").
type Wait struct {
	Kind     string // delivery, reboot
	From, To time.Time
}

// Life is one NodeClaim's use of a server: from the order (or from taking a
// spare) to its node Ready.
type Life struct {
	Server, NodeClaim, Node, Offer, Zone string
	// Reused: the NodeClaim took a spare rather than ordering a server.
	Reused     bool
	Start      time.Time
	Ready      time.Time // zero: the node never became Ready
	Phases     []string  // phase tags seen, in order
	Waits      []Wait
	Scaleway   time.Duration // the sum of Waits
	Join       time.Duration // last "ready" -> node Ready: Talos boot and kubelet, as simulated
	Provider   time.Duration // the rest
	Imaging    time.Duration // time in phase imaging (part of Provider)
	Gaps       []Gap         // Provider, stretch by stretch
	Calls      []scwsim.Call // about the server, from Start to Ready
	PhaseTimes []world.Stamp // phase=duration, as world.Timeline.PhaseDurations
}

// Gap is a stretch of the provider's overhead: the server was "ready" and
// the provider had not yet asked Scaleway for the next step (or the node had
// not booted). After names what it followed: the start, the delivery or a
// reboot.
type Gap struct {
	After string
	D     time.Duration
}

// Total is the time to Ready (0 if never).
func (l Life) Total() time.Duration {
	if l.Ready.IsZero() {
		return 0
	}
	return l.Ready.Sub(l.Start)
}

// Lives splits a tracked server into its NodeClaims' lives. calls is the
// simulator's whole call record.
func Lives(tl world.Timeline, calls []scwsim.Call) []Life {
	claims := tl.Claims
	if len(claims) == 0 && tl.NodeClaim != "" {
		claims = []world.Stamp{{Value: tl.NodeClaim, At: tl.Created}}
	}
	var out []Life
	for i, c := range claims {
		l := Life{Server: tl.ID, NodeClaim: c.Value, Offer: tl.Offer, Zone: tl.Zone, Start: c.At}
		end := time.Time{}
		if i+1 < len(claims) {
			end = claims[i+1].At
		}
		if i == 0 && !tl.Created.IsZero() && tl.Created.Before(l.Start) {
			l.Start = tl.Created
		}
		l.Reused = spareBefore(tl.Phases, c.At)
		if n, ok := firstNode(tl.Nodes, l.Start, end); ok {
			l.Node, l.Ready = n.Name, n.Ready
		}
		l.measure(tl, calls)
		out = append(out, l)
	}
	return out
}

// spareBefore reports whether the server was a spare before at: a claim at
// at then took a spare rather than a new server.
func spareBefore(phases []world.Stamp, at time.Time) bool {
	for _, p := range phases {
		if p.Value == "spare" && p.At.Before(at) {
			return true
		}
	}
	return false
}

// firstNode is the first node seen in [start, end), end zero meaning open.
func firstNode(nodes []world.NodeSeen, start, end time.Time) (world.NodeSeen, bool) {
	for _, n := range nodes {
		if !n.Seen.Before(start) && (end.IsZero() || n.Seen.Before(end)) {
			return n, true
		}
	}
	return world.NodeSeen{}, false
}

// measure splits the life into Scaleway's waits, the provider's stretches
// and the node's join, then records its phases and API calls. A life not
// Ready yet is measured up to now.
func (l *Life) measure(tl world.Timeline, calls []scwsim.Call) {
	stop := l.Ready
	if stop.IsZero() {
		stop = time.Now()
	}
	l.waits(tl, stop)
	for _, w := range l.Waits {
		l.Scaleway += w.To.Sub(w.From)
	}
	l.stretches()
	l.phases(tl, stop)
	for _, c := range calls {
		if c.ServerID == l.Server && !c.At.Before(l.Start.Add(-time.Second)) && !c.At.After(stop) {
			l.Calls = append(l.Calls, c)
		}
	}
}

// waits finds Scaleway's waits: runs of statuses other than "ready" within
// the life, a delivery while the server is being ordered, else a reboot.
func (l *Life) waits(tl world.Timeline, stop time.Time) {
	var cur *Wait
	for i, s := range tl.Statuses {
		from, to := l.statusSpan(tl, i, stop)
		if !to.After(from) {
			continue
		}
		if s.Value == "ready" {
			cur = nil
			continue
		}
		if cur == nil {
			kind := "reboot"
			if s.Value == "ordered" || s.Value == "delivering" || s.Value == "out_of_stock" {
				kind = "delivery"
			}
			l.Waits = append(l.Waits, Wait{Kind: kind, From: from})
			cur = &l.Waits[len(l.Waits)-1]
		}
		cur.To = to
	}
}

// statusSpan is when the i-th status held, within the life: the first one
// from the server's creation, the last one up to stop.
func (l *Life) statusSpan(tl world.Timeline, i int, stop time.Time) (from, to time.Time) {
	from, to = tl.Statuses[i].At, stop
	if i+1 < len(tl.Statuses) {
		to = tl.Statuses[i+1].At
	}
	if i == 0 && !tl.Created.IsZero() && tl.Created.Before(from) {
		from = tl.Created
	}
	if from.Before(l.Start) {
		from = l.Start
	}
	if to.After(stop) {
		to = stop
	}
	return from, to
}

// stretches finds the provider's stretches: from the start to the first
// wait, between waits; from the last wait's end to node Ready is the node's
// boot (Join) when that wait was a reboot.
func (l *Life) stretches() {
	prev, after := l.Start, "start"
	for _, w := range l.Waits {
		if d := w.From.Sub(prev); d > 0 {
			l.Gaps = append(l.Gaps, Gap{After: after, D: d})
		}
		prev, after = w.To, w.Kind
	}
	if l.Ready.IsZero() {
		return
	}
	if len(l.Waits) > 0 && l.Waits[len(l.Waits)-1].Kind == "reboot" {
		l.Join = l.Ready.Sub(prev)
	} else if d := l.Ready.Sub(prev); d > 0 {
		l.Gaps = append(l.Gaps, Gap{After: after, D: d})
	}
	l.Provider = l.Total() - l.Scaleway - l.Join
}

// phases records the phases within the life and the time in imaging.
func (l *Life) phases(tl world.Timeline, stop time.Time) {
	for i, p := range tl.Phases {
		if p.At.Before(l.Start) || p.At.After(stop) {
			continue
		}
		l.Phases = append(l.Phases, p.Value)
		next := stop
		if i+1 < len(tl.Phases) && tl.Phases[i+1].At.Before(stop) {
			next = tl.Phases[i+1].At
		}
		l.PhaseTimes = append(l.PhaseTimes, world.Stamp{Value: p.Value, At: p.At})
		if p.Value == "imaging" {
			l.Imaging += next.Sub(p.At)
		}
	}
}

var idRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// Kind names a call by its method and path, IDs and zone left out:
// "PATCH /servers/{id}", "POST /servers/{id}/reboot".
func Kind(c scwsim.Call) string {
	p := idRE.ReplaceAllString(c.Path, "{id}")
	if i := strings.Index(p, "/servers"); i >= 0 {
		p = p[i:]
	}
	return c.Method + " " + p
}

// Kinds counts calls by Kind: "3 GET /servers/{id}, 1 POST /servers".
func Kinds(calls []scwsim.Call) string {
	n := map[string]int{}
	for _, c := range calls {
		n[Kind(c)]++
	}
	keys := make([]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return n[keys[i]] > n[keys[j]] || n[keys[i]] == n[keys[j]] && keys[i] < keys[j] })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", n[k], k)
	}
	return strings.Join(parts, ", ")
}

// WaitsString formats them as "delivery 4m31s, reboot 2m29s, reboot 2m31s".
func (l Life) WaitsString(scale float64) string {
	parts := make([]string, len(l.Waits))
	for i, w := range l.Waits {
		parts[i] = w.Kind + " " + Fmt(Unscale(w.To.Sub(w.From), scale))
	}
	return strings.Join(parts, ", ")
}

// GapsString formats them as "after delivery 7.2s, after reboot 9.8s".
func (l Life) GapsString() string {
	parts := make([]string, len(l.Gaps))
	for i, g := range l.Gaps {
		parts[i] = "after " + g.After + " " + Fmt(g.D)
	}
	return strings.Join(parts, ", ")
}

// Unscale turns a simulated Scaleway duration back into real time when the
// simulator's delays were multiplied by scale (scwsim.Options.Scale).
func Unscale(d time.Duration, scale float64) time.Duration {
	if scale <= 0 || scale == 1 {
		return d
	}
	return time.Duration(float64(d) / scale)
}

// Projected is the time to Ready with Scaleway's share scaled back to real
// time; the provider's overhead and the node's join are real time already.
func (l Life) Projected(scale float64) time.Duration {
	return Unscale(l.Scaleway, scale) + l.Provider + l.Join
}

// Fmt prints a duration to a tenth of a second below a minute, to the second above.
func Fmt(d time.Duration) string {
	if d >= time.Minute || d <= -time.Minute {
		return d.Round(time.Second).String()
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}

// Stats of a set of values: the median and the maximum.
func Stats[T int | time.Duration](v []T) (median, most T) {
	if len(v) == 0 {
		return
	}
	s := append([]T(nil), v...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2], s[len(s)-1]
}

// Table prints one block per life: the time to Ready and its split, then
// the phases, Scaleway's waits, the provider's stretches and the API calls.
// scale: the simulator's delay scale (Scaleway's waits are printed scaled back).
func Table(lives []Life, scale float64) string {
	var b strings.Builder
	note := ""
	if scale != 1 && scale > 0 {
		note = fmt.Sprintf(" (Scaleway's share scaled back from x%g)", scale)
	}
	fmt.Fprintf(&b, "%-24s %-14s %-9s %9s = %9s + %6s + %8s  %7s  %5s%s\n", "node", "offer", "server", "to Ready", "Scaleway", "join", "provider", "imaging", "calls", note)
	for _, l := range lives {
		name := l.Node
		if name == "" {
			name = l.NodeClaim
		}
		how := "ordered"
		if l.Reused {
			how = "spare"
		}
		ready := "never"
		if !l.Ready.IsZero() {
			ready = Fmt(l.Projected(scale))
		}
		fmt.Fprintf(&b, "%-24s %-14s %-9s %9s = %9s + %6s + %8s  %7s  %5d\n", name, l.Offer, how, ready,
			Fmt(Unscale(l.Scaleway, scale)), Fmt(l.Join), Fmt(l.Provider), Fmt(l.Imaging), len(l.Calls))
		fmt.Fprintf(&b, "    phases %s; Scaleway: %s; provider: %s\n", strings.Join(l.Phases, " > "), orNone(l.WaitsString(scale)), orNone(l.GapsString()))
		fmt.Fprintf(&b, "    calls: %s\n", orNone(Kinds(l.Calls)))
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// Spares watches the spares (phase spare) of a simulator until each is
// settled: pre-imaged (ready in a keyed rescue boot with a pinned host key
// and an image written: the tags spare.Take looks for), or quiet (ready, status
// and tags unchanged for a while), so that whatever the provider does to an
// idle spare in the background is over before a measurement takes it.
type Spares struct {
	last  map[string]string
	since map[string]time.Time
}

// Quiet returns how many of servers are spares, and how many of those are
// pre-imaged or have been ready and unchanged for at least d, as of now.
// Call it repeatedly.
func (w *Spares) Quiet(servers []scwsim.ServerState, d time.Duration) (spares, quiet int) {
	if w.last == nil {
		w.last, w.since = map[string]string{}, map[string]time.Time{}
	}
	now := time.Now()
	for _, s := range servers {
		if world.TagValue(s.Tags, world.TagPhase) != "spare" {
			continue
		}
		spares++
		state := s.Status + " " + strings.Join(s.Tags, ",")
		if w.last[s.ID] != state {
			w.last[s.ID], w.since[s.ID] = state, now
		}
		if s.Status == "ready" && (now.Sub(w.since[s.ID]) >= d || preImaged(s.Tags)) {
			quiet++
		}
	}
	return spares, quiet
}

// preImaged: the tags of a spare in the keyed rescue boot that wrote its
// image, its host key pinned.
func preImaged(tags []string) bool {
	for _, k := range []string{install.TagRescueBoot, install.TagRescueHostKey, scaleway.TagImage} {
		if world.TagValue(tags, k) == "" {
			return false
		}
	}
	return true
}
