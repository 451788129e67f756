package talosapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const endpoint = "https://10.0.0.1:6443"

// workerConfig generates a valid worker config the way the provider does
// (machinery's generate package) with the per-node patch on top.
func workerConfig(t *testing.T, bundle *secrets.Bundle, patch string) []byte {
	t.Helper()
	if bundle == nil {
		var err error
		if bundle, err = secrets.NewBundle(secrets.NewClock(), config.TalosVersion1_12); err != nil {
			t.Fatal(err)
		}
	}
	in, err := generate.NewInput("sim", endpoint, "1.35.0",
		generate.WithSecretsBundle(bundle),
		generate.WithVersionContract(config.TalosVersion1_12),
		generate.WithInstallDisk("/dev/nvme0n1"),
	)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := in.Config(machinetype.TypeWorker)
	if err != nil {
		t.Fatal(err)
	}
	if patch != "" {
		p, err := configpatcher.LoadPatch([]byte(patch))
		if err != nil {
			t.Fatal(err)
		}
		out, err := configpatcher.Apply(configpatcher.WithConfig(cfg), []configpatcher.Patch{p})
		if err != nil {
			t.Fatal(err)
		}
		if cfg, err = out.Config(); err != nil {
			t.Fatal(err)
		}
	}
	b, err := cfg.EncodeBytes()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func nodePatch(name, providerID string) string {
	return fmt.Sprintf(`machine:
  nodeLabels:
    karpenter.sh/nodepool: default
    node.kubernetes.io/instance-type: EM-A610R-NVME
  kubelet:
    extraArgs:
      provider-id: %s
    extraConfig:
      registerWithTaints:
        - key: karpenter.sh/unregistered
          effect: NoExecute
---
apiVersion: v1alpha1
kind: HostnameConfig
auto: "off"
hostname: %s
`, providerID, name)
}

func startKube(t *testing.T) kubernetes.Interface {
	t.Helper()
	k := testenv.StartKube(t, testenv.KubeOptions{NoKarpenterCRDs: true})
	c, err := kubernetes.NewForConfig(k.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var hw = Hardware{
	ServerID: "11111111-2222-3333-4444-555555555555", IPv4: "127.0.0.9", IPv6: "2001:bc8:1234::1",
	CPUThreads: 12, MemoryBytes: 32_000_000_000, EphemeralBytes: 1_024_209_543_168, TalosVersion: "v1.12.1",
}

func talosClient(t *testing.T, addr string) *talosclient.Client {
	t.Helper()
	c, err := talosclient.New(context.Background(), talosclient.WithEndpoints(addr),
		talosclient.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok {
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s (last error: %v)", what, last)
}

func getNode(ctx context.Context, c kubernetes.Interface, name string) func() (bool, error) {
	return func() (bool, error) {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, errors.New("not ready")
	}
}

// The whole path: machinery's client applies a config over TLS, the
// maintenance API validates it, the kubelet registers the Node, the API
// leaves maintenance mode.
func TestApplyConfigurationRegistersNode(t *testing.T) {
	ctx := context.Background()
	kube := startKube(t)
	var (
		mu      sync.Mutex
		kubelet *Kubelet
	)
	m, err := StartMaintenance(MaintenanceOptions{
		Addr: "127.0.0.1:0",
		OnApply: func(ctx context.Context, cfg config.Provider, raw []byte) error {
			k, err := StartKubelet(ctx, cfg, KubeletOptions{Client: kube, Hardware: hw, HeartbeatInterval: 200 * time.Millisecond})
			if err != nil {
				return err
			}
			mu.Lock()
			kubelet = k
			mu.Unlock()
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		if kubelet != nil {
			kubelet.Stop()
		}
	}()
	if ip := m.Certificate().IPAddresses; len(ip) != 1 || !ip[0].Equal(net.ParseIP("127.0.0.1")) {
		t.Fatalf("serving certificate IP SANs %v", ip)
	}
	tc := talosClient(t, m.Addr())

	// Version is refused as in maintenance mode, with a gRPC status (the API is up).
	if _, err := tc.Version(ctx); status.Code(err) != codes.Unimplemented {
		t.Fatalf("Version: %v, want Unimplemented", err)
	}
	providerID := "scaleway-em://fr-par-2/" + hw.ServerID
	cfg := workerConfig(t, nil, nodePatch("em-node-a", providerID))
	resp, err := tc.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: cfg, Mode: machine.ApplyConfigurationRequest_AUTO})
	if err != nil {
		t.Fatalf("ApplyConfiguration: %v", err)
	}
	if len(resp.Messages) != 1 {
		t.Fatalf("reply: %v", resp)
	}
	waitFor(t, "node em-node-a Ready", getNode(ctx, kube, "em-node-a"))
	n, err := kube.CoreV1().Nodes().Get(ctx, "em-node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.ProviderID != providerID {
		t.Errorf("providerID %q", n.Spec.ProviderID)
	}
	for k, v := range map[string]string{
		"karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": "EM-A610R-NVME",
		corev1.LabelHostname: "em-node-a", corev1.LabelArchStable: "amd64", corev1.LabelOSStable: "linux",
	} {
		if n.Labels[k] != v {
			t.Errorf("label %s=%q, want %q", k, n.Labels[k], v)
		}
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "karpenter.sh/unregistered" || n.Spec.Taints[0].Effect != corev1.TaintEffectNoExecute {
		t.Errorf("taints %v", n.Spec.Taints)
	}
	if c := n.Status.Capacity[corev1.ResourceCPU]; c.Value() != 12 {
		t.Errorf("cpu capacity %s", c.String())
	}
	if a := n.Status.Allocatable[corev1.ResourceCPU]; a.MilliValue() != 12000-50 {
		t.Errorf("cpu allocatable %s", a.String())
	}
	if a, want := n.Status.Allocatable[corev1.ResourceMemory], 32_000_000_000-(384<<20)-(100<<20); a.Value() != int64(want) {
		t.Errorf("memory allocatable %d, want %d", a.Value(), want)
	}
	if p := n.Status.Capacity[corev1.ResourcePods]; p.Value() != 110 {
		t.Errorf("pods %s", p.String())
	}
	if n.Status.NodeInfo.OSImage != "Talos (v1.12.1)" || n.Status.NodeInfo.KubeletVersion != "v1.35.0" {
		t.Errorf("node info %+v", n.Status.NodeInfo)
	}
	var addrs []string
	for _, a := range n.Status.Addresses {
		addrs = append(addrs, string(a.Type)+"="+a.Address)
	}
	if got := strings.Join(addrs, ","); got != "InternalIP=127.0.0.9,InternalIP=2001:bc8:1234::1,Hostname=em-node-a" {
		t.Errorf("addresses %s", got)
	}
	// The Lease is written after the status in each heartbeat, as kubelet's
	// lease controller runs beside its status loop: it may come just after
	// the node is Ready.
	var lease *coordinationv1.Lease
	waitFor(t, "the node's Lease", func() (bool, error) {
		l, err := kube.CoordinationV1().Leases("kube-node-lease").Get(ctx, "em-node-a", metav1.GetOptions{})
		lease = l
		return err == nil, err
	})
	if *lease.Spec.HolderIdentity != "em-node-a" || lease.OwnerReferences[0].UID != n.UID {
		t.Errorf("lease %+v", lease)
	}
	// Talos left maintenance mode: the API stops listening.
	select {
	case <-m.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("maintenance API still serving after apply")
	}
	if c, err := net.Dial("tcp", m.Addr()); err == nil {
		c.Close()
		t.Fatal("maintenance port still accepts connections")
	}
}

func TestApplyConfigurationErrorsMatchTalos(t *testing.T) {
	ctx := context.Background()
	applied := 0
	m, err := StartMaintenance(MaintenanceOptions{
		Addr:    "127.0.0.1:0",
		OnApply: func(context.Context, config.Provider, []byte) error { applied++; return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tc := talosClient(t, m.Addr())
	good := workerConfig(t, nil, nodePatch("n1", "scaleway-em://fr-par-2/x"))
	noInstall := []byte(strings.Replace(string(good), "disk: /dev/nvme0n1", `disk: ""`, 1))
	if string(noInstall) == string(good) {
		t.Fatal("generated config has no install disk to remove")
	}

	for _, tc2 := range []struct {
		name string
		req  *machine.ApplyConfigurationRequest
		code codes.Code
		msg  string
	}{
		{"garbage", &machine.ApplyConfigurationRequest{Data: []byte("{{not yaml")}, codes.Unknown, "failed to parse config"},
		{"empty", &machine.ApplyConfigurationRequest{Data: nil}, codes.Unknown, "failed to parse config"},
		{"unknown field", &machine.ApplyConfigurationRequest{Data: append([]byte("bogus: 1\n"), good...)}, codes.Unknown, "failed to parse config"},
		{"no install disk in metal mode", &machine.ApplyConfigurationRequest{Data: noInstall}, codes.InvalidArgument, "configuration validation failed"},
		{"v1alpha1 hostname next to HostnameConfig", &machine.ApplyConfigurationRequest{Data: workerConfig(t, nil, "machine:\n  network:\n    hostname: h1\n")}, codes.InvalidArgument, "static hostname is already set"},
		{"no-reboot mode", &machine.ApplyConfigurationRequest{Data: good, Mode: machine.ApplyConfigurationRequest_NO_REBOOT}, codes.Unimplemented, "--mode='no-reboot' is not supported in maintenance mode"},
		{"staged mode", &machine.ApplyConfigurationRequest{Data: good, Mode: machine.ApplyConfigurationRequest_STAGED}, codes.Unimplemented, "--mode='staged'"},
	} {
		_, err := tc.ApplyConfiguration(ctx, tc2.req)
		if status.Code(err) != tc2.code || !strings.Contains(err.Error(), tc2.msg) {
			t.Errorf("%s: %v, want %s with %q", tc2.name, err, tc2.code, tc2.msg)
		}
	}
	// Dry run: accepted, nothing applied, still in maintenance.
	resp, err := tc.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: good, DryRun: true})
	if err != nil || !strings.Contains(resp.Messages[0].ModeDetails, "Dry run") {
		t.Fatalf("dry run: %v %v", resp, err)
	}
	if applied != 0 {
		t.Fatalf("rejected or dry-run configs applied %d times", applied)
	}
	// A failing apply (e.g. the kubelet cannot start) reaches the client and
	// keeps the machine in maintenance mode.
	m2, err := StartMaintenance(MaintenanceOptions{
		Addr:    "127.0.0.1:0",
		OnApply: func(context.Context, config.Provider, []byte) error { return status.Error(codes.Internal, "disk full") },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if _, err := talosClient(t, m2.Addr()).ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: good}); status.Code(err) != codes.Internal {
		t.Fatalf("failing apply: %v", err)
	}
	select {
	case <-m2.Done():
		t.Fatal("left maintenance mode after a failed apply")
	default:
	}
	if _, err := StartMaintenance(MaintenanceOptions{Addr: "no-port"}); err == nil {
		t.Fatal("bad address accepted")
	}
}

func loadConfig(t *testing.T, b []byte) config.Provider {
	t.Helper()
	cfg, err := configloader.NewFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func bootstrapSecret(id, secret string, extra map[string]string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: "kube-system"},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{"token-id": id, "token-secret": secret, "usage-bootstrap-authentication": "true"},
	}
	for k, v := range extra {
		s.StringData[k] = v
	}
	return s
}

func TestJoinPolicy(t *testing.T) {
	ctx := context.Background()
	kube := startKube(t)
	bundle, err := secrets.NewBundle(secrets.NewClock(), config.TalosVersion1_12)
	if err != nil {
		t.Fatal(err)
	}
	cfg := loadConfig(t, workerConfig(t, bundle, nodePatch("join-a", "scaleway-em://fr-par-2/a")))
	other := loadConfig(t, workerConfig(t, nil, nodePatch("join-b", "scaleway-em://fr-par-2/b")))
	tok := cfg.Cluster().Token()
	start := func(c config.Provider, p JoinPolicy) error {
		k, err := StartKubelet(ctx, c, KubeletOptions{Client: kube, Hardware: hw, Join: p, HeartbeatInterval: 100 * time.Millisecond})
		if err == nil {
			k.Stop()
		}
		return err
	}
	policy := JoinPolicy{RequireBootstrapToken: true}
	if err := start(cfg, policy); !errors.Is(err, ErrJoinRejected) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing token: %v", err)
	}
	if _, err := kube.CoreV1().Secrets("kube-system").Create(ctx, bootstrapSecret(tok.ID(), "wrongsecret00000", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := start(cfg, policy); !errors.Is(err, ErrJoinRejected) || !strings.Contains(err.Error(), "not valid") {
		t.Fatalf("wrong token secret: %v", err)
	}
	if err := kube.CoreV1().Secrets("kube-system").Delete(ctx, "bootstrap-token-"+tok.ID(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expired := map[string]string{"expiration": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)}
	if _, err := kube.CoreV1().Secrets("kube-system").Create(ctx, bootstrapSecret(tok.ID(), tok.Secret(), expired), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := start(cfg, policy); !errors.Is(err, ErrJoinRejected) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired token: %v", err)
	}
	if err := kube.CoreV1().Secrets("kube-system").Delete(ctx, "bootstrap-token-"+tok.ID(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Secrets("kube-system").Create(ctx, bootstrapSecret(tok.ID(), tok.Secret(), nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := start(cfg, policy); err != nil {
		t.Fatalf("valid token: %v", err)
	}

	ca := cfg.Cluster().IssuingCA().Crt
	if err := start(cfg, JoinPolicy{ClusterCA: ca, Endpoint: endpoint}); err != nil {
		t.Fatalf("matching CA and endpoint: %v", err)
	}
	if err := start(other, JoinPolicy{ClusterCA: ca}); !errors.Is(err, ErrJoinRejected) || !strings.Contains(err.Error(), "cluster.ca.crt") {
		t.Fatalf("other cluster's CA: %v", err)
	}
	if err := start(cfg, JoinPolicy{Endpoint: "https://10.9.9.9:6443"}); !errors.Is(err, ErrJoinRejected) || !strings.Contains(err.Error(), "endpoint") {
		t.Fatalf("wrong endpoint: %v", err)
	}
	if err := start(cfg, JoinPolicy{ClusterCA: []byte("not pem")}); err == nil || errors.Is(err, ErrJoinRejected) {
		t.Fatalf("bad policy CA: %v", err)
	}
	// Nothing was registered by the rejected attempts of join-b.
	if _, err := kube.CoreV1().Nodes().Get(ctx, "join-b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("node of a rejected config: %v", err)
	}
}

func leaseRenewTime(t *testing.T, kube kubernetes.Interface, name string) time.Time {
	t.Helper()
	l, err := kube.CoordinationV1().Leases("kube-node-lease").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Spec.RenewTime.Time
}

func readyCondition(t *testing.T, kube kubernetes.Interface, name string) (corev1.NodeCondition, *corev1.Node) {
	t.Helper()
	n, err := kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c, n
		}
	}
	t.Fatalf("node %s has no Ready condition", name)
	return corev1.NodeCondition{}, nil
}

// Heartbeat stops with the machine; the lifecycle-controller stand-in marks
// the node Unknown; a reboot re-registers the same node idempotently.
func TestHeartbeatStopUnknownAndReregister(t *testing.T) {
	ctx := context.Background()
	kube := startKube(t)
	cfg := loadConfig(t, workerConfig(t, nil, nodePatch("hb-node", "scaleway-em://fr-par-2/hb")))
	opts := KubeletOptions{Client: kube, Hardware: hw, HeartbeatInterval: 100 * time.Millisecond}
	k, err := StartKubelet(ctx, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "hb-node Ready", getNode(ctx, kube, "hb-node"))
	first := leaseRenewTime(t, kube, "hb-node")
	waitFor(t, "lease renewal", func() (bool, error) { return leaseRenewTime(t, kube, "hb-node").After(first), nil })
	k.Stop()
	if k.Err() != nil {
		t.Fatalf("kubelet error: %v", k.Err())
	}
	stopped := leaseRenewTime(t, kube, "hb-node")
	time.Sleep(5 * opts.HeartbeatInterval)
	if got := leaseRenewTime(t, kube, "hb-node"); !got.Equal(stopped) {
		t.Fatalf("lease renewed after power-off: %v -> %v", stopped, got)
	}

	if err := MarkUnknown(ctx, kube, "hb-node"); err != nil {
		t.Fatal(err)
	}
	cond, n := readyCondition(t, kube, "hb-node")
	if cond.Status != corev1.ConditionUnknown || cond.Reason != "NodeStatusUnknown" {
		t.Fatalf("after MarkUnknown: %+v", cond)
	}
	unreachable := 0
	for _, tnt := range n.Spec.Taints {
		if tnt.Key == corev1.TaintNodeUnreachable {
			unreachable++
		}
	}
	if unreachable != 2 {
		t.Fatalf("taints %v", n.Spec.Taints)
	}
	if err := MarkUnknown(ctx, kube, "hb-node"); err != nil { // idempotent
		t.Fatal(err)
	}

	// Reboot: same config, same node; Ready again, unreachable taints lifted,
	// the registration taint is not added twice.
	k2, err := StartKubelet(ctx, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Stop()
	waitFor(t, "hb-node Ready again", getNode(ctx, kube, "hb-node"))
	_, n = readyCondition(t, kube, "hb-node")
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "karpenter.sh/unregistered" {
		t.Fatalf("taints after re-register: %v", n.Spec.Taints)
	}
	if nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil || len(nodes.Items) != 1 {
		t.Fatalf("nodes after re-register: %v %v", nodes, err)
	}

	// A different machine claiming the same hostname does not take the node over.
	thief := loadConfig(t, workerConfig(t, nil, nodePatch("hb-node", "scaleway-em://fr-par-2/other")))
	k3, err := StartKubelet(ctx, thief, opts)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "conflict error", func() (bool, error) {
		err := k3.Err()
		return err != nil && strings.Contains(err.Error(), "exists with providerID"), err
	})
	k3.Stop()
}

// TestStatusWrittenOnlyWhenChanged: as kubelet since node leases, the
// kubelet renews its Lease every interval but writes the node's status
// only when it changed (another writer's Ready=False is undone, their own
// conditions kept) or when the last write is StatusReportInterval old.
func TestStatusWrittenOnlyWhenChanged(t *testing.T) {
	ctx := context.Background()
	kube := startKube(t)
	cfg := loadConfig(t, workerConfig(t, nil, nodePatch("quiet-node", "scaleway-em://fr-par-2/quiet")))
	opts := KubeletOptions{Client: kube, Hardware: hw, HeartbeatInterval: 100 * time.Millisecond, StatusReportInterval: time.Hour}
	k, err := StartKubelet(ctx, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	waitFor(t, "quiet-node Ready", getNode(ctx, kube, "quiet-node"))
	_, n := readyCondition(t, kube, "quiet-node")
	lease := leaseRenewTime(t, kube, "quiet-node")
	time.Sleep(10 * opts.HeartbeatInterval)
	if _, again := readyCondition(t, kube, "quiet-node"); again.ResourceVersion != n.ResourceVersion {
		t.Errorf("node written again (resourceVersion %s -> %s) with nothing changed", n.ResourceVersion, again.ResourceVersion)
	}
	if got := leaseRenewTime(t, kube, "quiet-node"); !got.After(lease) {
		t.Errorf("lease not renewed in 10 intervals: %v -> %v", lease, got)
	}

	// Another writer sets Ready=False and a condition of its own.
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: "BadDisk", Status: corev1.ConditionTrue, Reason: "Test"})
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Ready again", getNode(ctx, kube, "quiet-node"))
	_, n = readyCondition(t, kube, "quiet-node")
	if !slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == "BadDisk" }) {
		t.Errorf("the other writer's condition is gone: %+v", n.Status.Conditions)
	}

	// With a short report interval the status is written again unchanged.
	k.Stop()
	opts.StatusReportInterval = 300 * time.Millisecond
	k2, err := StartKubelet(ctx, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Stop()
	hb := func() time.Time { c, _ := readyCondition(t, kube, "quiet-node"); return c.LastHeartbeatTime.Time }
	first := hb()
	waitFor(t, "a periodic status report", func() (bool, error) { return hb().After(first.Add(250 * time.Millisecond)), nil })
}

func TestNeverReady(t *testing.T) {
	ctx := context.Background()
	kube := startKube(t)
	cfg := loadConfig(t, workerConfig(t, nil, nodePatch("nr-node", "scaleway-em://fr-par-2/nr")))
	k, err := StartKubelet(ctx, cfg, KubeletOptions{Client: kube, Hardware: hw, NeverReady: true, HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	waitFor(t, "lease of nr-node", func() (bool, error) {
		_, err := kube.CoordinationV1().Leases("kube-node-lease").Get(ctx, "nr-node", metav1.GetOptions{})
		return err == nil, err
	})
	cond, _ := readyCondition(t, kube, "nr-node")
	if cond.Status != corev1.ConditionFalse || cond.Reason != "KubeletNotReady" {
		t.Fatalf("Ready condition %+v", cond)
	}
}

func TestCapacityAndReservations(t *testing.T) {
	cfg := loadConfig(t, workerConfig(t, nil, `machine:
  kubelet:
    extraConfig:
      maxPods: 250
      systemReserved:
        cpu: 500m
        memory: 1Gi
      kubeReserved:
        cpu: 250m
        ephemeral-storage: 1Gi
      evictionHard:
        memory.available: 500Mi
        nodefs.available: 5%
`))
	capa, alloc, err := capacity(cfg, hw)
	if err != nil {
		t.Fatal(err)
	}
	check := func(l corev1.ResourceList, name corev1.ResourceName, want string) {
		t.Helper()
		got := l[name]
		if got.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("%s = %s, want %s", name, got.String(), want)
		}
	}
	check(capa, corev1.ResourcePods, "250")
	check(alloc, corev1.ResourceCPU, "11250m")
	check(alloc, corev1.ResourceMemory, fmt.Sprint(32_000_000_000-(1<<30)-(500<<20)))
	eph := hw.EphemeralBytes
	check(alloc, corev1.ResourceEphemeralStorage, fmt.Sprint(eph-(1<<30)-eph*5/100))

	for _, bad := range []string{
		"machine:\n  kubelet:\n    extraConfig:\n      maxPods: -1\n",
		"machine:\n  kubelet:\n    extraConfig:\n      systemReserved:\n        memory: lots\n",
		"machine:\n  kubelet:\n    extraConfig:\n      evictionHard:\n        nodefs.available: x%\n",
	} {
		if _, _, err := capacity(loadConfig(t, workerConfig(t, nil, bad)), hw); !errors.Is(err, ErrJoinRejected) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestDesiredNodeSources(t *testing.T) {
	cfg := loadConfig(t, workerConfig(t, nil, `machine:
  nodeTaints:
    dedicated: gpu:NoSchedule
  nodeLabels:
    team: a
  kubelet:
    extraArgs:
      node-labels: zone=fr-par-2,rack=r1
      register-with-taints: a=b:PreferNoSchedule
    extraConfig:
      registerWithTaints:
        - key: karpenter.sh/unregistered
          effect: NoExecute
`))
	n, err := desiredNode(cfg, hw)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(n.Name, "talos-") {
		t.Errorf("default hostname %q", n.Name)
	}
	for k, v := range map[string]string{"team": "a", "zone": "fr-par-2", "rack": "r1"} {
		if n.Labels[k] != v {
			t.Errorf("label %s=%q", k, n.Labels[k])
		}
	}
	var taints []string
	for _, tn := range n.Spec.Taints {
		taints = append(taints, tn.ToString())
	}
	if got := strings.Join(taints, ","); got != "karpenter.sh/unregistered:NoExecute,a=b:PreferNoSchedule,dedicated=gpu:NoSchedule" {
		t.Errorf("taints %s", got)
	}
	bad := loadConfig(t, workerConfig(t, nil, "machine:\n  kubelet:\n    extraArgs:\n      register-with-taints: a=b:Sometimes\n"))
	if _, err := desiredNode(bad, hw); !errors.Is(err, ErrJoinRejected) {
		t.Errorf("bad taint effect: %v", err)
	}
	if _, err := StartKubelet(context.Background(), cfg, KubeletOptions{}); err == nil {
		t.Error("kubelet without client started")
	}
}
