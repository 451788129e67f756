package scwsim

import (
	"encoding/json"
	"slices"
	"sort"
	"time"
)

// Stale views (Options.StaleLag, Options.StaleReadsByID).
//
// Scaleway documents no consistency for its reads: neither that a listing
// shows a change at once nor that a read by ID does (the API reference and
// the SDK say nothing either way, and the project has recorded listings
// that miss a server ordered moments before). The simulator takes the
// unkind side wherever nothing is promised: with StaleLag set, a listing
// serves every server as it was StaleLag ago (its tags, status, boot type,
// IPs; a server deleted since still listed, one ordered since not yet);
// with StaleReadsByID too, GetServer serves the same past version. Writes
// (PATCH, reboot, stop, start, delete) act on the server as it is and
// answer with the state they committed: that answer is the one thing a
// client can be sure is current.
//
// The simulator keeps each server's versions: one is recorded whenever what
// the API would show changes (after every write, every timed transition,
// and, as a catch-all for changes made outside both, before every stale
// read), and old ones are dropped once a newer one is older than the lag.

// version is how a server read at one instant: the body the API showed and
// the fields listings filter on. A nil body: the server was gone.
type version struct {
	at   time.Time
	body map[string]any
	key  string // the body's JSON, to tell a change from the same state
	m    matchable
}

// serverVersions is one server's past, oldest first.
type serverVersions struct {
	zone  string
	order int
	list  []version
}

// matchable is what ListServers filters on.
type matchable struct {
	tags                       []string
	status, name, project, org string
	options                    []string
	createdAt                  time.Time
}

func matchOf(sv *server) matchable {
	m := matchable{tags: slices.Clone(sv.tags), status: sv.status, name: sv.name, project: sv.projectID,
		org: sv.orgID, createdAt: sv.createdAt}
	for _, o := range sv.options {
		m.options = append(m.options, o.id)
	}
	return m
}

// staleOn reports whether any stale view is configured.
func (s *Sim) staleOn() bool { return s.opts.StaleLag > 0 }

// staleCutoff is the instant stale reads show. Caller holds mu.
func (s *Sim) staleCutoff() time.Time { return s.now().Add(-s.opts.scaled(s.opts.StaleLag)) }

// snapAll records a version of every server whose API view changed since
// its last one, and drops versions no stale read can serve any more.
// Caller holds mu.
func (s *Sim) snapAll() {
	if !s.staleOn() {
		return
	}
	now := s.now()
	for _, sv := range s.servers {
		body := s.render(sv)
		raw, _ := json.Marshal(body)
		vs := s.versions[sv.id]
		if vs == nil {
			vs = &serverVersions{zone: sv.zone, order: sv.order}
			s.versions[sv.id] = vs
		}
		if n := len(vs.list); n > 0 && vs.list[n-1].key == string(raw) {
			continue
		}
		vs.list = append(vs.list, version{at: now, body: body, key: string(raw), m: matchOf(sv)})
	}
	cutoff := s.staleCutoff()
	for id, vs := range s.versions {
		// Keep the newest version at or before the cutoff (what a stale
		// read serves now) and everything after it.
		i := 0
		for i+1 < len(vs.list) && !vs.list[i+1].at.After(cutoff) {
			i++
		}
		vs.list = vs.list[i:]
		if len(vs.list) == 1 && vs.list[0].body == nil && !vs.list[0].at.After(cutoff) {
			delete(s.versions, id) // gone for longer than the lag: nothing shows it
		}
	}
}

// snapGone records that a server is gone (after its last state). Caller holds mu.
func (s *Sim) snapGone(sv *server) {
	if !s.staleOn() {
		return
	}
	s.snapAll()
	if vs := s.versions[sv.id]; vs != nil {
		vs.list = append(vs.list, version{at: s.now(), key: "gone"})
	}
}

// staleAt is the version a stale read at cutoff serves: the newest at or
// before it; ok is false when the server did not exist yet then.
func (vs *serverVersions) staleAt(cutoff time.Time) (version, bool) {
	var v version
	ok := false
	for _, c := range vs.list {
		if c.at.After(cutoff) {
			break
		}
		v, ok = c, true
	}
	return v, ok
}

// staleList is ListServers' answer from past versions: the zone's servers
// as they were at the cutoff, filtered on that past state. Caller holds mu.
func (s *Sim) staleList(zone string, q map[string][]string, desc bool) []map[string]any {
	s.snapAll()
	cutoff := s.staleCutoff()
	listed := s.now().Add(-s.opts.scaled(s.opts.ListLag))
	type hit struct {
		order int
		body  map[string]any
	}
	var match []hit
	for _, vs := range s.versions {
		if vs.zone != zone {
			continue
		}
		v, ok := vs.staleAt(cutoff)
		if !ok || v.body == nil || v.m.createdAt.After(listed) || !matches(v.m, q) {
			continue
		}
		match = append(match, hit{vs.order, v.body})
	}
	sort.Slice(match, func(i, j int) bool {
		if desc {
			return match[i].order > match[j].order
		}
		return match[i].order < match[j].order
	})
	out := make([]map[string]any, len(match))
	for i, h := range match {
		out[i] = h.body
	}
	return out
}

// staleGet is GetServer's answer from past versions (StaleReadsByID): the
// server as it was at the cutoff. A server ordered since reads as its first
// version: every recording reads a new server by ID at once (the SDK's own
// wait loop depends on it), so that much is taken as promised. A server
// deleted since still reads as it was. handled is false when the simulator
// has no past of this server (never created here, or gone longer than the
// lag): the live lookup answers then. Caller holds mu.
func (s *Sim) staleGet(id, zone string) (body map[string]any, gone, handled bool) {
	s.snapAll()
	vs := s.versions[id]
	if vs == nil || vs.zone != zone || len(vs.list) == 0 {
		return nil, false, false
	}
	v, ok := vs.staleAt(s.staleCutoff())
	if !ok {
		v = vs.list[0]
	}
	if v.body == nil {
		return nil, true, true
	}
	return v.body, false, true
}
