package world

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// Tags the provider sets on servers (DESIGN.md).
const (
	TagNodeClaim = "karpenter.sh/nodeclaim"
	TagNodePool  = "karpenter.sh/nodepool"
	TagManagedBy = "karpenter.sh/managed-by"
	TagClusterID = "karpenter-scaleway-em/cluster-id"
	TagPhase     = "karpenter-scaleway-em/phase"
	TagImage     = "karpenter-scaleway-em/image"
)

// TagValue returns the value of key in key=value tags.
func TagValue(tags []string, key string) string {
	for _, t := range tags {
		if v, ok := strings.CutPrefix(t, key+"="); ok {
			return v
		}
	}
	return ""
}

// Stamp is a value seen at a time.
type Stamp struct {
	Value string
	At    time.Time
}

// Timeline is what the tracker saw of one server.
type Timeline struct {
	ID, Zone, Offer, NodeClaim, NodePool string
	Created                              time.Time
	// Statuses (API status) and Phases (phase tag), in the order seen.
	Statuses []Stamp
	Phases   []Stamp
	// Node registered from the server (matched by providerID) and when it
	// was first seen, and first seen Ready.
	Node                string
	NodeSeen, NodeReady time.Time
	// Gone: when the server disappeared from the API.
	Gone time.Time
	// Claims: every NodeClaim tag value the server carried, when first seen
	// (a monthly server kept as a spare and taken again has several), and
	// Nodes: every node registered from it, in order.
	Claims []Stamp
	Nodes  []NodeSeen
}

// NodeSeen is one node registered from a server: when it was first seen, and
// first seen Ready.
type NodeSeen struct {
	Name        string
	Seen, Ready time.Time
}

// Event is one change the tracker saw.
type Event struct {
	At       time.Time
	ServerID string
	Kind     string // created, status, phase, node, ready, gone
	Value    string
}

// Tracker polls the simulator and the kube-apiserver and keeps a timeline
// per server, for progress displays and assertions. Phase timings come from
// the phase tag the controller persists on each server.
type Tracker struct {
	w        *World
	interval time.Duration
	onEvent  func(Event)

	mu        sync.Mutex
	timelines map[string]*Timeline
	order     []string
	cancel    context.CancelFunc
	done      chan struct{}
}

// Track starts a tracker polling every interval; onEvent (may be nil) is
// called for each change, from the tracker's goroutine. Stop ends it.
func (w *World) Track(interval time.Duration, onEvent func(Event)) *Tracker {
	ctx, cancel := context.WithCancel(context.Background())
	t := &Tracker{w: w, interval: interval, onEvent: onEvent, timelines: map[string]*Timeline{}, cancel: cancel,
		done: make(chan struct{})}
	go t.loop(ctx)
	return t
}

// Stop ends the polling (after one last poll).
func (t *Tracker) Stop() {
	t.cancel()
	<-t.done
}

// Timelines returns a copy of every server's timeline, oldest first.
func (t *Tracker) Timelines() []Timeline {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Timeline, 0, len(t.order))
	for _, id := range t.order {
		tl := *t.timelines[id]
		tl.Statuses = append([]Stamp(nil), tl.Statuses...)
		tl.Phases = append([]Stamp(nil), tl.Phases...)
		tl.Claims = append([]Stamp(nil), tl.Claims...)
		tl.Nodes = append([]NodeSeen(nil), tl.Nodes...)
		out = append(out, tl)
	}
	return out
}

func (t *Tracker) loop(ctx context.Context) {
	defer close(t.done)
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	for {
		t.poll(ctx)
		select {
		case <-ctx.Done():
			t.poll(context.Background())
			return
		case <-tick.C:
		}
	}
}

func (t *Tracker) emit(evs []Event) {
	if t.onEvent == nil {
		return
	}
	for _, e := range evs {
		t.onEvent(e)
	}
}

func (t *Tracker) poll(ctx context.Context) {
	now := time.Now()
	servers := t.w.Sim.Servers()
	var nodes []corev1.Node
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if l, err := t.w.Clientset.CoreV1().Nodes().List(cctx, metav1.ListOptions{}); err == nil {
		nodes = l.Items
	}
	cancel()
	var evs []Event
	t.mu.Lock()
	seen := map[string]bool{}
	for _, s := range servers {
		seen[s.ID] = true
		evs = append(evs, t.serverLocked(s, now)...)
	}
	for id, tl := range t.timelines {
		if !seen[id] && tl.Gone.IsZero() {
			tl.Gone = now
			evs = append(evs, Event{At: now, ServerID: id, Kind: "gone"})
		}
	}
	for i := range nodes {
		evs = append(evs, t.nodeLocked(&nodes[i], now)...)
	}
	t.mu.Unlock()
	t.emit(evs)
}

// serverLocked records what a listed server shows at now: a new timeline
// when first seen, its NodeClaim, status and phase when they changed; it
// returns the events to report. Caller holds t.mu.
func (t *Tracker) serverLocked(s scwsim.ServerState, now time.Time) []Event {
	var evs []Event
	tl := t.timelines[s.ID]
	if tl == nil {
		tl = &Timeline{ID: s.ID, Zone: s.Zone, Offer: s.OfferName, Created: s.CreatedAt,
			NodeClaim: TagValue(s.Tags, TagNodeClaim), NodePool: TagValue(s.Tags, TagNodePool)}
		t.timelines[s.ID] = tl
		t.order = append(t.order, s.ID)
		evs = append(evs, Event{At: now, ServerID: s.ID, Kind: "created", Value: fmt.Sprintf("%s in %s", s.OfferName, s.Zone)})
	}
	if nc := TagValue(s.Tags, TagNodeClaim); nc != "" {
		tl.NodeClaim = nc
		appendChange(&tl.Claims, nc, now)
	}
	if appendChange(&tl.Statuses, s.Status, now) {
		evs = append(evs, Event{At: now, ServerID: s.ID, Kind: "status", Value: s.Status})
	}
	if p := TagValue(s.Tags, TagPhase); p != "" && appendChange(&tl.Phases, p, now) {
		evs = append(evs, Event{At: now, ServerID: s.ID, Kind: "phase", Value: p})
	}
	return evs
}

// appendChange stamps v at now unless it is already the last value seen,
// and reports whether it did.
func appendChange(stamps *[]Stamp, v string, now time.Time) bool {
	if n := len(*stamps); n > 0 && (*stamps)[n-1].Value == v {
		return false
	}
	*stamps = append(*stamps, Stamp{v, now})
	return true
}

// nodeLocked records what a Node shows at now on its server's timeline:
// the first node and when it was Ready, and each node after (a spare's
// next life) with its own Ready; it returns the events to report. Caller
// holds t.mu.
func (t *Tracker) nodeLocked(n *corev1.Node, now time.Time) []Event {
	id := serverIDOf(n.Spec.ProviderID)
	tl := t.timelines[id]
	if tl == nil {
		return nil
	}
	var evs []Event
	if tl.Node == "" {
		tl.Node, tl.NodeSeen = n.Name, now
		evs = append(evs, Event{At: now, ServerID: id, Kind: "node", Value: n.Name})
	}
	if tl.NodeReady.IsZero() && nodeReady(n) {
		tl.NodeReady = now
		evs = append(evs, Event{At: now, ServerID: id, Kind: "ready", Value: n.Name})
	}
	if k := len(tl.Nodes); k == 0 || tl.Nodes[k-1].Name != n.Name {
		if k > 0 { // a spare's next node; the first is reported above
			evs = append(evs, Event{At: now, ServerID: id, Kind: "node", Value: n.Name})
		}
		tl.Nodes = append(tl.Nodes, NodeSeen{Name: n.Name, Seen: now})
	}
	if last := &tl.Nodes[len(tl.Nodes)-1]; last.Ready.IsZero() && nodeReady(n) {
		last.Ready = now
		if len(tl.Nodes) > 1 {
			evs = append(evs, Event{At: now, ServerID: id, Kind: "ready", Value: n.Name})
		}
	}
	return evs
}

// serverIDOf returns the server ID of a provider ID scaleway-em://<zone>/<id>.
func serverIDOf(providerID string) string {
	rest, ok := strings.CutPrefix(providerID, "scaleway-em://")
	if !ok {
		return ""
	}
	if i := strings.LastIndex(rest, "/"); i >= 0 {
		return rest[i+1:]
	}
	return ""
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PhaseDurations returns how long the server spent in each phase tag, in
// order, the last one until the node was Ready (or until now).
func (tl Timeline) PhaseDurations() []Stamp {
	var out []Stamp
	for i, p := range tl.Phases {
		end := tl.NodeReady
		if i+1 < len(tl.Phases) {
			end = tl.Phases[i+1].At
		}
		if end.IsZero() {
			continue
		}
		out = append(out, Stamp{Value: p.Value + "=" + end.Sub(p.At).Round(10*time.Millisecond).String(), At: p.At})
	}
	return out
}

// TimeToReady is from the order (first time seen) to the node Ready; 0 if never.
func (tl Timeline) TimeToReady() time.Duration {
	if tl.NodeReady.IsZero() {
		return 0
	}
	start := tl.Created
	if len(tl.Statuses) > 0 && tl.Statuses[0].At.Before(start) {
		start = tl.Statuses[0].At
	}
	return tl.NodeReady.Sub(start)
}
