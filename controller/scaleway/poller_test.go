package scaleway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
)

// TestPollerBatchesWaiters: N servers held in "delivering", N concurrent
// waiters. Every poll round costs exactly the pages of one ListServers,
// whatever N, and no GetServer at all: calls per node stay constant as the
// number of in-flight servers grows.
func TestPollerBatchesWaiters(t *testing.T) {
	const pageSize = 5
	perRound := map[int]float64{}
	for _, n := range []int{1, 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			env := startSim(t, 1, nil, func(c *Config) { c.PollInterval = 20 * time.Millisecond; c.PageSize = pageSize })
			env.clock.sleep.Store(true)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			stuck := env.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStuck, State: "delivering", Tag: Tag(TagManagedBy, cluster)})
			ids := make([]string, n)
			for i := range ids {
				srv, _, err := env.client.CreateServer(ctx, env.createReq(fmt.Sprintf("nc-%d", i)))
				if err != nil {
					t.Fatal(err)
				}
				ids[i] = srv.ID
			}
			env.resetCalls(t)
			poller := env.client.NewPoller(Tag(TagManagedBy, cluster))
			defer poller.Close()
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for _, id := range ids {
				wg.Add(1)
				go func(id string) {
					defer wg.Done()
					srv, err := poller.WaitFor(ctx, zone, id, StatusIs(baremetal.ServerStatusReady))
					if err == nil && (srv.ID != id || srv.Status != baremetal.ServerStatusReady) {
						err = fmt.Errorf("got %s in %s", srv.ID, srv.Status)
					}
					errs <- err
				}(id)
			}
			// Let several rounds see every waiter blocked, then deliver.
			for env.counter(t, MetricPollerLists, nil) < 3 || env.counter(t, MetricPollerWaiters, nil) < float64(n) {
				time.Sleep(5 * time.Millisecond)
			}
			env.sim.RemoveFault(stuck)
			wg.Wait()
			waitIdle(poller)
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			rounds := env.counter(t, MetricPollerLists, map[string]string{"zone": string(zone)})
			pages := float64((n + pageSize - 1) / pageSize)
			lists := float64(env.count(t, "GET", serversRE))
			if gets := env.count(t, "GET", serverRE); gets != 0 {
				t.Fatalf("%d GetServer calls: polling is not batched", gets)
			}
			if lists != rounds*pages {
				t.Fatalf("%v list calls for %v rounds of %v pages", lists, rounds, pages)
			}
			if rounds < 4 {
				t.Fatalf("only %v rounds", rounds)
			}
			if env.counter(t, MetricPollerWaiters, nil) != 0 {
				t.Fatal("waiters gauge not back to 0")
			}
			perRound[n] = lists / rounds / float64(n)
		})
	}
	// Calls per node per round fall as nodes grow (pages of 5: 1 vs 4/20).
	if perRound[20] >= perRound[1] {
		t.Fatalf("calls per node per round: %v", perRound)
	}
}

// A server missing from the list (here: one without the selector tag)
// costs at most one GetServer per round; a deleted one ends the wait with NotFound.
func TestPollerMissingServers(t *testing.T) {
	env := startSim(t, 1, nil, func(c *Config) { c.PollInterval = 20 * time.Millisecond })
	env.clock.sleep.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := env.createReq("untagged")
	req.Tags = []string{Tag(TagNodeClaim, "untagged")}
	foreign, _, err := env.client.CreateServer(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	poller := env.client.NewPoller(Tag(TagManagedBy, cluster))
	defer poller.Close()
	env.resetCalls(t)
	srv, err := poller.WaitFor(ctx, zone, foreign.ID, StatusIs(baremetal.ServerStatusReady))
	if err != nil || srv.Status != baremetal.ServerStatusReady {
		t.Fatalf("WaitFor: %v", err)
	}
	waitIdle(poller)
	rounds := env.counter(t, MetricPollerLists, nil)
	if gets := env.count(t, "GET", serverRE); gets < 1 || float64(gets) > rounds {
		t.Fatalf("%d GetServer for %v rounds: want at most one per round", gets, rounds)
	}

	if _, err := env.client.DeleteServer(ctx, zone, foreign.ID); err != nil {
		t.Fatal(err)
	}
	_, err = poller.WaitFor(ctx, zone, foreign.ID, func(*baremetal.Server) (bool, error) { return false, nil })
	if !IsNotFound(err) {
		t.Fatalf("deleted server: %v", err)
	}
	if _, err := poller.Get(ctx, zone, foreign.ID, 0); !IsNotFound(err) {
		t.Fatalf("Get of a deleted server: %v", err)
	}
}

func TestPollerGetFreshness(t *testing.T) {
	env := startSim(t, 1, nil, func(c *Config) { c.PollInterval = time.Hour })
	env.clock.sleep.Store(true)
	ctx := context.Background()
	srv, _, err := env.client.CreateServer(ctx, env.createReq("nc-g"))
	if err != nil {
		t.Fatal(err)
	}
	poller := env.client.NewPoller(Tag(TagManagedBy, cluster))
	defer poller.Close()
	env.resetCalls(t)
	// No list yet: Get triggers one at once (not after the hour-long interval).
	got, err := poller.Get(ctx, zone, srv.ID, time.Minute)
	if err != nil || got.ID != srv.ID {
		t.Fatal(err)
	}
	// Fresh enough: served from the last list, no call.
	if _, err := poller.Get(ctx, zone, srv.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	if n := env.count(t, "", ""); n != 1 {
		t.Fatalf("%d calls, want 1", n)
	}
	// maxAge 0 demands a new list.
	if _, err := poller.Get(ctx, zone, srv.ID, 0); err != nil {
		t.Fatal(err)
	}
	if n := env.count(t, "GET", serversRE); n != 2 {
		t.Fatalf("%d lists, want 2", n)
	}
}

func TestPollerErrors(t *testing.T) {
	t.Run("server error state", func(t *testing.T) {
		env := startSim(t, 1, nil, func(c *Config) { c.PollInterval = 20 * time.Millisecond })
		env.clock.sleep.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		env.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultServerError, State: "delivering"})
		srv, _, err := env.client.CreateServer(ctx, env.createReq("nc-err"))
		if err != nil {
			t.Fatal(err)
		}
		poller := env.client.NewPoller(Tag(TagManagedBy, cluster))
		defer poller.Close()
		_, err = poller.WaitFor(ctx, zone, srv.ID, StatusIs(baremetal.ServerStatusReady))
		var se *ServerStateError
		if !errors.As(err, &se) || se.Status != baremetal.ServerStatusError {
			t.Fatalf("want ServerStateError, got %v", err)
		}
	})
	t.Run("permission error ends the wait, 5xx is waited out", func(t *testing.T) {
		env := startSim(t, 1, nil, func(c *Config) { c.PollInterval = 20 * time.Millisecond; c.Retry.MaxAttempts = 1 })
		env.clock.sleep.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		srv, _, err := env.client.CreateServer(ctx, env.createReq("nc-p"))
		if err != nil {
			t.Fatal(err)
		}
		poller := env.client.NewPoller(Tag(TagManagedBy, cluster))
		defer poller.Close()
		five := env.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Method: "GET", Path: `/servers$`, Status: 503, Times: 3})
		if _, err := poller.WaitFor(ctx, zone, srv.ID, StatusIs(baremetal.ServerStatusReady)); err != nil {
			t.Fatalf("5xx rounds should be waited out: %v", err)
		}
		if env.sim.FaultHits(five) != 3 {
			t.Fatalf("fault hit %d times", env.sim.FaultHits(five))
		}
		env.sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Method: "GET", Path: `/servers$`, Status: 403,
			Body: `{"details":[{"action":"read","resource":"baremetal"}],"message":"insufficient permissions","type":"permissions_denied"}`})
		_, err = poller.WaitFor(ctx, zone, srv.ID, StatusIs(baremetal.ServerStatusStopped))
		if !IsPermissionDenied(err) {
			t.Fatalf("want permission denied, got %v", err)
		}
	})
	t.Run("caller deadline", func(t *testing.T) {
		env := startSim(t, 1, nil, func(c *Config) { c.PollInterval = 20 * time.Millisecond })
		env.clock.sleep.Store(true)
		srv, _, err := env.client.CreateServer(context.Background(), env.createReq("nc-d"))
		if err != nil {
			t.Fatal(err)
		}
		poller := env.client.NewPoller(Tag(TagManagedBy, cluster))
		defer poller.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err = poller.WaitFor(ctx, zone, srv.ID, StatusIs(baremetal.ServerStatusStopped))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("want deadline exceeded, got %v", err)
		}
	})
}

// waitIdle returns once every zone loop has finished its round and stopped
// (it stops by itself when nobody waits).
func waitIdle(p *Poller) {
	for {
		busy := false
		p.mu.Lock()
		for _, z := range p.zones {
			z.mu.Lock()
			busy = busy || z.running
			z.mu.Unlock()
		}
		p.mu.Unlock()
		if !busy {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}
