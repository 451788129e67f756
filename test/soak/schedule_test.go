package soak

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// A schedule is a pure function of its seed: the same seed gives the same
// schedule, different seeds differ, and the fault kinds the soak promises
// all come up within a hundred seeds.
func TestScheduleIsAPureFunctionOfTheSeed(t *testing.T) {
	for _, seed := range []uint64{1, 2, 42, 1 << 40} {
		a, b := Generate(seed), Generate(seed)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("seed %d: two schedules differ:\n%s\n%s", seed, a, b)
		}
		if a.String() != b.String() {
			t.Errorf("seed %d: the printed schedules differ", seed)
		}
	}
	seen := map[string]uint64{}
	for seed := uint64(1); seed <= 100; seed++ {
		s := Generate(seed).String()
		if other, ok := seen[s]; ok {
			t.Errorf("seeds %d and %d give the same schedule:\n%s", other, seed, s)
		}
		seen[s] = seed
	}
}

func TestSchedulesCoverEveryFault(t *testing.T) {
	kinds := map[Kind]bool{}
	faults := map[scwsim.FaultKind]bool{}
	var lag, stale, staleByID, broken, monthly, hourly, poolOff bool
	shapes := map[string]bool{}
	for seed := uint64(1); seed <= 100; seed++ {
		s := Generate(seed)
		lag = lag || s.ListLag > 0
		stale = stale || s.StaleLag > 0
		staleByID = staleByID || s.StaleReadsByID
		broken = broken || s.BrokenNodeClass
		monthly = monthly || slices.Contains(s.Periods, "monthly")
		hourly = hourly || slices.Contains(s.Periods, "hourly")
		var prev Action
		for i, a := range s.Actions {
			kinds[a.Kind] = true
			if a.Kind == KindFault {
				faults[a.Fault.Kind] = true
			}
			if a.Kind == KindLeaderChange {
				shapes[a.Shape+"/"+a.Hold] = true
				if _, ok := Holds[a.Hold]; a.Hold != "" && !ok {
					t.Errorf("seed %d: %s holds answers of no known call", seed, a)
				}
				if a.Shape == LeaderPause && a.For <= 15*time.Second {
					t.Errorf("seed %d: %s: frozen no longer than the Lease, the standby never leads", seed, a)
				}
			}
			if a.Kind == KindWarmPool && a.Servers == 0 {
				poolOff = true
			}
			if i > 0 && a.At < prev.At {
				t.Fatalf("seed %d: actions out of order: %s before %s", seed, prev, a)
			}
			if a.At < 0 || a.At > s.Length {
				t.Fatalf("seed %d: %s outside the schedule's %s", seed, a, s.Length)
			}
			prev = a
		}
		if s.Actions[0].Kind != KindPods || s.Actions[0].At != 0 || s.Actions[0].Pods == 0 {
			t.Errorf("seed %d: the first action is %s, want a pod wave at 0", seed, s.Actions[0])
		}
	}
	for _, k := range []Kind{KindPods, KindLimits, KindMinimumLifetime, KindWarmPool, KindFault, KindOutOfStock, KindQuota, KindKill, KindLeaderChange} {
		if !kinds[k] {
			t.Errorf("no schedule of seeds 1-100 has a %s action", k)
		}
	}
	// Every shape of a leader change: killed or frozen, plain or with the
	// answers of each kind of call held from it first.
	for _, shape := range []string{LeaderKill, LeaderPause} {
		for _, hold := range append([]string{""}, holdNames...) {
			if !shapes[shape+"/"+hold] {
				t.Errorf("no schedule of seeds 1-100 has a leader change %s holding %q", shape, hold)
			}
		}
	}
	want := append([]scwsim.FaultKind{scwsim.FaultStatus, scwsim.FaultRateLimit}, scwsim.AfterCommitKinds...)
	for _, k := range want {
		if !faults[k] {
			t.Errorf("no schedule of seeds 1-100 injects a %s fault", k)
		}
	}
	if !lag || !stale || !staleByID || !broken || !monthly || !hourly || !poolOff {
		t.Errorf("seeds 1-100: list lag %v, stale lag %v, stale reads by ID %v, broken nodeclass %v, monthly %v, hourly %v, warm pool off %v: want all",
			lag, stale, staleByID, broken, monthly, hourly, poolOff)
	}
}

func TestParseSeeds(t *testing.T) {
	for spec, want := range map[string][]uint64{"7": {7}, "1-3": {1, 2, 3}, " 4-4 ": {4}} {
		got, err := ParseSeeds(spec)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseSeeds(%q) = %v, %v; want %v", spec, got, err, want)
		}
	}
	for _, spec := range []string{"", "a", "3-1", "1-", "-2", "1-200000"} {
		if _, err := ParseSeeds(spec); err == nil {
			t.Errorf("ParseSeeds(%q): no error", spec)
		}
	}
}
