package talosapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// Hardware is what the kubelet reports as the node's capacity and identity.
type Hardware struct {
	ServerID string
	IPv4     string
	IPv6     string
	// CPUThreads, MemoryBytes, EphemeralBytes become the capacity.
	CPUThreads     int64
	MemoryBytes    int64
	EphemeralBytes int64
	// TalosVersion is the installed image's (from the boot marker).
	TalosVersion string
	Arch         string // amd64 when empty
}

// JoinPolicy decides whether a config could really join the cluster: in
// reality a kubelet whose bootstrap token, cluster CA or endpoint is wrong
// never registers. Every check is off unless set.
type JoinPolicy struct {
	// RequireBootstrapToken: cluster.token must exist as a bootstrap-token
	// Secret in kube-system (bootstrap-token-<id>) with the same secret,
	// usage-bootstrap-authentication "true" and no past expiration.
	RequireBootstrapToken bool
	// ClusterCA (PEM): cluster.ca.crt, or one of cluster.acceptedCAs, must be
	// this certificate (kubelet verifies the apiserver with it).
	ClusterCA []byte
	// Endpoint: cluster.controlPlane.endpoint must equal it (scheme, host, port).
	Endpoint string
}

// AnnotationKubelet is on every Node a simulated kubelet registered, with
// the value KubeletSimulated: the world's KWOK (world.Options.RunPods)
// plays the pods of those Nodes, and of no other.
const (
	AnnotationKubelet = "sim.karpenter-scaleway-em.io/kubelet"
	KubeletSimulated  = "talosapi"
)

// KubeletOptions configure one simulated kubelet.
type KubeletOptions struct {
	Client   kubernetes.Interface
	Hardware Hardware
	Join     JoinPolicy
	// NeverReady registers the Node but keeps it NotReady (CNI never comes up).
	NeverReady bool
	// HeartbeatInterval between Lease renewals, each also a look at the
	// node's status; 5s if 0 (a kubelet's is 10s: a quarter of its 40s
	// Lease).
	HeartbeatInterval time.Duration
	// StatusReportInterval: the node's status is written when it changed
	// (another writer's Ready=False, capacity) or when the last write is
	// this old, as kubelet's nodeStatusReportFrequency; 5m if 0, kubelet's
	// default.
	StatusReportInterval time.Duration
	Logger               *slog.Logger
}

// Kubelet registers a Node from an applied Talos config, as kubelet would,
// and keeps it alive until stopped.
type Kubelet struct {
	opts     KubeletOptions
	nodeName string
	log      *slog.Logger
	cancel   context.CancelFunc
	done     chan struct{}
	mu       sync.Mutex
	err      error
	// lease is the Lease as last written, renewed without a read until a
	// write fails; reported is when the node's status was last written.
	lease    *coordinationv1.Lease
	reported time.Time
}

// NodeName is the name of the Node the kubelet registers.
func (k *Kubelet) NodeName() string { return k.nodeName }

// Err is the last registration or heartbeat error (nil when all is well).
func (k *Kubelet) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

func (k *Kubelet) setErr(err error) {
	k.mu.Lock()
	k.err = err
	k.mu.Unlock()
}

// Stop stops the heartbeat (power-off) and waits for the loop to end.
func (k *Kubelet) Stop() {
	k.cancel()
	<-k.done
}

// ErrJoinRejected wraps the reason a config would not join the cluster.
var ErrJoinRejected = errors.New("kubelet cannot join the cluster")

// StartKubelet checks the join material of cfg, then registers the Node in
// the background (retrying like kubelet), keeps its Lease and Ready
// heartbeat until Stop. A config that cannot join returns ErrJoinRejected:
// nothing is registered, as in reality.
func StartKubelet(ctx context.Context, cfg config.Provider, opts KubeletOptions) (*Kubelet, error) {
	if opts.Client == nil {
		return nil, errors.New("talosapi: kubelet needs a Kubernetes client")
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = 5 * time.Second
	}
	if opts.StatusReportInterval <= 0 {
		opts.StatusReportInterval = 5 * time.Minute
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Machine() == nil || cfg.Cluster() == nil {
		return nil, fmt.Errorf("%w: config has no machine or cluster section", ErrJoinRejected)
	}
	if cfg.Machine().Kubelet().SkipNodeRegistration() {
		return nil, fmt.Errorf("%w: machine.kubelet.skipNodeRegistration is set", ErrJoinRejected)
	}
	if err := checkJoin(ctx, cfg, opts); err != nil {
		return nil, err
	}
	node, err := desiredNode(cfg, opts.Hardware)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	k := &Kubelet{opts: opts, nodeName: node.Name, log: log.With("node", node.Name), cancel: cancel, done: make(chan struct{})}
	go k.loop(ctx, node, cfg)
	return k, nil
}

func checkJoin(ctx context.Context, cfg config.Provider, opts KubeletOptions) error {
	p := opts.Join
	if p.Endpoint != "" {
		if err := checkEndpoint(cfg, p.Endpoint); err != nil {
			return err
		}
	}
	if len(p.ClusterCA) > 0 {
		if err := checkClusterCA(cfg, p.ClusterCA); err != nil {
			return err
		}
	}
	if p.RequireBootstrapToken {
		return checkBootstrapToken(ctx, cfg, opts.Client)
	}
	return nil
}

// checkEndpoint refuses a config whose control plane endpoint is not the
// cluster's (a trailing slash aside): the kubelet would dial elsewhere.
func checkEndpoint(cfg config.Provider, want string) error {
	ep := cfg.Cluster().Endpoint()
	if ep != nil && strings.TrimSuffix(ep.String(), "/") == strings.TrimSuffix(want, "/") {
		return nil
	}
	got := "<none>"
	if ep != nil {
		got = ep.String()
	}
	return fmt.Errorf("%w: cluster.controlPlane.endpoint is %s, the cluster is at %s", ErrJoinRejected, got, want)
}

// checkClusterCA refuses a config that trusts neither the cluster's issuing
// CA nor one of its accepted CAs: TLS to the API server would fail.
func checkClusterCA(cfg config.Provider, clusterCA []byte) error {
	want, err := certDER(clusterCA)
	if err != nil {
		return fmt.Errorf("join policy ClusterCA: %w", err)
	}
	cl := cfg.Cluster()
	var have [][]byte
	if ca := cl.IssuingCA(); ca != nil {
		have = append(have, ca.Crt)
	}
	for _, ca := range cl.AcceptedCAs() {
		have = append(have, ca.Crt)
	}
	for _, h := range have {
		if d, err := certDER(h); err == nil && bytes.Equal(d, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: cluster.ca.crt does not match the cluster's CA (x509: certificate signed by unknown authority)", ErrJoinRejected)
}

// checkBootstrapToken refuses a config whose bootstrap token the cluster
// does not hold, holds with another secret or for another use, or holds
// expired: the API server would answer Unauthorized.
func checkBootstrapToken(ctx context.Context, cfg config.Provider, client kubernetes.Interface) error {
	tok := cfg.Cluster().Token()
	if tok == nil || tok.ID() == "" {
		return fmt.Errorf("%w: cluster.token is empty", ErrJoinRejected)
	}
	s, err := client.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+tok.ID(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: bootstrap token %s does not exist (Unauthorized)", ErrJoinRejected, tok.ID())
	}
	if err != nil {
		return fmt.Errorf("talosapi: look up bootstrap token: %w", err)
	}
	if string(s.Data["token-secret"]) != tok.Secret() || s.Type != corev1.SecretTypeBootstrapToken ||
		string(s.Data["usage-bootstrap-authentication"]) != "true" {
		return fmt.Errorf("%w: bootstrap token %s is not valid for authentication (Unauthorized)", ErrJoinRejected, tok.ID())
	}
	if exp := string(s.Data["expiration"]); exp != "" {
		t, err := time.Parse(time.RFC3339, exp)
		if err != nil || time.Now().After(t) {
			return fmt.Errorf("%w: bootstrap token %s has expired (Unauthorized)", ErrJoinRejected, tok.ID())
		}
	}
	return nil
}

func certDER(p []byte) ([]byte, error) {
	b, _ := pem.Decode(p)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("not a PEM certificate")
	}
	return b.Bytes, nil
}

// desiredNode builds the Node kubelet would register from the config.
func desiredNode(cfg config.Provider, hw Hardware) (*corev1.Node, error) {
	kl := cfg.Machine().Kubelet()
	args := kl.ExtraArgs()
	extra := kl.ExtraConfig()

	name, err := nodeName(cfg, hw)
	if err != nil {
		return nil, err
	}
	taints, err := nodeTaints(cfg, args, extra)
	if err != nil {
		return nil, err
	}
	providerID := ""
	if v := argList(args, "provider-id"); len(v) > 0 {
		providerID = v[0]
	}
	if v, ok := extra["providerID"].(string); ok && v != "" {
		providerID = v
	}
	annotations := map[string]string{
		"node.alpha.kubernetes.io/ttl":                           "0",
		"volumes.kubernetes.io/controller-managed-attach-detach": "true",
		AnnotationKubelet:                                        KubeletSimulated,
	}
	for k, v := range cfg.Machine().NodeAnnotations() {
		annotations[k] = v
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: nodeLabels(cfg, args, name, hw.Arch), Annotations: annotations},
		Spec:       corev1.NodeSpec{ProviderID: providerID, Taints: taints},
	}, nil
}

// nodeName is the name the kubelet registers: the configured hostname's
// first label, or Talos's stable default (talos-xxx-yyy from the server ID),
// lower-cased; a name Kubernetes rejects stops the join.
func nodeName(cfg config.Provider, hw Hardware) (string, error) {
	name := ""
	if h := cfg.NetworkHostnameConfig(); h != nil {
		name = h.Hostname()
	}
	if name == "" {
		sum := sha256.Sum256([]byte(hw.ServerID))
		name = fmt.Sprintf("talos-%x-%x", sum[0:2], sum[2:4])[:15]
	}
	name = strings.ToLower(strings.SplitN(name, ".", 2)[0])
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("%w: hostname %q: %s", ErrJoinRejected, name, strings.Join(errs, "; "))
	}
	return name, nil
}

// nodeLabels are the kubelet's well-known labels, then --node-labels, then
// machine.nodeLabels, each later source winning.
func nodeLabels(cfg config.Provider, args map[string][]string, name, arch string) map[string]string {
	if arch == "" {
		arch = "amd64"
	}
	labels := map[string]string{
		corev1.LabelHostname:      name,
		corev1.LabelOSStable:      "linux",
		corev1.LabelArchStable:    arch,
		"beta.kubernetes.io/os":   "linux",
		"beta.kubernetes.io/arch": arch,
	}
	for _, kv := range argList(args, "node-labels") {
		k, v, _ := strings.Cut(kv, "=")
		labels[k] = v
	}
	for k, v := range cfg.Machine().NodeLabels() {
		labels[k] = v
	}
	return labels
}

// nodeTaints gathers the taints the kubelet registers with, from the
// kubelet config, its flags and machine.nodeTaints in that order; a taint
// that does not parse or has an unknown effect stops the join.
func nodeTaints(cfg config.Provider, args map[string][]string, extra map[string]any) ([]corev1.Taint, error) {
	taints, err := configTaints(extra)
	if err != nil {
		return nil, err
	}
	for _, s := range argList(args, "register-with-taints") {
		t, err := parseTaint(s)
		if err != nil {
			return nil, fmt.Errorf("%w: kubelet register-with-taints: %v", ErrJoinRejected, err)
		}
		taints = append(taints, t)
	}
	for k, ve := range cfg.Machine().NodeTaints() {
		t, err := parseTaint(k + "=" + ve)
		if err != nil {
			return nil, fmt.Errorf("%w: machine.nodeTaints: %v", ErrJoinRejected, err)
		}
		taints = append(taints, t)
	}
	for _, t := range taints {
		switch t.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			return nil, fmt.Errorf("%w: taint %s has invalid effect %q", ErrJoinRejected, t.Key, t.Effect)
		}
	}
	return taints, nil
}

// configTaints reads the kubelet config's registerWithTaints.
func configTaints(extra map[string]any) ([]corev1.Taint, error) {
	raw, ok := extra["registerWithTaints"]
	if !ok {
		return nil, nil
	}
	b, err := yaml.Marshal(raw)
	if err != nil {
		return nil, err
	}
	var ts []corev1.Taint
	if err := yaml.Unmarshal(b, &ts); err != nil {
		return nil, fmt.Errorf("%w: kubelet registerWithTaints: %v", ErrJoinRejected, err)
	}
	return ts, nil
}

// argList returns the values of a kubelet extra arg, split on commas.
func argList(args map[string][]string, key string) []string {
	var out []string
	for _, v := range args[key] {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// parseTaint parses key[=value]:effect.
func parseTaint(s string) (corev1.Taint, error) {
	kv, effect, ok := strings.Cut(s, ":")
	if !ok {
		return corev1.Taint{}, fmt.Errorf("taint %q: missing effect", s)
	}
	k, v, _ := strings.Cut(kv, "=")
	if k == "" {
		return corev1.Taint{}, fmt.Errorf("taint %q: missing key", s)
	}
	return corev1.Taint{Key: k, Value: v, Effect: corev1.TaintEffect(effect)}, nil
}

// capacity is the offer's hardware as kubelet reports it; allocatable takes
// off the kubelet's reservations (Talos's defaults unless extraConfig says).
func capacity(cfg config.Provider, hw Hardware) (capacity, allocatable corev1.ResourceList, err error) {
	extra := cfg.Machine().Kubelet().ExtraConfig()
	pods, err := maxPods(extra)
	if err != nil {
		return nil, nil, err
	}
	capacity = corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(hw.CPUThreads, resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(hw.MemoryBytes, resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(hw.EphemeralBytes, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(pods, resource.DecimalSI),
		"hugepages-1Gi":                 resource.MustParse("0"),
		"hugepages-2Mi":                 resource.MustParse("0"),
	}
	allocatable = capacity.DeepCopy()
	systemReserved, err := kubeletMap(extra, "systemReserved", map[string]string{"cpu": "50m", "memory": "384Mi", "ephemeral-storage": "256Mi"})
	if err != nil {
		return nil, nil, err
	}
	kubeReserved, err := kubeletMap(extra, "kubeReserved", nil)
	if err != nil {
		return nil, nil, err
	}
	evictionHard, err := kubeletMap(extra, "evictionHard", map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"})
	if err != nil {
		return nil, nil, err
	}
	for _, m := range []map[string]string{systemReserved, kubeReserved} {
		if err := subtractReserved(allocatable, m); err != nil {
			return nil, nil, err
		}
	}
	if err := subtractEviction(allocatable, capacity, evictionHard); err != nil {
		return nil, nil, err
	}
	return capacity, allocatable, nil
}

// maxPods is the kubelet config's maxPods, 110 when unset; anything but a
// positive integer stops the join.
func maxPods(extra map[string]any) (int64, error) {
	v, ok := extra["maxPods"]
	if !ok {
		return 110, nil
	}
	n, ok := toInt(v)
	if !ok || n <= 0 {
		return 0, fmt.Errorf("%w: kubelet maxPods %v", ErrJoinRejected, v)
	}
	return n, nil
}

// kubeletMap reads a string map from the kubelet config, def when unset.
func kubeletMap(extra map[string]any, key string, def map[string]string) (map[string]string, error) {
	v, ok := extra[key]
	if !ok {
		return def, nil
	}
	m, err := stringMap(v)
	if err != nil {
		return nil, fmt.Errorf("%w: kubelet %s: %v", ErrJoinRejected, key, err)
	}
	return m, nil
}

// subtractReserved takes a reservation (systemReserved, kubeReserved) off
// allocatable. PIDs are not a node resource, so pid is skipped.
func subtractReserved(allocatable corev1.ResourceList, reserved map[string]string) error {
	for k, v := range reserved {
		if k == "pid" {
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return fmt.Errorf("%w: kubelet reservation %s=%q: %v", ErrJoinRejected, k, v, err)
		}
		subtract(allocatable, corev1.ResourceName(k), q)
	}
	return nil
}

// subtractEviction takes the hard eviction thresholds for memory and the
// node filesystem off allocatable, as the kubelet does; a percentage is of
// the capacity.
func subtractEviction(allocatable, capacity corev1.ResourceList, evictionHard map[string]string) error {
	for signal, res := range map[string]corev1.ResourceName{"memory.available": corev1.ResourceMemory, "nodefs.available": corev1.ResourceEphemeralStorage} {
		v, ok := evictionHard[signal]
		if !ok {
			continue
		}
		q, err := evictionQuantity(signal, v, capacity[res])
		if err != nil {
			return err
		}
		subtract(allocatable, res, q)
	}
	return nil
}

// evictionQuantity reads the threshold v for signal: a quantity, or a
// percentage of c.
func evictionQuantity(signal, v string, c resource.Quantity) (resource.Quantity, error) {
	if pct, isPct := strings.CutSuffix(v, "%"); isPct {
		var f float64
		if _, err := fmt.Sscanf(pct, "%g", &f); err != nil {
			return resource.Quantity{}, fmt.Errorf("%w: kubelet evictionHard %s=%q", ErrJoinRejected, signal, v)
		}
		return *resource.NewQuantity(int64(float64(c.Value())*f/100), resource.BinarySI), nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return resource.Quantity{}, fmt.Errorf("%w: kubelet evictionHard %s=%q: %v", ErrJoinRejected, signal, v, err)
	}
	return q, nil
}

func subtract(l corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) {
	v, ok := l[name]
	if !ok {
		return
	}
	v.Sub(q)
	if v.Sign() < 0 {
		v = *resource.NewQuantity(0, v.Format)
	}
	l[name] = v
}

func toInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case uint64:
		return int64(n), true
	case float64:
		return int64(n), n == float64(int64(n))
	}
	return 0, false
}

func stringMap(v any) (map[string]string, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("want a map, got %T", v)
	}
	out := map[string]string{}
	for k, x := range m {
		out[k] = fmt.Sprint(x)
	}
	return out, nil
}

func kubeletVersion(cfg config.Provider) string {
	img := cfg.Machine().Kubelet().Image()
	if i := strings.LastIndex(img, ":"); i >= 0 && !strings.Contains(img[i:], "/") {
		return strings.SplitN(img[i+1:], "@", 2)[0]
	}
	return "v0.0.0"
}

// loop registers the Node (retrying) and then heartbeats until ctx ends.
func (k *Kubelet) loop(ctx context.Context, node *corev1.Node, cfg config.Provider) {
	defer close(k.done)
	tick := time.NewTicker(k.opts.HeartbeatInterval)
	defer tick.Stop()
	registered := false
	for {
		var err error
		if !registered {
			if err = k.register(ctx, node); err == nil {
				registered = true
				k.log.Info("node registered")
			}
		}
		if registered {
			err = k.heartbeat(ctx, cfg)
		}
		if ctx.Err() != nil {
			return
		}
		k.setErr(err)
		if err != nil {
			k.log.Warn("kubelet", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// register creates the Node, or adopts an existing one like kubelet does
// after a reboot (labels it owns are refreshed, taints are left alone).
func (k *Kubelet) register(ctx context.Context, want *corev1.Node) error {
	nodes := k.opts.Client.CoreV1().Nodes()
	_, err := nodes.Create(ctx, want, metav1.CreateOptions{})
	if err == nil || !apierrors.IsAlreadyExists(err) {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := nodes.Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.Spec.ProviderID != "" && want.Spec.ProviderID != "" && cur.Spec.ProviderID != want.Spec.ProviderID {
			return fmt.Errorf("node %s exists with providerID %s, this machine is %s", want.Name, cur.Spec.ProviderID, want.Spec.ProviderID)
		}
		if cur.Labels == nil {
			cur.Labels = map[string]string{}
		}
		for key, v := range want.Labels {
			cur.Labels[key] = v
		}
		if cur.Spec.ProviderID == "" {
			cur.Spec.ProviderID = want.Spec.ProviderID
		}
		_, err = nodes.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

var unreachableTaints = map[string]bool{corev1.TaintNodeUnreachable: true, corev1.TaintNodeNotReady: true}

// heartbeat renews the Lease and writes the node's status when it changed
// or the last write is StatusReportInterval old, as kubelet does since
// node leases (KEP-589): a write per node and interval, not four, so that
// a world of a hundred nodes loads its API server as a cluster would.
func (k *Kubelet) heartbeat(ctx context.Context, cfg config.Provider) error {
	nodes := k.opts.Client.CoreV1().Nodes()
	now := metav1.NewTime(time.Now())
	capa, alloc, err := capacity(cfg, k.opts.Hardware)
	if err != nil {
		return err
	}
	var uid string
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, k.nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		uid = string(n.UID)
		// The node lifecycle controller (absent here) lifts its taints
		// once the kubelet posts status again.
		kept := n.Spec.Taints[:0]
		for _, t := range n.Spec.Taints {
			if !unreachableTaints[t.Key] {
				kept = append(kept, t)
			}
		}
		if len(kept) != len(n.Spec.Taints) {
			n.Spec.Taints = kept
			if n, err = nodes.Update(ctx, n, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		st := k.status(n.Status, cfg, capa, alloc, now)
		if !statusChanged(n.Status, st) && time.Since(k.reported) < k.opts.StatusReportInterval {
			return nil
		}
		n.Status = st
		if _, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{}); err == nil {
			k.reported = time.Now()
		}
		return err
	})
	if err != nil {
		return err
	}
	return k.renewLease(ctx, uid, now)
}

func (k *Kubelet) status(old corev1.NodeStatus, cfg config.Provider, capa, alloc corev1.ResourceList, now metav1.Time) corev1.NodeStatus {
	hw := k.opts.Hardware
	version := hw.TalosVersion
	if version == "" {
		version = "v1.12.0"
	}
	arch := hw.Arch
	if arch == "" {
		arch = "amd64"
	}
	sum := sha256.Sum256([]byte(hw.ServerID))
	id := fmt.Sprintf("%x", sum[:16])
	st := corev1.NodeStatus{
		Capacity:    capa,
		Allocatable: alloc,
		Phase:       corev1.NodeRunning,
		NodeInfo: corev1.NodeSystemInfo{
			MachineID:               id,
			SystemUUID:              fmt.Sprintf("%s-%s-%s-%s-%s", id[0:8], id[8:12], id[12:16], id[16:20], id[20:32]),
			BootID:                  id,
			KernelVersion:           "6.18.2-talos",
			OSImage:                 "Talos (" + version + ")",
			ContainerRuntimeVersion: "containerd://2.1.5",
			KubeletVersion:          kubeletVersion(cfg),
			OperatingSystem:         "linux",
			Architecture:            arch,
		},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
	}
	if hw.IPv4 != "" {
		st.Addresses = append(st.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: hw.IPv4})
	}
	if hw.IPv6 != "" {
		st.Addresses = append(st.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: hw.IPv6})
	}
	st.Addresses = append(st.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: k.nodeName})

	ready := corev1.NodeCondition{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		Reason: "KubeletReady", Message: "kubelet is posting ready status",
	}
	if k.opts.NeverReady {
		ready.Status, ready.Reason = corev1.ConditionFalse, "KubeletNotReady"
		ready.Message = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"
	}
	conds := []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", Message: "kubelet has no disk pressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", Message: "kubelet has sufficient PID available"},
		ready,
	}
	for i := range conds {
		conds[i].LastHeartbeatTime = now
		conds[i].LastTransitionTime = now
		for _, o := range old.Conditions {
			if o.Type == conds[i].Type && o.Status == conds[i].Status {
				conds[i].LastTransitionTime = o.LastTransitionTime
			}
		}
	}
	// Conditions other writers own (a node problem detector's, a test's)
	// stay, as kubelet patches only its own.
	for _, o := range old.Conditions {
		if !slices.ContainsFunc(conds, func(c corev1.NodeCondition) bool { return c.Type == o.Type }) {
			conds = append(conds, o)
		}
	}
	st.Conditions = conds
	return st
}

// statusChanged says whether the status kubelet would write differs from
// the node's beyond the heartbeat times it refreshes on every write.
func statusChanged(old, st corev1.NodeStatus) bool {
	strip := func(s corev1.NodeStatus) corev1.NodeStatus {
		s = *s.DeepCopy()
		for i := range s.Conditions {
			s.Conditions[i].LastHeartbeatTime = metav1.Time{}
		}
		s.Images, s.VolumesInUse, s.VolumesAttached = nil, nil, nil
		return s
	}
	return !equality.Semantic.DeepEqual(strip(old), strip(st))
}

// renewLease writes the Lease with the renew time now: from the copy last
// written, reading it again only when there is none or that write failed
// (a conflict, a deleted Lease), as kubelet's lease controller does.
func (k *Kubelet) renewLease(ctx context.Context, nodeUID string, now metav1.Time) error {
	leases := k.opts.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	micro := metav1.NewMicroTime(now.Time)
	if l := k.lease; l != nil {
		l.Spec.RenewTime = &micro
		if up, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err == nil {
			k.lease = up
			return nil
		}
		k.lease = nil
	}
	l, err := leases.Get(ctx, k.nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: k.nodeName, Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: k.nodeName, UID: types.UID(nodeUID)}},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(k.nodeName), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &micro,
			},
		}, metav1.CreateOptions{})
		k.lease = l
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.RenewTime = &micro
	l.Spec.HolderIdentity = ptr.To(k.nodeName)
	k.lease, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// MarkUnknown does what the node lifecycle controller does once a node's
// heartbeat is older than its grace period: every condition Unknown and the
// unreachable taints (no kube-controller-manager runs in the simulated world).
func MarkUnknown(ctx context.Context, client kubernetes.Interface, nodeName string) error {
	nodes := client.CoreV1().Nodes()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		has := map[string]bool{}
		for _, t := range n.Spec.Taints {
			has[t.Key+string(t.Effect)] = true
		}
		changed := false
		for _, e := range []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute} {
			if !has[corev1.TaintNodeUnreachable+string(e)] {
				t := corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: e}
				if e == corev1.TaintEffectNoExecute {
					t.TimeAdded = &now
				}
				n.Spec.Taints = append(n.Spec.Taints, t)
				changed = true
			}
		}
		if changed {
			if n, err = nodes.Update(ctx, n, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		for i := range n.Status.Conditions {
			c := &n.Status.Conditions[i]
			if c.Status != corev1.ConditionUnknown {
				c.Status = corev1.ConditionUnknown
				c.LastTransitionTime = now
			}
			c.Reason = "NodeStatusUnknown"
			c.Message = "Kubelet stopped posting node status."
		}
		_, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
}
