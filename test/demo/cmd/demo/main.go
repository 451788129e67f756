// Command demo runs the whole provider against the simulated Scaleway world
// (`make demo`): it starts etcd, kube-apiserver, kube-scheduler, an S3 server
// holding a published Talos-like image, the Elastic Metal API simulator with
// its rescue hosts and Talos API, then bin/karpenter-scaleway-em as a
// deployment would run it; applies examples/general-purpose.yaml, creates
// pending pods, then a second wave of pods as soon as the first wave's
// NodeClaims are launched (their servers still installing), follows every
// server through its phases until the pods are bound, removes the pods and
// follows the servers back to Scaleway. It ends with a summary table and
// exits 0 only if all of that happened, the second wave included.
//
//	make demo                          # fast delays (seconds)
//	DEMO_PROFILE=realistic make demo   # Scaleway-like delays (minutes)
//
// Ctrl-C stops everything it started.
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/nodetimes"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/machine"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

func main() { os.Exit(run()) }

type demo struct {
	out     io.Writer
	start   time.Time
	w       *world.World
	profile string

	mu      sync.Mutex
	mbps    map[string]string // nodeclaim -> last imaging throughput seen
	seenEvt map[string]int32
	config  map[string]string // node -> where its Talos got its config, and the :50000 calls
}

func (d *demo) printf(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "[%7.1fs] "+format+"\n", append([]any{time.Since(d.start).Seconds()}, args...)...)
}

func run() int {
	profile := envOr("DEMO_PROFILE", "fast")
	example := flag.String("example", "", "NodeClass + NodePool YAML (default <repo>/examples/general-purpose.yaml)")
	keep := flag.Bool("keep", false, "keep the world's directory (logs) after the run")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d := &demo{out: os.Stdout, start: time.Now(), profile: profile, mbps: map[string]string{}, seenEvt: map[string]int32{}, config: map[string]string{}}

	if *example == "" {
		root, err := testenv.RepoRoot()
		if err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
			return 2
		}
		*example = filepath.Join(root, "examples", "general-purpose.yaml")
	}
	nc, np, err := loadExample(*example)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 2
	}
	err = d.run(ctx, *example, nc, np, *keep)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "demo: interrupted; everything started was stopped")
			return 130
		}
		fmt.Fprintln(os.Stderr, "demo: FAILED:", err)
		return 1
	}
	fmt.Fprintln(d.out, "demo: OK")
	return 0
}

func (d *demo) run(ctx context.Context, example string, nc *v1alpha1.ScalewayElasticMetalNodeClass, np *karpv1.NodePool, keep bool) (err error) {
	realistic := d.profile == "realistic"
	timeout := 6 * time.Minute
	if realistic {
		timeout = 45 * time.Minute
	}
	dir, err := os.MkdirTemp("", "karpenter-scaleway-em-demo-")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(dir)
	}
	w, err := d.startWorld(ctx, dir, nc)
	if err != nil {
		return err
	}
	d.w = w
	defer d.stopWorld(w, &err)

	c, err := w.NewController(world.ControllerOptions{})
	if err != nil {
		return err
	}
	defer d.stopController(ctx, c, &err)
	if err := d.applyExample(ctx, c, example, nc, np); err != nil {
		return err
	}

	tracker := w.Track(100*time.Millisecond, d.onServerEvent)
	defer tracker.Stop()
	evctx, evcancel := context.WithCancel(ctx)
	defer evcancel()
	go d.watchNodeClaimEvents(evctx)
	go d.showWhileImaging(evctx)

	// The example's NodePool taints its nodes so that only pods that opt in
	// order bare metal: the demo's pods tolerate its taints.
	taints := np.Spec.Template.Spec.Taints
	web := w.RunWorkloadTolerating("default", "web", 0, "6", "2Gi", true, taints)
	defer web.Stop()
	batch := w.RunWorkloadTolerating("default", "batch", 0, "20", "8Gi", false, taints)
	defer batch.Stop()
	api := w.RunWorkloadTolerating("default", "api", 0, "6", "2Gi", true, taints)
	defer api.Stop()

	d.printf("wave 1: 3 pods 'web' (6 CPU, 2Gi, one per node) + 1 pod 'batch' (20 CPU, 8Gi) pending; no node exists yet")
	w1, err := d.wave(ctx, c, timeout, true, web, batch, api)
	if err != nil {
		return err
	}

	idle, err := d.scaleDown(ctx, c, w1, timeout, realistic, web, batch, api)
	if err != nil {
		return err
	}

	d.printf("wave 2: the same pods again: 3 'web' + 1 'batch', then 2 'api'")
	w2, err := d.wave(ctx, c, timeout, false, web, batch, api)
	if err != nil {
		return err
	}
	w2.orders -= w1.orders
	tracker.Stop()
	return d.summary(tracker.Timelines(), []waveResult{w1, w2}, idle)
}

// stopWorld stops the world; its error becomes the run's when the run
// had none.
func (d *demo) stopWorld(w *world.World, err *error) {
	d.printf("stopping the world")
	if serr := w.Stop(); serr != nil && *err == nil {
		*err = serr
	}
}

// stopController stops the controller and, when the run failed on its
// own (not interrupted), shows the end of the controller's log.
func (d *demo) stopController(ctx context.Context, c *world.Controller, err *error) {
	_ = c.Stop()
	if *err != nil && ctx.Err() == nil {
		fmt.Fprintf(d.out, "--- controller log tail (%s)\n%s\n", c.LogPath, c.LogTail(40))
	}
}

// startWorld starts the simulated world for the example's image and join
// Secret.
func (d *demo) startWorld(ctx context.Context, dir string, nc *v1alpha1.ScalewayElasticMetalNodeClass) (*world.World, error) {
	d.printf("starting the simulated world (profile %s) in %s", d.profile, dir)
	ref := nc.Spec.Talos.JoinSecretRef
	w, err := world.New(ctx, world.Options{
		Profile: d.profile, ClusterName: "demo", Dir: dir,
		TalosVersion: nc.Spec.Image.TalosVersion, SchematicID: nc.Spec.Image.SchematicID,
		Bucket: nc.Spec.Image.Bucket, Prefix: nc.Spec.Image.Prefix,
		SystemNamespace: ref.Namespace, JoinSecretName: ref.Name,
		ImageSize: 256 << 20,
		Logf:      func(f string, a ...any) { d.printf(f, a...) },
	})
	if err != nil {
		return nil, err
	}
	d.printf("kube-scheduler running; join Secret %s/%s holds the cluster CA, a bootstrap token and a Talos secrets bundle", ref.Namespace, ref.Name)
	return w, nil
}

// applyExample waits for the controller, then applies the example's
// NodeClass and NodePool, changed for the demo, and waits for the
// NodeClass to be ready.
func (d *demo) applyExample(ctx context.Context, c *world.Controller, example string, nc *v1alpha1.ScalewayElasticMetalNodeClass, np *karpv1.NodePool) error {
	hctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := c.WaitHealthy(hctx); err != nil {
		return err
	}
	d.printf("bin/karpenter-scaleway-em running (pid %d, log %s)", c.Pid(), c.LogPath)

	// The example keeps idle nodes 10 minutes; a demo shows consolidation
	// sooner, of every empty node at once. Billed monthly, consolidated
	// servers stay as spares for the second wave.
	np.Spec.Disruption.ConsolidateAfter = karpv1.MustParseNillableDuration("15s")
	np.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "100%"}}
	makeMonthly(nc, np)
	if err := d.w.Apply(ctx, nc, np); err != nil {
		return err
	}
	d.printf("applied %s: NodeClass %s, NodePool %s (made monthly: billing.periods [monthly] and the billing-period requirement; consolidateAfter 15s, budget 100%% for the demo)",
		filepath.Base(example), nc.Name, np.Name)
	return d.waitNodeClassReady(ctx, nc.Name)
}

// scaleDown removes the workloads, waits for the first wave's servers to
// be kept as spares, and returns what the idle spares cost meanwhile (the
// gauges count them).
func (d *demo) scaleDown(ctx context.Context, c *world.Controller, w1 waveResult, timeout time.Duration, realistic bool, wls ...*world.Workload) (string, error) {
	d.printf("removing the workload: nodes become empty, Karpenter consolidates them; the monthly servers stay as spares")
	t1 := time.Now()
	for _, wl := range wls {
		if err := wl.Scale(ctx, 0); err != nil {
			return "", err
		}
	}
	// Each spare pre-imaged, or its tags and status unchanged that long (more
	// than a GC interval, when a background pre-imaging sweeps: 5s in the
	// fast profile, 2m by default), before they are taken.
	quiet := 10 * time.Second
	if realistic {
		quiet = 150 * time.Second
	}
	spares, err := d.waitSpares(ctx, w1.servers, quiet, timeout)
	if err != nil {
		return "", err
	}
	d.printf("scale-down complete in %s: %d servers kept as spares (phase spare, in rescue; paid for the month), 0 released",
		time.Since(t1).Round(100*time.Millisecond), spares)
	return d.spendByNodeClass(ctx, c, spares)
}

// waveResult is what one wave of pods cost.
type waveResult struct {
	start   time.Time
	took    time.Duration // pods pending -> all bound
	orders  int           // servers ordered so far (CreateServer accepted)
	servers int           // nodes at the end of the wave
	spend   string
}

// wave scales web to 3 and batch to 1, and once their NodeClaims are
// launched, api to 2; it waits until every pod is bound. Create returns once
// a server is ordered (or a spare taken) and the installs run afterwards, so
// Karpenter keeps scheduling: api's NodeClaims are launched while the first
// servers are still installing (checked in the first wave, where they are
// delivered for minutes).
func (d *demo) wave(ctx context.Context, c *world.Controller, timeout time.Duration, first bool, web, batch, api *world.Workload) (waveResult, error) {
	r := waveResult{start: time.Now()}
	if err := web.Scale(ctx, 3); err != nil {
		return r, err
	}
	if err := batch.Scale(ctx, 1); err != nil {
		return r, err
	}
	n, err := d.waitLaunched(ctx, 1, timeout)
	if err != nil {
		return r, err
	}
	d.printf("%d NodeClaims launched %s after the pods (servers ordered or spares taken; their installs run in the background)", n, time.Since(r.start).Round(100*time.Millisecond))
	if err := api.Scale(ctx, 2); err != nil {
		return r, err
	}
	t2 := time.Now()
	d.printf("2 pods 'api' (6 CPU, 2Gi, one per node) pending")
	all, err := d.waitLaunched(ctx, n+1, timeout)
	if err != nil {
		return r, err
	}
	installing := d.installing()
	d.printf("%d NodeClaims for 'api' launched %s after its pods, while %d servers are still installing", all-n, time.Since(t2).Round(100*time.Millisecond), installing)
	if first {
		if installing == 0 {
			return r, errors.New("the 'api' pods waited for the first servers' installs")
		}
		if err := d.nodeClaimPhases(ctx); err != nil {
			return r, err
		}
	}
	if err := d.waitPods(ctx, timeout, web, batch, api); err != nil {
		return r, err
	}
	r.took = time.Since(r.start)
	nodes, _ := d.w.Clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	r.servers = len(nodes.Items)
	r.orders = d.orders()
	d.printf("scale-up complete in %s: %d nodes, all 6 pods bound", r.took.Round(100*time.Millisecond), r.servers)
	if err := d.nodeClaimPhases(ctx); err != nil {
		return r, err
	}
	r.spend, err = d.spendByNodeClass(ctx, c, r.servers)
	return r, err
}

// installing counts the servers neither joined nor kept as spares: those
// still being installed.
func (d *demo) installing() int {
	n := 0
	for _, s := range d.w.Sim.Servers() {
		if p := world.TagValue(s.Tags, world.TagPhase); p != "joined" && p != "spare" {
			n++
		}
	}
	return n
}

// orders counts the servers ordered so far.
func (d *demo) orders() int {
	n := 0
	for _, c := range d.w.Sim.CreatesByTag(world.TagNodeClaim) {
		n += c
	}
	return n
}

// waitSpares waits until n servers are spares with no NodeClaim left, each
// pre-imaged or ready and unchanged (status and tags) for quiet; it returns how many
// spares there are. A server released meanwhile fails it.
func (d *demo) waitSpares(ctx context.Context, n int, quiet, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	var watch nodetimes.Spares
	for {
		var ncs karpv1.NodeClaimList
		if err := d.w.Kube.Client.List(ctx, &ncs); err != nil {
			return 0, err
		}
		servers := d.w.Sim.Servers()
		spares, settled := watch.Quiet(servers, quiet)
		if len(servers) < n {
			return 0, fmt.Errorf("%d of the %d monthly servers were released instead of kept as spares", n-len(servers), n)
		}
		if settled == n && len(ncs.Items) == 0 {
			return spares, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("after %s: %d of %d servers are quiet spares, %d NodeClaims remain", timeout, settled, n, len(ncs.Items))
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// makeMonthly bills the NodeClass's servers monthly (kept as spares when
// their NodeClaims end, for the default minimum lifetime of a month) and
// makes the NodePool ask for monthly offerings.
func makeMonthly(nc *v1alpha1.ScalewayElasticMetalNodeClass, np *karpv1.NodePool) {
	nc.Spec.Billing.Periods = []string{"monthly"}
	reqs := np.Spec.Template.Spec.Requirements
	for i := range reqs {
		if reqs[i].Key == catalog.LabelBillingPeriod {
			reqs = append(reqs[:i], reqs[i+1:]...)
			break
		}
	}
	np.Spec.Template.Spec.Requirements = append(reqs, karpv1.NodeSelectorRequirementWithMinValues{
		Key: catalog.LabelBillingPeriod, Operator: corev1.NodeSelectorOpIn, Values: []string{"monthly"}})
}

// nodeClaimPhases prints what
// `kubectl get nodeclaims -L karpenter-scaleway-em.io/install-phase -L karpenter-scaleway-em.io/imaging-progress`
// shows: the install controller's labels.
func (d *demo) nodeClaimPhases(ctx context.Context) error {
	var ncs karpv1.NodeClaimList
	if err := d.w.Kube.Client.List(ctx, &ncs); err != nil {
		return err
	}
	sort.Slice(ncs.Items, func(i, j int) bool { return ncs.Items[i].Name < ncs.Items[j].Name })
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTYPE\tNODE\tINSTALL-PHASE\tIMAGING-PROGRESS")
	for _, nc := range ncs.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", nc.Name, nc.Labels["node.kubernetes.io/instance-type"], nc.Status.NodeName,
			nc.Labels[v1alpha1.LabelInstallPhase], nc.Labels[v1alpha1.LabelImagingProgress])
	}
	_ = tw.Flush()
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], " ")
	}
	d.printf("kubectl get nodeclaims -L %s -L %s\n%s", v1alpha1.LabelInstallPhase, v1alpha1.LabelImagingProgress, strings.Join(lines, "\n"))
	return nil
}

// showWhileImaging prints the NodeClaims' phase labels once, the first time
// one of them shows how far its imaging got.
func (d *demo) showWhileImaging(ctx context.Context) {
	for ctx.Err() == nil {
		var ncs karpv1.NodeClaimList
		if err := d.w.Kube.Client.List(ctx, &ncs); err == nil {
			for _, nc := range ncs.Items {
				if pct := nc.Labels[v1alpha1.LabelImagingProgress]; pct != "" && pct != "0" {
					_ = d.nodeClaimPhases(ctx)
					return
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

var (
	spendRE     = regexp.MustCompile(`^karpenter_scaleway_em_spend_(hourly_eur|monthly_commitment_eur)\{(.*)\} (\S+)$`)
	nodeClassRE = regexp.MustCompile(`nodeclass="([^"]*)"`)
)

// spendByNodeClass reads the spend gauges from the controller's metrics once
// they count the servers of the nodes that exist (they are recomputed every
// GC interval), and says what each NodeClass costs.
func (d *demo) spendByNodeClass(ctx context.Context, c *world.Controller, servers int) (string, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		text, err := c.Metrics(ctx)
		if err != nil {
			return "", err
		}
		hourly, commitment := spendGauges(text)
		counted := strings.Count(text, "\nkarpenter_scaleway_em_servers{")
		if len(hourly) > 0 && counted > 0 {
			var parts []string
			for nc, v := range hourly {
				parts = append(parts, fmt.Sprintf("NodeClass %s: %.3f EUR/h, monthly commitment %.2f EUR", nc, v, commitment[nc]))
			}
			sort.Strings(parts)
			out := "spend (karpenter_scaleway_em_spend_*): " + strings.Join(parts, "; ")
			d.printf("%s", out)
			return out, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no spend gauges for the %d servers after a minute", servers)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// spendGauges sums the spend gauges of a metrics scrape by NodeClass: the
// hourly spend and the monthly commitment.
func spendGauges(text string) (hourly, commitment map[string]float64) {
	hourly, commitment = map[string]float64{}, map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		m := spendRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		nc := nodeClassRE.FindStringSubmatch(m[2])
		var v float64
		if _, err := fmt.Sscan(m[3], &v); err != nil || nc == nil {
			continue
		}
		if m[1] == "hourly_eur" {
			hourly[nc[1]] += v
		} else {
			commitment[nc[1]] += v
		}
	}
	return hourly, commitment
}

func (d *demo) onServerEvent(ev world.Event) {
	id := ev.ServerID
	if len(id) > 8 {
		id = id[:8]
	}
	switch ev.Kind {
	case "created":
		d.printf("server %s ordered: %s", id, ev.Value)
	case "status":
		d.printf("server %s API status %s", id, ev.Value)
	case "phase":
		d.printf("server %s phase -> %s", id, ev.Value)
	case "node":
		d.printf("server %s registered as node %s", id, ev.Value)
	case "ready":
		// The simulated Talos records every call to :50000: in Disk mode
		// (the default) there is none, ever.
		cfg := "?"
		if st, err := d.w.Machines.Status(ev.ServerID); err == nil {
			cfg = st.ConfigSource
		}
		calls, err := d.w.Machines.TalosAPICalls(ev.ServerID)
		api := fmt.Sprintf("%d calls to the Talos maintenance API (:50000)", len(calls))
		if err == nil && len(calls) == 0 {
			api = "no maintenance API used (0 calls to :50000)"
		}
		d.mu.Lock()
		d.config[ev.Value] = fmt.Sprintf("%s, %d", cfg, len(calls))
		d.mu.Unlock()
		d.printf("server %s node %s Ready; config from %s; %s", id, ev.Value, cfg, api)
	case "gone":
		d.printf("server %s released (gone from the API)", id)
	}
}

// configmetalISO is machine.ConfigFromMetalISO: the demo's NodeClass uses
// the default Disk delivery, so every node reads its config from the disk.
const configmetalISO = machine.ConfigFromMetalISO

var mbpsRE = regexp.MustCompile(`([0-9.]+) MB/s`)

// watchNodeClaimEvents prints the provider's install events (phase
// progress, em-imager throughput) on NodeClaims.
func (d *demo) watchNodeClaimEvents(ctx context.Context) {
	for ctx.Err() == nil {
		l, err := d.w.Clientset.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=NodeClaim"})
		if err == nil {
			sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].LastTimestamp.Before(&l.Items[j].LastTimestamp) })
			for _, ev := range l.Items {
				d.nodeClaimEvent(ev)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// nodeClaimEvent prints a NodeClaim event the first time it is seen, and
// again each time its count grows, and keeps the imaging throughput it
// reports.
func (d *demo) nodeClaimEvent(ev corev1.Event) {
	key := string(ev.UID)
	d.mu.Lock()
	seen := d.seenEvt[key]
	if seen < ev.Count || (seen == 0 && ev.Count == 0) {
		d.seenEvt[key] = max(ev.Count, 1)
	}
	if m := mbpsRE.FindStringSubmatch(ev.Message); m != nil {
		d.mbps[ev.InvolvedObject.Name] = m[1]
	}
	d.mu.Unlock()
	if (seen == 0 || seen < ev.Count) && ev.InvolvedObject.Name != "" {
		d.printf("nodeclaim %s %s: %s", ev.InvolvedObject.Name, ev.Reason, ev.Message)
	}
}

func (d *demo) waitNodeClassReady(ctx context.Context, name string) error {
	if err := d.w.WaitNodeClassReady(ctx, name, 2*time.Minute); err != nil {
		return err
	}
	d.printf("NodeClass %s Ready (image manifest read from the bucket, join Secret parsed)", name)
	return nil
}

func (d *demo) waitPods(ctx context.Context, timeout time.Duration, wls ...*world.Workload) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		var parts []string
		all := true
		for _, wl := range wls {
			b, n, err := wl.Bound(ctx)
			if err != nil {
				return err
			}
			parts = append(parts, fmt.Sprintf("%s %d/%d bound", wl.App, b, n))
			if b < n || n == 0 {
				all = false
			}
		}
		s := strings.Join(parts, ", ")
		if s != last {
			d.printf("pods: %s", s)
			last = s
		}
		if all {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pods not all bound after %s: %s", timeout, s)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitLaunched waits until there are at least min NodeClaims and all of
// them have a provider ID (Create returned); Karpenter makes the NodeClaims
// of one scheduling decision together. It returns how many there are.
func (d *demo) waitLaunched(ctx context.Context, min int, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		var ncs karpv1.NodeClaimList
		if err := d.w.Kube.Client.List(ctx, &ncs); err != nil {
			return 0, err
		}
		launched := 0
		for _, nc := range ncs.Items {
			if nc.Status.ProviderID != "" {
				launched++
			}
		}
		if len(ncs.Items) >= min && launched == len(ncs.Items) {
			return launched, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d of %d NodeClaims launched after %s", launched, len(ncs.Items), timeout)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

var phases = []string{"ordered", "rescue", "imaging", "booting"}

// summary prints one row per node (a spare taken by wave 2 is a second node
// of its server), then per wave: orders, spares reused, time to Ready and
// its split (test/nodetimes), API calls per server, spend.
func (d *demo) summary(tls []world.Timeline, waves []waveResult, idle string) error {
	calls := d.w.Sim.Calls()
	var lives []nodetimes.Life
	for _, tl := range tls {
		lives = append(lives, nodetimes.Lives(tl, calls)...)
	}
	sort.SliceStable(lives, func(i, j int) bool {
		if wi, wj := waveOf(lives[i], waves), waveOf(lives[j], waves); wi != wj {
			return wi < wj
		}
		return lives[i].Start.Before(lives[j].Start)
	})
	problems := d.nodeTable(lives, waves)
	fmt.Fprintln(d.out)
	fmt.Fprintln(d.out, "Scaleway: delivery and reboots (the API status not ready); provider: the rest but the node's own boot after the last reboot;")
	fmt.Fprintln(d.out, "API calls: about the server, from the order or the take to the node Ready. By kind, per node:")
	for _, l := range lives {
		fmt.Fprintf(d.out, "  %s (wave %d): %s\n", l.NodeClaim, waveOf(l, waves)+1, nodetimes.Kinds(l.Calls))
	}
	fmt.Fprintln(d.out)
	for i, w := range waves {
		d.waveLine(i, w, lives, waves, idle)
	}
	if waves[1].orders != 0 {
		problems = append(problems, fmt.Sprintf("wave 2 ordered %d servers, want 0 (every node on a spare)", waves[1].orders))
	}
	d.configLine()
	if len(tls) == 0 {
		problems = append(problems, "no server was ordered")
	}
	problems = append(problems, d.totalsLine(tls, len(calls))...)
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// waveOf is the wave (0 or 1) a node's life belongs to: the second once
// it started after the second wave did.
func waveOf(l nodetimes.Life, waves []waveResult) int {
	if l.Start.Before(waves[1].start) {
		return 0
	}
	return 1
}

// nodeTable prints one row per node life: its wave, how it came (ordered or
// a spare), the time in each phase, to Ready, the split between Scaleway
// and the provider, API calls, imaging throughput and config source. It
// returns the problems seen: a node never Ready, a config not from the
// metal-iso partition.
func (d *demo) nodeTable(lives []nodetimes.Life, waves []waveResult) []string {
	var problems []string
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(d.out)
	fmt.Fprintln(tw, "node\twave\tserver\toffer\tordered\trescue\timaging\tbooting\tto Ready\tScaleway\tprovider\tAPI calls\tem-imager\tconfig, :50000 calls\t")
	for _, l := range lives {
		cells := phaseCells(l)
		ready := "never"
		if !l.Ready.IsZero() {
			ready = fmtDur(l.Total())
		} else {
			problems = append(problems, fmt.Sprintf("server %s (%s): NodeClaim %s never became a Ready node", l.Server, l.Offer, l.NodeClaim))
		}
		how := "ordered"
		if l.Reused {
			how = "spare"
		}
		name := cmp.Or(l.Node, l.NodeClaim)
		mbps, cfg, problem := d.imagingCells(l, name)
		if problem != "" {
			problems = append(problems, problem)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t\n", name, waveOf(l, waves)+1, how, l.Offer,
			cells[0], cells[1], cells[2], cells[3], ready, fmtDur(l.Scaleway), fmtDur(l.Provider), len(l.Calls), mbps, cfg)
	}
	_ = tw.Flush()
	return problems
}

// phaseCells is the time a node life spent in each phase: from its tag to
// the next phase's tag (the ordered phase from the order or the take), the
// last to node Ready; "-" for a phase not seen or never left.
func phaseCells(l nodetimes.Life) []string {
	at := map[string]time.Time{}
	for _, p := range l.PhaseTimes {
		if _, ok := at[p.Value]; !ok {
			at[p.Value] = p.At
		}
	}
	at["ordered"] = l.Start
	cells := []string{}
	for i, p := range phases {
		from, ok := at[p]
		to := l.Ready
		for _, q := range phases[i+1:] {
			if t, ok := at[q]; ok {
				to = t
				break
			}
		}
		if !ok || to.IsZero() {
			cells = append(cells, "-")
			continue
		}
		cells = append(cells, fmtDur(to.Sub(from)))
	}
	return cells
}

// imagingCells are the imaging throughput and config cells of a node's row,
// and a problem when the node's Talos did not get its config from the
// metal-iso partition without a call to :50000.
func (d *demo) imagingCells(l nodetimes.Life, name string) (mbps, cfg, problem string) {
	d.mu.Lock()
	mbps, cfg = d.mbps[l.NodeClaim], d.config[l.Node]
	d.mu.Unlock()
	if mbps == "" {
		mbps = "-"
	} else {
		mbps += " MB/s"
	}
	if cfg == "" {
		return mbps, "-", ""
	}
	if cfg != configmetalISO+", 0" {
		problem = fmt.Sprintf("node %s: config %s calls to :50000, want %s, 0 (Disk delivery)", name, cfg, configmetalISO)
	}
	return mbps, cfg, problem
}

// waveLine prints wave i's figures: orders, spares reused, how long the
// pods waited, node to Ready and provider overhead, API calls per server,
// its spend and, after the first, what the idle spares cost.
func (d *demo) waveLine(i int, w waveResult, lives []nodetimes.Life, waves []waveResult, idle string) {
	var total, over []time.Duration
	var ncalls []int
	reused := 0
	for _, l := range lives {
		if waveOf(l, waves) != i || l.Ready.IsZero() {
			continue
		}
		total, over, ncalls = append(total, l.Total()), append(over, l.Provider), append(ncalls, len(l.Calls))
		if l.Reused {
			reused++
		}
	}
	mt, xt := nodetimes.Stats(total)
	mo, xo := nodetimes.Stats(over)
	mc, xc := nodetimes.Stats(ncalls)
	fmt.Fprintf(d.out, "wave %d: %d servers ordered, %d spares reused; pods bound in %s; node to Ready median %s, max %s (provider overhead median %s, max %s); API calls per server median %d, max %d\n",
		i+1, w.orders, reused, fmtDur(w.took), fmtDur(mt), fmtDur(xt), fmtDur(mo), fmtDur(xo), mc, xc)
	fmt.Fprintf(d.out, "        %s\n", w.spend)
	if i == 0 {
		fmt.Fprintf(d.out, "between the waves, %d idle spares: %s\n", w.servers, idle)
	}
}

// configLine prints how many nodes called the maintenance API: none, with
// Disk delivery, as each reads its config from the metal-iso partition.
func (d *demo) configLine() {
	noAPI := 0
	d.mu.Lock()
	for _, cfg := range d.config {
		if cfg == configmetalISO+", 0" {
			noAPI++
		}
	}
	configs := len(d.config)
	d.mu.Unlock()
	if noAPI == configs {
		fmt.Fprintf(d.out, "maintenance API (:50000): used by none of the %d nodes (each read its config from the metal-iso partition: Disk delivery)\n", configs)
	} else {
		fmt.Fprintf(d.out, "maintenance API (:50000): used by %d of the %d nodes\n", configs-noAPI, configs)
	}
}

// totalsLine prints the servers, offers, duplicate orders and API calls of
// the run, and returns a problem per NodeClaim that got more than one
// server.
func (d *demo) totalsLine(tls []world.Timeline, calls int) []string {
	var problems []string
	offers := map[string]bool{}
	for _, tl := range tls {
		offers[tl.Offer] = true
	}
	dups := 0
	for nc, n := range d.w.Sim.CreatesByTag(world.TagNodeClaim) {
		if n > 1 {
			dups++
			problems = append(problems, fmt.Sprintf("NodeClaim %s got %d servers", nc, n))
		}
	}
	most := 0
	for _, tl := range tls {
		most = max(most, len(d.w.Sim.CallsForServer(tl.ID)))
	}
	fmt.Fprintf(d.out, "%d servers (%d offers), %d duplicate orders; %d Scaleway API calls in all (catalogue refreshes and GC sweeps included), at most %d about one server over both waves and its keep as a spare\n",
		len(tls), len(offers), dups, calls, most)
	return problems
}

func fmtDur(d time.Duration) string {
	if d >= time.Minute {
		return d.Round(time.Second).String()
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}

// loadExample reads a NodeClass and a NodePool from a YAML file.
func loadExample(path string) (*v1alpha1.ScalewayElasticMetalNodeClass, *karpv1.NodePool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("example: %w", err)
	}
	var nc *v1alpha1.ScalewayElasticMetalNodeClass
	var np *karpv1.NodePool
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, nil, fmt.Errorf("example %s: %w", path, err)
		}
		if raw == nil {
			continue
		}
		kind, _ := raw["kind"].(string)
		doc, err := json.Marshal(raw)
		if err != nil {
			return nil, nil, err
		}
		switch kind {
		case "ScalewayElasticMetalNodeClass":
			nc = &v1alpha1.ScalewayElasticMetalNodeClass{}
			err = json.Unmarshal(doc, nc)
		case "NodePool":
			np = &karpv1.NodePool{}
			err = json.Unmarshal(doc, np)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("example %s: %s: %w", path, kind, err)
		}
	}
	if nc == nil || np == nil {
		return nil, nil, fmt.Errorf("example %s: want a ScalewayElasticMetalNodeClass and a NodePool", path)
	}
	return nc, np, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
