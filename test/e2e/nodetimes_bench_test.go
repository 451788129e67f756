package e2e

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/e2e/harness"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/nodetimes"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// BenchmarkRealisticNodeTimes: the realistic delay profile (delivery ~4.5
// min, reboots ~2.5 min, 10% jitter), a monthly NodePool, measured in one run
// for each boot mode of BENCH_KEXEC (default "on,off,refused"): on is
// spec.boot Auto on rescue kernels that allow kexec, off is spec.boot Reboot,
// refused is Auto on rescue kernels that refuse kexec (the fallback to
// Scaleway's reboot). Each mode has its own world (simulator, API server,
// controller), and the modes run at the same time: the run mostly waits on
// simulated Scaleway delays, so three worlds take the wall time of one. The
// last lines are one table: pre-imaged spare to Ready and new server to Ready
// per mode.
//
// In each world, wave 1: BENCH_NODES
// (default 3) pods, one per node, on new servers (the cold path). Then the
// pods go, Karpenter consolidates, the servers stay as spares (monthly); once
// each spare is pre-imaged or quiet (ready, tags and status unchanged for
// BENCH_SPARE_QUIET, default 150s: longer than the controller's default GC
// interval, 2m, on which a background pre-imaging sweeps), wave 2 brings the
// same pods back: their NodeClaims take the spares. For each node it prints
// the time to Ready split into Scaleway's share (delivery, reboots), the
// node's own boot and join (as simulated) and the provider's overhead, the
// phases it went through and the API calls about its server.
//
// BENCH_SCALE multiplies the simulator's delays (default 1: real time, about
// 20 minutes in all). With BENCH_SCALE=0.1 it takes about 3 minutes: Scaleway's
// share is printed scaled back (divided by the scale), the provider's overhead
// as measured. The provider's poll cadence does not scale: a cadence tuned to
// real durations shows more overhead at a small scale than it would at 1.
//
//	go test -run '^$' -bench RealisticNodeTimes -benchtime 1x -timeout 90m ./test/e2e/
func BenchmarkRealisticNodeTimes(b *testing.B) {
	scale := envFloat(b, "BENCH_SCALE", 1)
	n := int(envFloat(b, "BENCH_NODES", 3))
	quiet := time.Duration(envFloat(b, "BENCH_SPARE_QUIET", 150) * float64(time.Second))
	modes := benchKexecModes(b)
	for range b.N {
		figures := make([]modeFigures, len(modes))
		var wg sync.WaitGroup
		for k, m := range modes {
			wg.Add(1)
			go func() {
				// A Fatalf in a world ends this goroutine only; its
				// figures stay empty and the table says so.
				defer wg.Done()
				figures[k] = realisticNodeTimes(b, m, scale, n, quiet)
			}()
		}
		wg.Wait()
		fmt.Printf("%s", modeTable(modes, figures, scale))
	}
}

// benchKexecMode is one boot mode the benchmark measures.
type benchKexecMode string

// benchKexecModes reads BENCH_KEXEC: a comma-separated list of on, off and
// refused (default all three).
func benchKexecModes(b *testing.B) []benchKexecMode {
	v := os.Getenv("BENCH_KEXEC")
	if v == "" {
		v = "on,off,refused"
	}
	var out []benchKexecMode
	for _, m := range strings.Split(v, ",") {
		switch m = strings.TrimSpace(m); m {
		case "on", "off", "refused":
			out = append(out, benchKexecMode(m))
		default:
			b.Fatalf("BENCH_KEXEC=%q: want a list of on, off, refused", v)
		}
	}
	return out
}

// setup is the world of mode m: the monthly NodeClass and NodePool, and the
// boot mode.
func (m benchKexecMode) setup(scale float64) harness.Setup {
	return harness.Setup{
		World: world.Options{Profile: scwsim.ProfileRealistic, Sim: func(o *scwsim.Options) {
			o.Scale = scale
			if m == "refused" {
				o.Kexec = map[string]string{"*": scwsim.KexecDisabled}
			}
		}},
		Zones:   []string{"fr-par-2"},
		Timeout: 100 * time.Minute,
		NodeClass: func(nc *v1alpha1.ScalewayElasticMetalNodeClass) {
			nc.Spec.Billing = v1alpha1.BillingSpec{Periods: []string{"monthly"}, MinimumLifetime: &metav1.Duration{Duration: 24 * time.Hour}}
			if m == "off" {
				nc.Spec.Boot = v1alpha1.BootReboot
			}
		},
		Reqs: []corev1.NodeSelectorRequirement{{Key: catalog.LabelBillingPeriod, Operator: corev1.NodeSelectorOpIn, Values: []string{"monthly"}}},
	}
}

// modeFigures are one mode's times to Ready (projected to real time) of
// new servers (cold) and of spares.
type modeFigures struct {
	cold, spare []time.Duration
}

// modeTable is the summary: per mode, the median and the most of each path.
func modeTable(modes []benchKexecMode, figures []modeFigures, scale float64) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "boot modes measured in one run (realistic profile x%g, each mode its own world, at the same time):\n", scale)
	fmt.Fprintf(&sb, "| kexec | pre-imaged spare to Ready (median / max) | new server to Ready (median / max) |\n|---|---|---|\n")
	cell := func(v []time.Duration) string {
		if len(v) == 0 {
			return "none Ready"
		}
		m, x := nodetimes.Stats(v)
		return nodetimes.Fmt(m) + " / " + nodetimes.Fmt(x)
	}
	for k, m := range modes {
		fmt.Fprintf(&sb, "| %s | %s | %s |\n", m, cell(figures[k].spare), cell(figures[k].cold))
	}
	return sb.String()
}

// realisticNodeTimes runs the two waves in mode m's world and prints its
// details, each line led by the mode.
func realisticNodeTimes(b *testing.B, m benchKexecMode, scale float64, n int, quiet time.Duration) (fig modeFigures) {
	// Printed, not b.Logf: a benchmark's log is cut to a few lines.
	report := func(format string, args ...any) {
		fmt.Print(prefixLines("["+string(m)+"] ", fmt.Sprintf(format, args...)) + "\n")
	}
	e := harness.Start(b, m.setup(scale))
	long := time.Duration(float64(40*time.Minute)*scale) + 10*time.Minute

	report("realistic profile, kexec %s, simulator delays x%g; wave 1: %d pods, one per node, on new monthly servers", m, scale, n)
	t1 := time.Now()
	wl := e.Run("wave", n, "1", "512Mi", true)
	e.WaitBound("wave", n, long)
	wave1 := time.Since(t1)
	orders1 := orders(e)

	report("wave 1 bound in %s; removing the pods: consolidation keeps the monthly servers as spares", nodetimes.Fmt(wave1))
	wl.ScaleTo(0)
	waitQuietSpares(e, n, quiet, long)

	t2 := time.Now()
	wl.ScaleTo(n)
	e.WaitBound("wave", n, long)
	wave2 := time.Since(t2)
	orders2 := orders(e) - orders1

	e.Track.Stop()
	calls := e.W.Sim.Calls()
	var lives []nodetimes.Life
	for _, tl := range e.Track.Timelines() {
		lives = append(lives, nodetimes.Lives(tl, calls)...)
	}
	report("wave 1: %d new orders, pods bound after %s; wave 2: %d new orders, pods bound after %s (real time)",
		orders1, nodetimes.Fmt(wave1), orders2, nodetimes.Fmt(wave2))
	sort.SliceStable(lives, func(i, j int) bool {
		return !lives[i].Reused && lives[j].Reused || lives[i].Reused == lives[j].Reused && lives[i].Start.Before(lives[j].Start)
	})
	report("%s", nodetimes.Table(lives, scale))
	for _, reused := range []bool{false, true} {
		var total, over []time.Duration
		var ncalls []int
		for _, l := range lives {
			if l.Reused == reused && !l.Ready.IsZero() {
				total = append(total, l.Projected(scale))
				over = append(over, l.Provider)
				ncalls = append(ncalls, len(l.Calls))
			}
		}
		name := "cold"
		if reused {
			name = "spare"
		}
		if len(total) == 0 {
			b.Errorf("no %s node became Ready", name)
			continue
		}
		mt, xt := nodetimes.Stats(total)
		mo, xo := nodetimes.Stats(over)
		mc, xc := nodetimes.Stats(ncalls)
		report("%s: time to Ready median %s max %s; provider overhead median %s max %s; API calls to Ready median %d max %d",
			name, nodetimes.Fmt(mt), nodetimes.Fmt(xt), nodetimes.Fmt(mo), nodetimes.Fmt(xo), mc, xc)
		if reused {
			fig.spare = total
		} else {
			fig.cold = total
		}
	}
	perServer := map[string][]scwsim.Call{}
	for _, c := range calls {
		if c.ServerID != "" {
			perServer[c.ServerID] = append(perServer[c.ServerID], c)
		}
	}
	var whole []int
	for id, cs := range perServer {
		whole = append(whole, len(cs))
		report("server %s, both lives and the keep as a spare: %d calls: %s", id[:8], len(cs), nodetimes.Kinds(cs))
	}
	mw, xw := nodetimes.Stats(whole)
	report("API calls per server over the run (order, install, spare, reuse): median %d max %d", mw, xw)
	if orders2 != 0 {
		b.Errorf("wave 2 ordered %d servers; want 0 (the spares)", orders2)
	}
	e.AssertNoDuplicateOrders()
	return fig
}

// prefixLines leads every line of s with p.
func prefixLines(p, s string) string {
	return p + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+p)
}

// waitQuietSpares waits until n servers are spares, each pre-imaged or
// ready with tags and status unchanged for quiet (nodetimes.Spares).
func waitQuietSpares(e *harness.Env, n int, quiet, timeout time.Duration) {
	var w nodetimes.Spares
	e.Eventually(fmt.Sprintf("%d spares quiet for %s", n, quiet), timeout, func() (bool, string) {
		spares, settled := w.Quiet(e.W.Sim.Servers(), quiet)
		return settled >= n, fmt.Sprintf("%d spares, %d quiet", spares, settled)
	})
}

func envFloat(b *testing.B, key string, def float64) float64 {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 {
		b.Fatalf("%s=%q: want a positive number", key, v)
	}
	return f
}
