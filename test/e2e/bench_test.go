package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/e2e/harness"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// BenchmarkScale50NodeClaims: 50 pods that each need their own node, all at
// once, with the "test" delay profile. Reports the time until every pod is
// bound, the Scaleway API calls per server, and the controller's CPU time
// and peak memory. Run by `make bench`:
//
//	go test -run '^$' -bench Scale -benchtime 1x -timeout 30m ./test/e2e/
func BenchmarkScale50NodeClaims(b *testing.B) {
	const n = 50
	for range b.N {
		e := harness.Start(b, harness.Setup{})
		wl := e.W.RunWorkload(harness.Namespace, "scale", n, "1", "512Mi", true)
		t0 := time.Now()
		deadline := t0.Add(20 * time.Minute)
		for {
			bound, total, err := wl.Bound(e.Ctx)
			if err != nil {
				b.Fatal(err)
			}
			if bound == n && total == n {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("after 20m: %d/%d pods bound; %s", bound, n, e.Summary())
			}
			time.Sleep(100 * time.Millisecond)
		}
		elapsed := time.Since(t0)
		wl.Stop()
		servers := e.W.Sim.Servers()
		calls := len(e.W.Sim.Calls())
		dups := 0
		for _, c := range e.W.Sim.CreatesByTag(world.TagNodeClaim) {
			if c > 1 {
				dups++
			}
		}
		cpu, rss := procStats(b, e.C.Pid())
		b.ReportMetric(elapsed.Seconds(), "s-to-all-bound")
		b.ReportMetric(float64(calls)/float64(len(servers)), "api-calls/server")
		b.ReportMetric(cpu.Seconds(), "controller-cpu-s")
		b.ReportMetric(float64(rss)/(1<<20), "controller-peak-MiB")
		b.Logf("%d pods bound on %d servers in %s; %d API calls (%.1f per server); %d duplicate orders; controller CPU %s, peak RSS %d MiB",
			n, len(servers), elapsed.Round(time.Millisecond), calls, float64(calls)/float64(len(servers)), dups, cpu, rss>>20)
		if dups > 0 {
			b.Errorf("%d NodeClaims got more than one server", dups)
		}
	}
}

// procStats returns a process's CPU time (user+system) and peak RSS from /proc.
func procStats(b *testing.B, pid int) (time.Duration, int64) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatalf("controller stats: %v", err)
	}
	// Fields after the ")" of the command name: utime and stime are 14 and 15.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	cpu := time.Duration(ut+st) * time.Second / 100 // USER_HZ
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatalf("controller stats: %v", err)
	}
	var rss int64
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			rss = kb << 10
		}
	}
	return cpu, rss
}
