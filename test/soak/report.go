package soak

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
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

// Main is the soak command: it runs the schedules of -seeds one after the
// other with runOne, prints a Line for each, and last
// "soak: N schedules, V violations (<duration>)". It returns the exit
// status: 1 if anything broke or a run failed, 2 on bad flags.
func Main(ctx context.Context, args []string, out io.Writer, runOne func(ctx context.Context, seed uint64, opts Options) Result) int {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(out)
	seedsFlag := fs.String("seeds", "1-10", "seeds to run: a-b (a range) or n (one seed)")
	dir := fs.String("dir", "", "keep the logs of each schedule that broke in <dir>/seed-<n> (default: none kept)")
	verbose := fs.Bool("v", false, "print each schedule before running it, and progress lines")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	seeds, err := ParseSeeds(*seedsFlag)
	if err != nil {
		fmt.Fprintln(out, err)
		return 2
	}
	opts := Options{Dir: *dir}
	if *verbose {
		opts.Logf = func(format string, args ...any) {
			fmt.Fprintf(out, time.Now().UTC().Format("15:04:05 ")+format+"\n", args...)
		}
	}
	start := time.Now()
	ran, violations, failed := 0, 0, false
	for _, seed := range seeds {
		if ctx.Err() != nil {
			break
		}
		if *verbose {
			fmt.Fprint(out, Generate(seed).String())
		}
		r := runOne(ctx, seed, opts)
		ran++
		fmt.Fprint(out, Line(r))
		violations += len(r.Violations)
		failed = failed || r.Err != nil
	}
	// Schedules run, not asked for: an interrupted soak says how far it got.
	fmt.Fprintf(out, "soak: %d schedules, %d violations (%s)\n", ran, violations, time.Since(start).Round(time.Second))
	if violations > 0 || failed || ctx.Err() != nil {
		return 1
	}
	return 0
}
