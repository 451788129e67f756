package soak

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/invariants"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// A violation reaches the output: the checker fed a ledger where one
// NodeClaim got two orders (an order whose answer was lost, ordered again)
// makes the soak print the seed, I1 and both ledger lines, count it in the
// last line and exit 1; a clean schedule prints ok and exits 0.
func TestSoakReportsAViolation(t *testing.T) {
	at := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	tags := []string{"karpenter.sh/managed-by=soak", "karpenter-scaleway-em/nodeclass=main", "karpenter.sh/nodeclaim=main-abcde"}
	ledger := []scwsim.LedgerEntry{
		{Seq: 1, At: at, Kind: scwsim.LedgerOrder, Server: "s1", Zone: Zone, Offer: "EM-A116X-SSD", Period: "hourly", Tags: tags},
		{Seq: 2, At: at.Add(time.Minute), Kind: scwsim.LedgerOrder, Server: "s2", Zone: Zone, Offer: "EM-A116X-SSD", Period: "hourly", Tags: tags},
	}
	vs := invariants.Check(ledger, invariants.Facts{Cluster: "soak"})
	if len(vs) != 1 || vs[0].Invariant != "I1" {
		t.Fatalf("the checker found %v, want one I1", vs)
	}
	fake := func(_ context.Context, seed uint64, _ Options) Result {
		r := Result{Seed: seed, Schedule: Generate(seed), Orders: 2, Claims: 1, Duration: time.Minute}
		if seed == 13 {
			r.Violations = vs
		}
		return r
	}
	var out strings.Builder
	code := Main(context.Background(), []string{"-seeds", "12-13"}, &out, fake)
	text := out.String()
	if code != 1 {
		t.Errorf("exit status %d, want 1:\n%s", code, text)
	}
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	for _, want := range []string{"seed 12: ok (", "seed 13: 1 violations (", "  seed 13 I1: nodeclaim main-abcde had 2 servers",
		"#1 12:00:00.000 order  s1 ", "#2 12:01:00.000 order  s2 "} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "soak: 2 schedules, 1 violations (") || !strings.HasSuffix(last, ")") {
		t.Errorf("last line %q, want soak: 2 schedules, 1 violations (<duration>)", last)
	}

	out.Reset()
	if code := Main(context.Background(), []string{"-seeds", "12"}, &out, fake); code != 0 {
		t.Errorf("a clean schedule: exit status %d, want 0:\n%s", code, out.String())
	}
	out.Reset()
	failed := func(_ context.Context, seed uint64, _ Options) Result {
		return Result{Seed: seed, Err: errors.New("world: kube-apiserver did not start")}
	}
	if code := Main(context.Background(), []string{"-seeds", "5"}, &out, failed); code != 1 || !strings.Contains(out.String(), "seed 5: error: world:") {
		t.Errorf("a run that failed: exit status %d, want 1 and the error:\n%s", code, out.String())
	}
}

// The spend limits are judged per stretch of constant limits, the first
// moments after a change against the looser of the two.
func TestLimitsAreJudgedPerStretch(t *testing.T) {
	at := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	order := func(seq int, d time.Duration, id string) scwsim.LedgerEntry {
		return scwsim.LedgerEntry{Seq: seq, At: at.Add(d), Kind: scwsim.LedgerOrder, Server: id, Zone: Zone, Offer: "EM-B111X-SATA",
			Period: "hourly", PricePerHour: 0.263, Tags: []string{"karpenter-scaleway-em/nodeclass=main"}}
	}
	ledger := []scwsim.LedgerEntry{order(1, 0, "s1"), order(2, 30*time.Second, "s2"), order(3, 62*time.Second, "s3")}
	limits := []limitsAt{{at: at}, {at: at.Add(time.Minute), lim: invariants.Limits{Hourly: 0.3}}}
	if vs := limitViolations(ledger, limits); len(vs) != 0 {
		t.Errorf("orders before the limit, or just after it under the old one: %v", vs)
	}
	limits = []limitsAt{{at: at}, {at: at.Add(10 * time.Second), lim: invariants.Limits{Hourly: 0.3}}}
	vs := limitViolations(ledger, limits)
	if len(vs) != 2 || vs[0].Server != "s2" || vs[1].Server != "s3" {
		t.Errorf("two orders over a limit of 0.3 EUR/h in force: %v", vs)
	}
	zero := []limitsAt{{at: at, lim: invariants.Limits{MonthlyCommitment: eur("0")}}}
	monthly := order(1, 0, "m1")
	monthly.Period, monthly.PricePerMonth = "monthly", 32.99
	if vs := limitViolations([]scwsim.LedgerEntry{monthly}, zero); len(vs) != 1 {
		t.Errorf("a monthly order under a commitment limit of 0: %v", vs)
	}
}

// -parallel runs schedules side by side, never more than asked, each once,
// and prints each schedule's block whole; a bad value is refused.
func TestSoakParallelRunsEachSeedOnceAtMostNAtATime(t *testing.T) {
	var mu sync.Mutex
	running, most := 0, 0
	seen := map[uint64]int{}
	slow := func(_ context.Context, seed uint64, _ Options) Result {
		mu.Lock()
		running++
		most = max(most, running)
		seen[seed]++
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		r := Result{Seed: seed, Schedule: Generate(seed)}
		if seed == 4 {
			r.Violations = []invariants.Violation{{Invariant: "I4", Detail: "a server billed without an owner"}}
		}
		return r
	}
	var out strings.Builder
	code := Main(context.Background(), []string{"-seeds", "1-9", "-parallel", "3"}, &out, slow)
	if code != 1 {
		t.Errorf("exit status %d, want 1 (seed 4 broke I4):\n%s", code, out.String())
	}
	if most != 3 {
		t.Errorf("%d schedules ran at once, want 3", most)
	}
	for seed := uint64(1); seed <= 9; seed++ {
		if seen[seed] != 1 {
			t.Errorf("seed %d ran %d times, want once", seed, seen[seed])
		}
	}
	text := out.String()
	if !strings.Contains(text, "seed 4: 1 violations (") || !strings.Contains(text, "  seed 4 I4: a server billed without an owner") {
		t.Errorf("the violation's block is not whole:\n%s", text)
	}
	if !strings.Contains(text, "soak: 9 schedules, 1 violations (") {
		t.Errorf("last line wrong:\n%s", text)
	}
	for _, bad := range []string{"0", "17", "x"} {
		out.Reset()
		if code := Main(context.Background(), []string{"-seeds", "1", "-parallel", bad}, &out, slow); code != 2 {
			t.Errorf("-parallel %s: exit status %d, want 2:\n%s", bad, code, out.String())
		}
	}
}

// A world whose stop went wrong after the check (an S3 server killed after
// its grace under load, seed 42) keeps its verdict: the line says so, and
// the soak does not fail for it.
func TestSoakTeardownAfterTheVerdictIsPrintedNotFailed(t *testing.T) {
	slowStop := func(_ context.Context, seed uint64, _ Options) Result {
		return Result{Seed: seed, Schedule: Generate(seed), Teardown: errors.New("versitygw did not stop within 10s of SIGTERM and was killed")}
	}
	var out strings.Builder
	if code := Main(context.Background(), []string{"-seeds", "42"}, &out, slowStop); code != 0 {
		t.Errorf("exit status %d, want 0:\n%s", code, out.String())
	}
	for _, want := range []string{"seed 42: ok (", "  seed 42 teardown (the verdict stands): versitygw did not stop", "soak: 1 schedules, 0 violations ("} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
