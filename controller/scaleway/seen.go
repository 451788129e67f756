package scaleway

import (
	"sync"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

// seenServers is the latest state of each server the client read or wrote
// (GetServer, ListServers, the Poller's lists, tag updates, reboots), so a
// tag edit right after a read or a write that returned the server starts
// from that state instead of reading it again: most phase changes of an
// install follow a poll or another write by moments.
//
// Every tag write of the process goes through the client (one per
// process), under the server's tag lock, and is recorded here, so the
// state can only miss changes made by someone else (a person in the
// console); it is used for at most maxAge after it was seen (SeenMaxAge:
// a few poll intervals, a minute by default) and read again after that.
// Only the answers of our writes and of reads by ID are used as the base of
// a tag edit (freshBase): a listing may show a server as it was before the
// previous process's last writes (a restart within the API's lag), and
// nothing of this process's own is there to hold it against.
//
// A state is replaced only by one at least as recent by the API's own
// updated_at (and the answer of our write only by a strictly newer read): a
// list or read answered before our last write reached the API never
// overrides it. After a failed call the state is read again before use.
type seenServers struct {
	mu     sync.Mutex
	byKey  map[string]seenServer
	maxAge time.Duration
}

type seenServer struct {
	srv *baremetal.Server
	at  time.Time // when the answer arrived; zero: read before use
	// written: the answer of our own write. A read with the same
	// updated_at does not replace it (an API that does not move updated_at
	// on a tag change must not let a list started before the write undo it).
	written bool
	// byID: the answer of a read by ID (GetServer), not of a listing; with
	// written, what a tag edit may start from (freshBase).
	byID bool
}

// SeenMaxAge is how long a seen state stands in for a read: four poll
// intervals, so that the state a poll or a write returned serves the
// writes that follow it within a phase (e.g. the phase change after a
// wait, the reboot mark after a phase change) but not those after a long
// step (imaging), in every delay profile alike.
func SeenMaxAge(cfg Config) time.Duration { return 4 * cfg.PollInterval }

func seenKey(zone scw.Zone, id string) string { return string(zone) + "/" + id }

// observe records srv as seen at now; written: the answer of a write.
func (s *seenServers) observe(srv *baremetal.Server, now time.Time, written bool) {
	s.put(seenServer{srv: srv, at: now, written: written})
}

// observeByID records srv as a read by ID returned it at now.
func (s *seenServers) observeByID(srv *baremetal.Server, now time.Time) {
	s.put(seenServer{srv: srv, at: now, byID: true})
}

// rank orders the sources of equally recent states: our write, then a read
// by ID, then a listing.
func (e seenServer) rank() int {
	switch {
	case e.written:
		return 2
	case e.byID:
		return 1
	}
	return 0
}

func (s *seenServers) put(e seenServer) {
	srv := e.srv
	if srv == nil || srv.ID == "" || s.maxAge <= 0 {
		return
	}
	k := seenKey(srv.Zone, srv.ID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byKey == nil {
		s.byKey = map[string]seenServer{}
	}
	if old, ok := s.byKey[k]; ok && (NewerThan(old.srv, srv) || old.rank() > e.rank() && !NewerThan(srv, old.srv)) {
		return
	}
	s.byKey[k] = e
	if len(s.byKey) > 4096 {
		s.expire(e.at)
	}
}

// NewerThan reports whether a is strictly more recent than b by updated_at
// (the install holds its write's answer against a lagging listing with it).
func NewerThan(a, b *baremetal.Server) bool {
	return a.UpdatedAt != nil && (b.UpdatedAt == nil || a.UpdatedAt.After(*b.UpdatedAt))
}

// fresh returns the state of the server seen within maxAge of now.
func (s *seenServers) fresh(zone scw.Zone, id string, now time.Time) (*baremetal.Server, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byKey[seenKey(zone, id)]
	if !ok || e.at.IsZero() || now.Sub(e.at) > s.maxAge {
		return nil, false
	}
	return e.srv, true
}

// freshBase is fresh for a state a tag edit may start from: the answer of
// our own write or of a read by ID made at or after since (Config.ReadLag's
// floor), never a listing's.
func (s *seenServers) freshBase(zone scw.Zone, id string, now, since time.Time) (*baremetal.Server, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byKey[seenKey(zone, id)]
	if !ok || e.at.IsZero() || now.Sub(e.at) > s.maxAge || !(e.written || e.byID) || e.at.Before(since) {
		return nil, false
	}
	return e.srv, true
}

// ownWrite is the answer of this process's last write of the server that
// no later read replaced, however old: a read by ID that does not show it
// yet (Config.ReadLag) must not take the server back below it.
func (s *seenServers) ownWrite(zone scw.Zone, id string) (*baremetal.Server, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byKey[seenKey(zone, id)]
	if !ok || !e.written {
		return nil, false
	}
	return e.srv, true
}

// deleting reports whether the server was last seen being deleted, however
// long ago: a deletion never goes back, so that answer does not age.
func (s *seenServers) deleting(zone scw.Zone, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byKey[seenKey(zone, id)]
	return ok && !e.at.IsZero() && e.srv.Status == baremetal.ServerStatusDeleting
}

// forget makes the next use of a server's state read it again (it is gone,
// or a write's outcome is unknown). The state stays as the floor that older
// answers (a lagging list) cannot go below.
func (s *seenServers) forget(zone scw.Zone, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := seenKey(zone, id)
	if e, ok := s.byKey[k]; ok {
		e.at = time.Time{}
		s.byKey[k] = e
	}
}

// expire drops the states too old to be used. Caller holds mu.
func (s *seenServers) expire(now time.Time) {
	for k, e := range s.byKey {
		if now.Sub(e.at) > s.maxAge && (e.srv.Status != baremetal.ServerStatusDeleting || len(s.byKey) > 8192) {
			delete(s.byKey, k)
		}
	}
}
