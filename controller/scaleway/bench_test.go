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

// BenchmarkBare429Storm: one GetServer through a storm of N bare 429s (no
// Retry-After, as Scaleway's gateway sends them) with the default retry
// policy. Reports the time the call waits in all (the clock records the
// waits instead of sleeping) and whether it got through: it does while the
// waits fit in Retry.ThrottleWait (2 min by default).
func BenchmarkBare429Storm(b *testing.B) {
	for _, n := range []int{5, 10, 20, 40} {
		b.Run(fmt.Sprintf("429s=%d", n), func(b *testing.B) {
			var waited time.Duration
			ok := 0
			for i := 0; i < b.N; i++ {
				replies := make([]reply, 0, n+1)
				for range n {
					replies = append(replies, reply{status: 429, ctype: noCtype})
				}
				s := newScripted(b, append(replies, reply{status: 200, body: okServer})...)
				cfg := testConfig(s.srv.URL)
				cfg.Retry = RetryPolicy{} // the defaults
				env := newTestClient(b, cfg)
				if _, err := env.client.GetServer(context.Background(), "", serverID); err == nil {
					ok++
				}
				for _, w := range env.clock.Waits() {
					waited += w
				}
			}
			b.ReportMetric(waited.Seconds()/float64(b.N), "waited-s/call")
			b.ReportMetric(float64(ok)/float64(b.N), "got-through")
		})
	}
}
