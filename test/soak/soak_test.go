package soak

import (
	"context"
	"testing"
	"time"
)

// fixedSeeds run in `make test`: schedules that together order hourly and
// monthly servers, kill the controller and inject lost answers, in about
// a minute and a half each. The long runs are `make soak`.
var fixedSeeds = []uint64{2, 5}

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
