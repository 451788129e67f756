package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/e2e/harness"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/nodetimes"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// BenchmarkScale50NodeClaims: 50 pods that each need their own node, all at
// once, with the "test" delay profile. Reports the time until every pod is
// bound, that every node is Ready, NodeClaims against orders (no duplicate),
// the Scaleway API calls per server, and the controller's CPU time and peak
// memory. Run by `make bench`:
//
//	go test -run '^$' -bench Scale -benchtime 1x -timeout 30m ./test/e2e/
func BenchmarkScale50NodeClaims(b *testing.B) {
	const n = 50
	for range b.N {
		// Generous bounds: on a shared 2-core machine 50 installs at once take a while.
		e := harness.Start(b, harness.Setup{Timeout: 45 * time.Minute})
		wl := e.W.RunWorkload(harness.Namespace, "scale", n, "1", "512Mi", true)
		t0 := time.Now()
		deadline := t0.Add(40 * time.Minute)
		for {
			bound, total, err := wl.Bound(e.Ctx)
			if err != nil {
				b.Fatal(err)
			}
			if bound == n && total == n {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("after 40m: %d/%d pods bound; %s", bound, n, e.Summary())
			}
			time.Sleep(100 * time.Millisecond)
		}
		elapsed := time.Since(t0)
		ready := 0
		e.Eventually(fmt.Sprintf("%d nodes Ready", n), harness.WaitLong, func() (bool, string) {
			ready = 0
			for _, node := range e.Nodes() {
				for _, c := range node.Status.Conditions {
					if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			return ready >= n, fmt.Sprintf("%d Ready", ready)
		})
		wl.Stop()
		servers := e.W.Sim.Servers()
		calls := e.W.Sim.Calls()
		claims := len(e.NodeClaims())
		perClaim := e.W.Sim.CreatesByTag(world.TagNodeClaim)
		orders, dups := 0, 0
		for _, c := range perClaim {
			orders += c
			if c > 1 {
				dups++
			}
		}
		var perServer []int
		var most []scwsim.Call
		for _, s := range servers {
			cs := e.W.Sim.CallsForServer(s.ID)
			perServer = append(perServer, len(cs))
			if len(cs) > len(most) {
				most = cs
			}
		}
		med, mx := nodetimes.Stats(perServer)
		cpu, rss := procStats(b, e.C.Pid())
		b.ReportMetric(elapsed.Seconds(), "s-to-all-bound")
		b.ReportMetric(float64(len(calls))/float64(len(servers)), "api-calls/server")
		b.ReportMetric(float64(mx), "max-calls-about-a-server")
		b.ReportMetric(cpu.Seconds(), "controller-cpu-s")
		b.ReportMetric(float64(rss)/(1<<20), "controller-peak-MiB")
		// Printed, not b.Logf: a benchmark's log is cut to a few lines.
		// A NodeClaim whose install failed (e.g. a phase timeout under load)
		// is replaced by a new one, which orders its own server: orders are
		// compared with every NodeClaim that ordered, not the live ones.
		fmt.Printf("%d pods bound on %d servers in %s; %d nodes Ready; %d orders for %d NodeClaims (%d live, %d replaced after a failed install, their servers released), %d duplicate orders\n",
			n, len(servers), elapsed.Round(time.Millisecond), ready, orders, len(perClaim), claims, len(perClaim)-claims, dups)
		fmt.Printf("%d API calls in all (%.1f per server, catalogue and GC included); about one server: median %d, max %d (%s)\n",
			len(calls), float64(len(calls))/float64(len(servers)), med, mx, nodetimes.Kinds(most))
		fmt.Printf("controller CPU %s, peak RSS %d MiB (goal < 300 MiB)\n", cpu, rss>>20)
		if dups > 0 {
			b.Errorf("%d orders for %d NodeClaims: %d NodeClaims got more than one server", orders, len(perClaim), dups)
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
