package scaleway

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkPollerRound: one batched poll round with N servers in flight and
// N waiters. Reports API calls per round and per server: with 100 servers a
// page it stays at 1 call per round whatever N (up to a page), where
// per-server polling would cost N.
func BenchmarkPollerRound(b *testing.B) {
	for _, n := range []int{1, 20, 100} {
		b.Run(fmt.Sprintf("servers=%d", n), func(b *testing.B) {
			env := startSim(b, 1000, nil, func(c *Config) { c.PollInterval = time.Hour; c.RateLimit = RateLimit{PerSecond: 1e6, Burst: 1e6} })
			env.clock.sleep.Store(true)
			ctx := context.Background()
			ids := make([]string, n)
			for i := range ids {
				srv, _, err := env.client.CreateServer(ctx, env.createReq(fmt.Sprintf("bench-%d", i)))
				if err != nil {
					b.Fatal(err)
				}
				ids[i] = srv.ID
			}
			poller := env.client.NewPoller(Tag(TagManagedBy, cluster))
			defer poller.Close()
			env.resetCalls(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// All N waiters ask for a list started after this iteration
				// began: they share one round.
				start := time.Now()
				var wg sync.WaitGroup
				for _, id := range ids {
					wg.Add(1)
					go func(id string) {
						defer wg.Done()
						if _, err := poller.Get(ctx, zone, id, time.Since(start)); err != nil {
							b.Error(err)
						}
					}(id)
				}
				wg.Wait()
			}
			b.StopTimer()
			env.settle(b)
			calls, _ := env.sim.CountCalls("", "")
			b.ReportMetric(float64(calls)/float64(b.N), "calls/round")
			b.ReportMetric(float64(calls)/float64(b.N)/float64(n), "calls/server/round")
		})
	}
}
