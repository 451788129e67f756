package soak

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Line is what a run prints about one schedule: its seed and result, and
// for each violation the seed again, the invariant and the ledger lines
// that broke it (so that any line of a long log names the seed to replay).
func Line(r Result) string {
	var b strings.Builder
	summary := fmt.Sprintf("%d actions, %d orders, %d nodeclaims, %s", len(r.Schedule.Actions), r.Orders, r.Claims,
		r.Duration.Round(time.Second))
	switch {
	case r.Err != nil:
		fmt.Fprintf(&b, "seed %d: error: %v (%s)\n", r.Seed, r.Err, summary)
	case len(r.Violations) == 0:
		fmt.Fprintf(&b, "seed %d: ok (%s)\n", r.Seed, summary)
	default:
		fmt.Fprintf(&b, "seed %d: %d violations (%s)\n", r.Seed, len(r.Violations), summary)
		for _, v := range r.Violations {
			fmt.Fprintf(&b, "  seed %d %s\n", r.Seed, strings.ReplaceAll(v.String(), "\n", "\n  "))
		}
	}
	if r.Teardown != nil {
		fmt.Fprintf(&b, "  seed %d teardown (the verdict stands): %v\n", r.Seed, r.Teardown)
	}
	if r.Dir != "" && (r.Err != nil || len(r.Violations) > 0) {
		fmt.Fprintf(&b, "  seed %d logs: %s\n", r.Seed, r.Dir)
	}
	return b.String()
}

// ParseSeeds reads "a-b" (a range, both included) or "n" (one seed).
func ParseSeeds(spec string) ([]uint64, error) {
	lo, hi, isRange := strings.Cut(strings.TrimSpace(spec), "-")
	a, err := strconv.ParseUint(lo, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("seeds %q: want a-b or n", spec)
	}
	b := a
	if isRange {
		if b, err = strconv.ParseUint(hi, 10, 64); err != nil || b < a {
			return nil, fmt.Errorf("seeds %q: want a-b with a <= b", spec)
		}
	}
	if b-a >= 100000 {
		return nil, fmt.Errorf("seeds %q: more than 100000 schedules", spec)
	}
	var out []uint64
	for s := a; s <= b; s++ {
		out = append(out, s)
	}
	return out, nil
}

// Main is the soak command: it runs the schedules of -seeds with runOne,
// -parallel of them at a time, prints a Line for each as it ends, and last
// "soak: N schedules, V violations (<duration>)". It returns the exit
// status: 1 if anything broke or a run failed, 2 on bad flags.
func Main(ctx context.Context, args []string, out io.Writer, runOne func(ctx context.Context, seed uint64, opts Options) Result) int {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(out)
	seedsFlag := fs.String("seeds", "1-10", "seeds to run: a-b (a range) or n (one seed)")
	dir := fs.String("dir", "", "keep the logs of each schedule that broke in <dir>/seed-<n> (default: none kept)")
	verbose := fs.Bool("v", false, "print each schedule before running it, and progress lines")
	parallel := fs.Int("parallel", 1, "schedules run at the same time, each in its own world (1-16)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	seeds, err := ParseSeeds(*seedsFlag)
	if err != nil {
		fmt.Fprintln(out, err)
		return 2
	}
	if *parallel < 1 || *parallel > 16 {
		fmt.Fprintf(out, "parallel %d: want 1 to 16\n", *parallel)
		return 2
	}
	p := printer{out: out, verbose: *verbose}
	start := time.Now()
	runAll(ctx, seeds, *parallel, func(seed uint64) {
		p.schedule(seed)
		p.result(runOne(ctx, seed, Options{Dir: *dir, Logf: p.logf(seed)}))
	})
	// Schedules run, not asked for: an interrupted soak says how far it got.
	fmt.Fprintf(out, "soak: %d schedules, %d violations (%s)\n", p.ran, p.violations, time.Since(start).Round(time.Second))
	if p.violations > 0 || p.failed || ctx.Err() != nil {
		return 1
	}
	return 0
}

// runAll calls run for each seed, n at a time, in the seeds' order, and
// starts none once ctx is done. Each schedule has its own world (ports,
// directories, processes), so they only share the machine's cores: a
// schedule's timing faults land where its load puts them, as they do alone.
func runAll(ctx context.Context, seeds []uint64, n int, run func(seed uint64)) {
	next := make(chan uint64)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed := range next {
				run(seed)
			}
		}()
	}
	for _, seed := range seeds {
		if ctx.Err() != nil {
			break
		}
		next <- seed
	}
	close(next)
	wg.Wait()
}

// printer writes the soak's output from concurrent schedules, one whole
// block at a time, and keeps the totals.
type printer struct {
	mu              sync.Mutex
	out             io.Writer
	verbose         bool
	ran, violations int
	failed          bool
}

func (p *printer) schedule(seed uint64) {
	if !p.verbose {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprint(p.out, Generate(seed).String())
}

func (p *printer) result(r Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ran++
	fmt.Fprint(p.out, Line(r))
	p.violations += len(r.Violations)
	p.failed = p.failed || r.Err != nil
}

// logf gives one schedule's progress lines, prefixed with its seed since
// schedules may run side by side (nil when not verbose: none).
func (p *printer) logf(seed uint64) func(format string, args ...any) {
	if !p.verbose {
		return nil
	}
	return func(format string, args ...any) {
		p.mu.Lock()
		defer p.mu.Unlock()
		fmt.Fprintf(p.out, time.Now().UTC().Format("15:04:05 ")+fmt.Sprintf("seed %d: ", seed)+format+"\n", args...)
	}
}
