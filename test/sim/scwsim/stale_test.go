package scwsim

import (
	"slices"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
)

const staleLag = time.Second

// staleEnv is a simulator whose listings (and with byID reads by ID) lag
// by staleLag, with one server ready and listed.
func staleEnv(t *testing.T, byID bool) (*env, *baremetal.Server) {
	t.Helper()
	e := newEnv(t, func(o *Options) { o.StaleLag, o.StaleReadsByID = staleLag, byID })
	srv := e.create(t, offerB112, "a=1")
	// With byID the wait reads a past version: it ends one lag after ready.
	e.waitStatus(t, srv.ID, baremetal.ServerStatusReady)
	e.eventually(t, "the server listed as ready", func() bool {
		l := e.list(t)
		return len(l) == 1 && l[0].Status == baremetal.ServerStatusReady
	})
	time.Sleep(staleLag) // every version before now is older than the lag
	return e, srv
}

func (e *env) list(t *testing.T, tags ...string) []*baremetal.Server {
	t.Helper()
	res, err := e.bm.ListServers(&baremetal.ListServersRequest{Tags: tags})
	if err != nil {
		t.Fatalf("ListServers: %v", err)
	}
	return res.Servers
}

func (e *env) get(t *testing.T, id string) *baremetal.Server {
	t.Helper()
	srv, err := e.bm.GetServer(&baremetal.GetServerRequest{ServerID: id})
	if err != nil {
		t.Fatalf("GetServer: %v", err)
	}
	return srv
}

// eventually waits (at most 10 lags) for ok.
func (e *env) eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * staleLag)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A tag edit reaches listings (and their tag filter) only after the lag;
// the PATCH answer and, by default, a read by ID show it at once.
func TestStaleLagTagEditShowsLateInListings(t *testing.T) {
	e, srv := staleEnv(t, false)
	updated, err := e.bm.UpdateServer(&baremetal.UpdateServerRequest{ServerID: srv.ID, Tags: &[]string{"a=2"}})
	if err != nil {
		t.Fatal(err)
	}
	equalStrings(t, "PATCH answer", updated.Tags, []string{"a=2"})
	equalStrings(t, "GetServer", e.get(t, srv.ID).Tags, []string{"a=2"})
	if l := e.list(t); len(l) != 1 || !slices.Equal(l[0].Tags, []string{"a=1"}) {
		t.Fatalf("listing right after the edit: %+v, want the old tags", l)
	}
	if l := e.list(t, "a=1"); len(l) != 1 {
		t.Fatalf("the tag filter matches the listed (old) tags: %d servers for a=1", len(l))
	}
	if l := e.list(t, "a=2"); len(l) != 0 {
		t.Fatalf("the tag filter matched the new tags before the lag: %d servers", len(l))
	}
	e.eventually(t, "listing shows a=2", func() bool { return len(e.list(t, "a=2")) == 1 })
	if l := e.list(t, "a=1"); len(l) != 0 {
		t.Fatalf("the old tags still listed after the lag")
	}
}

// With StaleReadsByID a read by ID lags like the listing.
func TestStaleReadsByIDTagEditShowsLate(t *testing.T) {
	e, srv := staleEnv(t, true)
	updated, err := e.bm.UpdateServer(&baremetal.UpdateServerRequest{ServerID: srv.ID, Tags: &[]string{"a=2"}})
	if err != nil {
		t.Fatal(err)
	}
	equalStrings(t, "PATCH answer", updated.Tags, []string{"a=2"})
	equalStrings(t, "GetServer right after", e.get(t, srv.ID).Tags, []string{"a=1"})
	e.eventually(t, "GetServer shows a=2", func() bool { return slices.Equal(e.get(t, srv.ID).Tags, []string{"a=2"}) })
}

// A status change (a stop) reaches listings and their status filter late.
func TestStaleLagStatusChangeShowsLate(t *testing.T) {
	e, srv := staleEnv(t, false)
	if _, err := e.bm.StopServer(&baremetal.StopServerRequest{ServerID: srv.ID}); err != nil {
		t.Fatal(err)
	}
	if st := e.get(t, srv.ID).Status; st != baremetal.ServerStatusStopping {
		t.Fatalf("GetServer: %s, want stopping", st)
	}
	res, err := e.bm.ListServers(&baremetal.ListServersRequest{Status: []string{"ready"}})
	if err != nil || len(res.Servers) != 1 {
		t.Fatalf("listing by status ready right after the stop: %v %d, want the server", err, len(res.Servers))
	}
	e.eventually(t, "listed as stopped", func() bool {
		l := e.list(t)
		return len(l) == 1 && l[0].Status == baremetal.ServerStatusStopped
	})
}

// A deleted server stays listed (as it was) for the lag, and with
// StaleReadsByID reads as it was too; then it is gone everywhere.
func TestStaleLagDeletedServerStaysListed(t *testing.T) {
	for _, byID := range []bool{false, true} {
		e, srv := staleEnv(t, byID)
		if _, err := e.bm.DeleteServer(&baremetal.DeleteServerRequest{ServerID: srv.ID}); err != nil {
			t.Fatal(err)
		}
		// Delays.Delete (20ms) is far below the lag: the server is gone.
		e.eventually(t, "the server gone in the simulator", func() bool { _, ok := e.sim.Server(srv.ID); return !ok })
		if l := e.list(t); len(l) != 1 || l[0].Status != baremetal.ServerStatusReady {
			t.Fatalf("byID=%v: listing right after the deletion: %+v, want the server as it was", byID, l)
		}
		if byID {
			if st := e.get(t, srv.ID).Status; st != baremetal.ServerStatusReady {
				t.Fatalf("GetServer right after the deletion: %s, want ready (as it was)", st)
			}
		} else {
			e.waitGone(t, srv.ID)
		}
		e.eventually(t, "the deleted server leaves listings", func() bool { return len(e.list(t)) == 0 })
		e.waitGone(t, srv.ID)
	}
}

// A new server is not listed for the lag; a read by ID sees it at once
// (its first version, even with StaleReadsByID).
func TestStaleLagNewServerHidden(t *testing.T) {
	for _, byID := range []bool{false, true} {
		e := newEnv(t, func(o *Options) { o.StaleLag, o.StaleReadsByID = staleLag, byID })
		srv := e.create(t, offerB112, "a=1")
		if l := e.list(t); len(l) != 0 {
			t.Fatalf("byID=%v: a server ordered just now is listed", byID)
		}
		if got := e.get(t, srv.ID); got.ID != srv.ID {
			t.Fatalf("byID=%v: GetServer of a new server: %+v", byID, got)
		}
		e.eventually(t, "the new server listed", func() bool { return len(e.list(t)) == 1 })
	}
}

// Without StaleLag nothing lags (the default the other tests rely on).
func TestStaleLagOffByDefault(t *testing.T) {
	e := newEnv(t, nil)
	srv := e.create(t, offerB112, "a=1")
	if _, err := e.bm.UpdateServer(&baremetal.UpdateServerRequest{ServerID: srv.ID, Tags: &[]string{"a=2"}}); err != nil {
		t.Fatal(err)
	}
	if l := e.list(t, "a=2"); len(l) != 1 {
		t.Fatalf("default listing misses a tag edit: %d", len(l))
	}
	e.sim.mu.Lock()
	n := len(e.sim.versions)
	e.sim.mu.Unlock()
	if n != 0 {
		t.Fatalf("versions kept without StaleLag: %d", n)
	}
}
