package scaleway

import (
	"context"
	"slices"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
)

// Tag writes right after an order or another write start from the server
// those returned: no GetServer before each PATCH. Past the freshness bound
// the server is read again.
func TestTagWritesReuseTheServerJustSeen(t *testing.T) {
	env, srv := orderWithSlowPolls(t, "nc-seen")
	ctx := context.Background()
	env.resetCalls(t)
	if _, err := env.client.SetTag(ctx, zone, srv.ID, TagPhase, "rescue"); err != nil {
		t.Fatal(err)
	}
	got, err := env.client.EditTags(ctx, zone, srv.ID, func(tags []string) ([]string, bool) {
		return SetTagIn(tags, "karpenter-scaleway-em/rescue-boot", "install")
	})
	if err != nil {
		t.Fatal(err)
	}
	if again, err := env.client.RecentServer(ctx, zone, srv.ID); err != nil || !slices.Equal(again.Tags, got.Tags) {
		t.Fatalf("RecentServer after a write: %v, %v; want the written tags %v", again, err, got.Tags)
	}
	if gets, patches := env.count(t, "GET", serverRE), env.count(t, "PATCH", serverRE); gets != 0 || patches != 2 {
		t.Errorf("two tag writes after the order: %d GET, %d PATCH; want 0 GET, 2 PATCH:\n%v", gets, patches, env.sim.CallsForServer(srv.ID))
	}
	want := []string{Tag(TagManagedBy, cluster), Tag(TagNodeClaim, "nc-seen"), Tag(TagPhase, "rescue"), "karpenter-scaleway-em/rescue-boot=install"}
	for _, w := range want {
		if !slices.Contains(got.Tags, w) {
			t.Errorf("tags %v lack %s: a write lost an earlier one", got.Tags, w)
		}
	}

	// Older than four poll intervals: read again before writing.
	env.clock.advance(4*time.Hour + time.Second)
	env.resetCalls(t)
	if _, err := env.client.SetTag(ctx, zone, srv.ID, TagPhase, "imaging"); err != nil {
		t.Fatal(err)
	}
	if gets := env.count(t, "GET", serverRE); gets != 1 {
		t.Errorf("a tag write long after the last read: %d GET, want 1", gets)
	}
	env.clock.advance(4*time.Hour + time.Second)
	env.resetCalls(t)
	if _, err := env.client.RecentServer(ctx, zone, srv.ID); err != nil {
		t.Fatal(err)
	}
	if gets := env.count(t, "GET", serverRE); gets != 1 {
		t.Errorf("RecentServer long after the last read: %d GET, want 1", gets)
	}
}

// A state older by the API's updated_at (a list answered before our write
// reached the API) never replaces a newer one, nor a read with the same
// updated_at our write's answer; after a failed call the state is read
// again before use, and an older answer does not make it usable again.
func TestSeenServersKeepTheNewest(t *testing.T) {
	now := time.Now()
	t0, t1 := now.Add(-time.Minute), now
	srv := func(phase string, at *time.Time) *baremetal.Server {
		return &baremetal.Server{ID: "a", Zone: zone, Tags: []string{"phase=" + phase}, UpdatedAt: at}
	}
	var s seenServers
	want := func(what, phase string) {
		t.Helper()
		got, ok := s.fresh(zone, "a", now)
		if phase == "" {
			if ok {
				t.Errorf("%s: state %v served, want a read first", what, got.Tags)
			}
			return
		}
		if !ok || !slices.Equal(got.Tags, []string{"phase=" + phase}) {
			t.Errorf("%s: fresh = %v, %v; want phase=%s", what, got, ok, phase)
		}
	}
	s.maxAge = time.Minute
	s.observe(srv("rescue", &t1), now, true)
	s.observe(srv("ordered", &t0), now, false)
	want("an older list after a write", "rescue")
	s.observe(srv("ordered", &t1), now, false)
	want("a list with the write's updated_at", "rescue")
	if _, ok := s.fresh(zone, "a", now.Add(time.Minute+time.Second)); ok {
		t.Error("a state older than maxAge is still served")
	}
	s.forget(zone, "a")
	want("after a failed call", "")
	s.observe(srv("ordered", &t0), now, false)
	want("an older list after a failed call", "")
	t2 := now.Add(time.Second)
	s.observe(srv("imaging", &t2), now, false)
	want("a newer read after a failed call", "imaging")

	off := seenServers{}
	off.observe(&baremetal.Server{ID: "b", Zone: zone}, now, false)
	if _, ok := off.fresh(zone, "b", now); ok {
		t.Error("a zero maxAge serves states")
	}
}

// A server whose deletion this client saw accepted stays "being deleted"
// however long ago (cloudprovider.Delete answers NodeClaimNotFound without
// a read); one read as gone afterwards is no longer reported so.
func TestSeenDeletingAfterDelete(t *testing.T) {
	env, srv := orderWithSlowPolls(t, "nc-del")
	ctx := context.Background()
	if env.client.SeenDeleting(zone, srv.ID) {
		t.Fatal("a server just ordered is reported as being deleted")
	}
	if _, err := env.client.DeleteServer(ctx, zone, srv.ID); err != nil {
		t.Fatal(err)
	}
	env.clock.advance(24 * time.Hour)
	if !env.client.SeenDeleting(zone, srv.ID) {
		t.Fatal("a server whose deletion was accepted is not reported as being deleted a day later")
	}
	for {
		if _, ok := env.sim.Server(srv.ID); !ok {
			break
		}
		time.Sleep(10 * time.Millisecond) // the simulator's deletion delay
	}
	if _, err := env.client.GetServer(ctx, zone, srv.ID); !IsNotFound(err) {
		t.Fatalf("GetServer after the deletion: %v, want not found", err)
	}
	if env.client.SeenDeleting(zone, srv.ID) {
		t.Error("a server read as gone is still reported as being deleted")
	}
}

// orderWithSlowPolls orders a server against the simulator with a one-hour
// poll interval: seen states stay fresh until the test moves the clock.
func orderWithSlowPolls(t *testing.T, nodeclaim string) (*simEnv, *baremetal.Server) {
	t.Helper()
	env := startSim(t, 1, nil, func(c *Config) { c.PollInterval = time.Hour })
	srv, _, err := env.client.CreateServer(context.Background(), env.createReq(nodeclaim))
	if err != nil {
		t.Fatal(err)
	}
	return env, srv
}
