package scaleway

import (
	"context"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// With reads by ID lagging (scwsim StaleReadsByID), a tag edit long after
// this process's own last one (its seen state expired: 4 poll intervals)
// must not start from a read that does not show that write yet: the
// write's answer is the floor. Before FreshServer, mutateTags read the
// server again and wrote back a list without the first key.
func TestTagEditsKeepOwnWritesWhenReadsByIDLag(t *testing.T) {
	const lag = 2 * time.Second
	e := startSim(t, 1, func(o *scwsim.Options) { o.StaleLag, o.StaleReadsByID = lag, true },
		func(c *Config) { c.PollInterval = 50 * time.Millisecond })
	ctx := context.Background()
	srv, _, err := e.client.CreateServer(ctx, e.createReq("n1"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(lag + 300*time.Millisecond) // every read shows the order's tags
	if _, err := e.client.SetTag(ctx, zone, srv.ID, "a", "1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the write's state is no longer fresh (maxAge 200ms)
	if _, err := e.client.SetTag(ctx, zone, srv.ID, "b", "2"); err != nil {
		t.Fatal(err)
	}
	st, _ := e.sim.Server(srv.ID)
	if !HasTags(st.Tags, "a=1", "b=2") {
		t.Fatalf("tags %v: the second edit lost the first (it started from a lagging read)", st.Tags)
	}
}

// A listing's state is never the base of a tag edit: after a restart, a
// listing taken within the lag of the previous process's last write shows
// the server without it, and an edit based on it wrote the old list back.
func TestTagEditsNeverStartFromAListing(t *testing.T) {
	const lag = 2 * time.Second
	e := startSim(t, 1, func(o *scwsim.Options) { o.StaleLag = lag }, nil)
	ctx := context.Background()
	// The previous process ordered the server and, just before it died, tagged it.
	old := e.client
	srv, _, err := old.CreateServer(ctx, e.createReq("n1"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(lag + 300*time.Millisecond)
	if _, err := old.SetTag(ctx, zone, srv.ID, "old", "1"); err != nil {
		t.Fatal(err)
	}
	// The restarted process lists (the listing lags: no "old") and edits.
	restarted := newTestClient(t, old.cfg).client
	list, err := restarted.ListServers(ctx, zone, nil)
	if err != nil || len(list) != 1 || HasTags(list[0].Tags, "old=1") {
		t.Fatalf("the listing should lag: %v %v", list, err)
	}
	if _, err := restarted.SetTag(ctx, zone, srv.ID, "mine", "1"); err != nil {
		t.Fatal(err)
	}
	st, _ := e.sim.Server(srv.ID)
	if !HasTags(st.Tags, "old=1", "mine=1") {
		t.Fatalf("tags %v: the edit started from the lagging listing and dropped the previous process's tag", st.Tags)
	}
}
