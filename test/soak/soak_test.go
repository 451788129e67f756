package soak

import (
	"context"
	"testing"
	"time"
)

// fixedSeeds run in `make test`: together they order hourly and monthly
// servers, lose the answers of orders, reboots and deletes, switch a warm
// pool on, set minimumLifetime, read through stale listings and reads by
// ID (4 and 8 s), kill replicas and change leaders twice (seed 4 holds an
// order's answer from the leader, then freezes it unless a kill 4 s later
// takes it first; seed 8 kills the leader), in about a minute and a half
// each (3 minutes together). The long runs are `make soak`.
var fixedSeeds = []uint64{4, 8}

// TestSoakFixedSeeds plays a few fixed schedules against the real
// controller and checks every invariant over the ledger. A failure prints
// the seed to replay: make soak SEEDS=<seed>.
func TestSoakFixedSeeds(t *testing.T) {
	for _, seed := range fixedSeeds {
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
		r := Run(ctx, seed, Options{Dir: t.TempDir(), Logf: t.Logf})
		cancel()
		t.Log(Line(r))
		if r.Err != nil || len(r.Violations) > 0 {
			t.Errorf("seed %d broke (replay: make soak SEEDS=%d):\n%s", seed, seed, Line(r))
		}
	}
}
