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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
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
	config  map[string]string // server ID -> where its Talos got its config, and the :50000 calls
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
	err = d.run(ctx, nc, np, *keep)
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

func (d *demo) run(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass, np *karpv1.NodePool, keep bool) (err error) {
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
		return err
	}
	d.w = w
	defer func() {
		d.printf("stopping the world")
		if serr := w.Stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	d.printf("kube-scheduler running; join Secret %s/%s holds the cluster CA, a bootstrap token and a Talos secrets bundle", ref.Namespace, ref.Name)

	c, err := w.NewController(world.ControllerOptions{})
	if err != nil {
		return err
	}
	defer func() {
		_ = c.Stop()
		if err != nil && ctx.Err() == nil {
			fmt.Fprintf(d.out, "--- controller log tail (%s)\n%s\n", c.LogPath, c.LogTail(40))
		}
	}()
	hctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := c.WaitHealthy(hctx); err != nil {
		return err
	}
	d.printf("bin/karpenter-scaleway-em running (pid %d, log %s)", c.Pid(), c.LogPath)

	// The example keeps idle nodes 10 minutes; a demo shows consolidation sooner.
	consolidate := karpv1.MustParseNillableDuration("15s")
	np.Spec.Disruption.ConsolidateAfter = consolidate
	if err := w.Apply(ctx, nc, np); err != nil {
		return err
	}
	d.printf("applied examples/general-purpose.yaml: NodeClass %s, NodePool %s (consolidateAfter 15s for the demo)", nc.Name, np.Name)
	if err := d.waitNodeClassReady(ctx, nc.Name); err != nil {
		return err
	}

	tracker := w.Track(100*time.Millisecond, d.onServerEvent)
	defer tracker.Stop()
	evctx, evcancel := context.WithCancel(ctx)
	defer evcancel()
	go d.watchNodeClaimEvents(evctx)

	web := w.RunWorkload("default", "web", 3, "6", "2Gi", true)
	defer web.Stop()
	batch := w.RunWorkload("default", "batch", 1, "20", "8Gi", false)
	defer batch.Stop()
	d.printf("workload: 3 pods 'web' (6 CPU, 2Gi, one per node) + 1 pod 'batch' (20 CPU, 8Gi) pending; no node exists yet")

	t0 := time.Now()
	// Create returns once a server is ordered; the installs run afterwards,
	// so Karpenter keeps scheduling: a second wave gets its NodeClaims while
	// the first wave's servers are still being delivered and installed.
	first, err := d.waitLaunched(ctx, 1, timeout)
	if err != nil {
		return err
	}
	d.printf("first wave: %d NodeClaims launched %s after the pods (servers ordered; their installs run in the background)", first, time.Since(t0).Round(100*time.Millisecond))
	api := w.RunWorkload("default", "api", 2, "6", "2Gi", true)
	defer api.Stop()
	t2 := time.Now()
	d.printf("second wave: 2 pods 'api' (6 CPU, 2Gi, one per node) pending")
	all, err := d.waitLaunched(ctx, first+1, timeout)
	if err != nil {
		return err
	}
	installing := 0
	for _, s := range w.Sim.Servers() {
		if p := world.TagValue(s.Tags, world.TagPhase); p != "joined" {
			installing++
		}
	}
	d.printf("second wave: %d NodeClaims launched %s after its pods, while %d servers are still installing", all-first, time.Since(t2).Round(100*time.Millisecond), installing)
	if installing == 0 {
		return errors.New("the second wave waited for the first wave's installs")
	}
	if err := d.waitPods(ctx, timeout, web, batch, api); err != nil {
		return err
	}
	upTook := time.Since(t0)
	nodes, _ := w.Clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	d.printf("scale-up complete in %s: %d nodes, all 6 pods bound", upTook.Round(100*time.Millisecond), len(nodes.Items))

	d.printf("removing the workload: nodes become empty, Karpenter consolidates them")
	t1 := time.Now()
	if err := web.Scale(ctx, 0); err != nil {
		return err
	}
	if err := batch.Scale(ctx, 0); err != nil {
		return err
	}
	if err := api.Scale(ctx, 0); err != nil {
		return err
	}
	if err := d.waitReleased(ctx, timeout); err != nil {
		return err
	}
	d.printf("scale-down complete in %s: every server released", time.Since(t1).Round(100*time.Millisecond))
	tracker.Stop()
	return d.summary(tracker.Timelines())
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
		d.config[ev.ServerID] = fmt.Sprintf("%s, %d", cfg, len(calls))
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
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (d *demo) waitNodeClassReady(ctx context.Context, name string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
		if err := d.w.Kube.Client.Get(ctx, types.NamespacedName{Name: name}, nc); err != nil {
			return err
		}
		msg := "no Ready condition yet"
		for _, c := range nc.Status.Conditions {
			if c.Type == "Ready" {
				if c.Status == metav1.ConditionTrue {
					d.printf("NodeClass %s Ready (image manifest read from the bucket, join Secret parsed)", name)
					return nil
				}
				msg = fmt.Sprintf("%s: %s", c.Reason, c.Message)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("NodeClass %s not Ready after 2m: %s", name, msg)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
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

func (d *demo) waitReleased(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var ncs karpv1.NodeClaimList
		if err := d.w.Kube.Client.List(ctx, &ncs); err != nil {
			return err
		}
		nodes, err := d.w.Clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		servers := d.w.Sim.Servers()
		if len(servers) == 0 && len(ncs.Items) == 0 && len(nodes.Items) == 0 && len(d.w.Machines.Alive()) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %d servers, %d NodeClaims, %d nodes remain", timeout, len(servers), len(ncs.Items), len(nodes.Items))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

var phases = []string{"ordered", "rescue", "imaging", "booting"}

func (d *demo) summary(tls []world.Timeline) error {
	var problems []string
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(d.out)
	fmt.Fprintln(tw, "node\toffer\tzone\tordered\trescue\timaging\tbooting\tto Ready\tem-imager\tconfig, :50000 calls\treleased\t")
	for _, tl := range tls {
		start := tl.Created
		if len(tl.Statuses) > 0 && tl.Statuses[0].At.Before(start) {
			start = tl.Statuses[0].At
		}
		at := map[string]time.Time{}
		for _, p := range tl.Phases {
			if _, ok := at[p.Value]; !ok {
				at[p.Value] = p.At
			}
		}
		// Time in a phase: from its tag to the next phase's tag (the
		// ordered phase from the order itself), the last to node Ready.
		cells := []string{}
		for i, p := range phases {
			from, ok := at[p]
			if p == "ordered" {
				from, ok = start, true
			}
			var to time.Time
			if i+1 < len(phases) {
				to = at[phases[i+1]]
			} else {
				to = tl.NodeReady
			}
			if !ok || to.IsZero() || from.IsZero() {
				cells = append(cells, "-")
				continue
			}
			cells = append(cells, fmtDur(to.Sub(from)))
		}
		ready := "never"
		if !tl.NodeReady.IsZero() {
			ready = fmtDur(tl.NodeReady.Sub(start))
		} else {
			problems = append(problems, fmt.Sprintf("server %s (%s) never became a Ready node", tl.ID, tl.Offer))
		}
		released := "no"
		if !tl.Gone.IsZero() {
			released = "yes"
		} else {
			problems = append(problems, fmt.Sprintf("server %s (%s) was not released", tl.ID, tl.Offer))
		}
		d.mu.Lock()
		mbps := d.mbps[tl.NodeClaim]
		d.mu.Unlock()
		if mbps == "" {
			mbps = "-"
		} else {
			mbps += " MB/s"
		}
		name := tl.Node
		if name == "" {
			name = tl.NodeClaim
		}
		d.mu.Lock()
		cfg := d.config[tl.ID]
		d.mu.Unlock()
		if cfg == "" {
			cfg = "-"
		} else if cfg != configmetalISO+", 0" {
			problems = append(problems, fmt.Sprintf("server %s (%s): config %s calls to :50000, want %s, 0 (Disk delivery)", tl.ID, tl.Offer, cfg, configmetalISO))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, tl.Offer, tl.Zone, cells[0], cells[1], cells[2], cells[3], ready, mbps, cfg, released)
	}
	_ = tw.Flush()
	fmt.Fprintln(d.out)
	if len(tls) == 0 {
		problems = append(problems, "no server was ordered")
	}
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
	calls := d.w.Sim.Calls()
	most := 0
	for _, tl := range tls {
		most = max(most, len(d.w.Sim.CallsForServer(tl.ID)))
	}
	fmt.Fprintf(d.out, "%d servers (%d offers), %d duplicate orders; %d Scaleway API calls in all (catalogue refreshes and GC sweeps included), at most %d about one server\n",
		len(tls), len(offers), dups, len(calls), most)
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
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
