package cloudprovider_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	corev1 "k8s.io/api/core/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/talosapi"
)

// firstWriter plays an attacker on the Internet who reaches a server's
// :50000 before the controller does (legacy MaintenanceAPI delivery) and
// applies a config of its own; the controller's calls go through after it.
type firstWriter struct {
	install.TalosApplier
	attacker talosapi.Applier
	cfg      []byte
	attacked atomic.Bool
	ours     atomic.Int32 // ApplyTo calls of the controller
}

func (f *firstWriter) WaitMaintenance(ctx context.Context, host string, interval time.Duration) (talosapi.Peer, error) {
	if !f.attacked.Load() {
		p, err := f.attacker.WaitMaintenance(ctx, host, interval)
		if err != nil {
			return talosapi.Peer{}, err
		}
		if err := f.attacker.ApplyTo(ctx, p, f.cfg); err != nil {
			return talosapi.Peer{}, err
		}
		f.attacked.Store(true)
	}
	return f.TalosApplier.WaitMaintenance(ctx, host, interval)
}

func (f *firstWriter) ApplyTo(ctx context.Context, peer talosapi.Peer, cfg []byte) error {
	f.ours.Add(1)
	return f.TalosApplier.ApplyTo(ctx, peer, cfg)
}

// attackerConfig is a valid worker config for another cluster.
func attackerConfig(t *testing.T) []byte {
	t.Helper()
	in, err := generate.NewInput("attacker", "https://203.0.113.7:6443", "1.35.0",
		generate.WithVersionContract(config.TalosVersion1_12), generate.WithInstallDisk("/dev/nvme0n1"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := in.Config(machinetype.TypeWorker)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cfg.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Legacy delivery: someone applies a config to the fresh Talos before the
// controller. The install fails in booting, the server is released, no Node
// registers with its provider ID, and the controller sent its config to no
// API but the one it proved in maintenance mode (never after the takeover).
func TestAttackerApplyingFirstInMaintenanceModeReleasesTheServer(t *testing.T) {
	e := startLegacyEnv(t, nil)
	fw := &firstWriter{attacker: talosapi.Applier{Port: e.w.Machines.TalosAPIPort()}, cfg: attackerConfig(t)}
	e.wrap = func(a install.TalosApplier) install.TalosApplier { fw.TalosApplier = a; return fw }
	e.opts.BootTimeout = 30 * time.Second
	e.p = e.newProvider()
	claim := e.nodeClaim()
	got := e.launch(claim)
	e.assertInstallFailed(claim.Name, "phase booting")
	if !fw.attacked.Load() {
		t.Fatal("the attacker never applied its config: the test proves nothing")
	}
	// Talos answers a maintenance-mode apply that lost the race OK and
	// ignores it: at most one apply, only to the key proved in maintenance
	// mode before the takeover; usually none (the API no longer proves it).
	msg := e.events.find(claim.Name, "InstallFailed")[0].Message
	switch n := fw.ours.Load(); {
	case n == 0 && !strings.Contains(msg, "not in maintenance mode"):
		t.Errorf("nothing applied, but the failure does not say the API left maintenance mode: %s", msg)
	case n == 1 && !strings.Contains(msg, "applying the machine config") && !strings.Contains(msg, "node's registration"):
		// One apply to the key proved in maintenance mode: refused (the API
		// changed key: apid took over; nothing was sent) or answered OK and
		// ignored (the node never registers).
		t.Errorf("applied once, but the failure is neither the apply nor the node never registering: %s", msg)
	case n > 1:
		t.Errorf("the controller applied its config %d times", n)
	}
	t.Logf("controller applies: %d; %s", fw.ours.Load(), msg)
	nodes := &corev1.NodeList{}
	if err := e.kube.List(e.ctx, nodes); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.ProviderID == got.Status.ProviderID {
			t.Errorf("node %s registered with the server's provider ID", n.Name)
		}
	}
	e.assertNoDuplicatesNorLeaks()
}
