package catalog

import (
	"testing"
	"time"
)

func TestNextIntervalStaysWithinJitter(t *testing.T) {
	c := New(Options{RefreshInterval: 10 * time.Minute, RefreshJitter: 0.1})
	lo, hi := 9*time.Minute, 11*time.Minute
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := c.nextInterval()
		if d < lo || d > hi {
			t.Fatalf("interval %v outside [%v, %v]", d, lo, hi)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Fatalf("only %d distinct intervals in 1000 draws: no jitter", len(seen))
	}
}
