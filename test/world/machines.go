package world

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/machine"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/talosapi"
)

// HostOptions tune the simulated machines.
type HostOptions struct {
	// DiskDivisor shrinks the offers' disks (sparse files) to keep tests
	// small; default 1000 (a 1.92 TB NVMe becomes 1.92 GB).
	DiskDivisor int64
	// HeartbeatInterval of the simulated kubelets: their Lease renewals and
	// looks at the node's status (default 10s, a kubelet's).
	HeartbeatInterval time.Duration
	// NotReadyAfter: once a machine stops, its Node turns Unknown after
	// this grace, as the node lifecycle controller does (machine.Options;
	// 0 leaves the Node as it is).
	NotReadyAfter time.Duration
}

// MachineEvent is something a simulated machine did (rescue, boot-empty,
// maintenance, applied, kubelet, join-rejected, poweroff, deleted).
type MachineEvent = machine.Event

// Machines plays every simulated server of a world: test/sim/machine's
// Hosts (file disks and a fake /sys per server, the rescue SSH server that
// runs the uploaded em-imager, the Talos maintenance API and a kubelet), on
// ports picked for this world, with the join policy of this world's cluster
// (CA, endpoint, bootstrap token), plus a record of what the machines did.
type Machines struct {
	*machine.Hosts
	logFile *os.File

	mu         sync.Mutex
	neverReady bool
	events     []MachineEvent
	alive      map[string]bool
}

func newMachines(w *World, join Join, opts HostOptions, sudo machine.SudoPolicy, sshUser string) (*Machines, error) {
	if opts.DiskDivisor == 0 {
		opts.DiskDivisor = 1000
	}
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = 10 * time.Second
	}
	dir := filepath.Join(w.Dir, "machines")
	f, err := os.OpenFile(filepath.Join(dir, "machines.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	// The ports are picked per world so that two worlds on one machine (test
	// packages run in parallel) do not collide on a reused loopback address.
	ports, err := freePorts(2)
	if err != nil {
		f.Close()
		return nil, err
	}
	m := &Machines{logFile: f, alive: map[string]bool{}}
	hosts, err := machine.New(machine.Options{
		Dir: dir, SSHPort: ports[0], TalosPort: ports[1], DiskSizeDivisor: opts.DiskDivisor,
		Kube:              w.Clientset,
		Join:              talosapi.JoinPolicy{RequireBootstrapToken: true, ClusterCA: join.CA, Endpoint: join.Endpoint},
		HeartbeatInterval: opts.HeartbeatInterval,
		NotReadyAfter:     opts.NotReadyAfter,
		NeverReady: func(scwsim.Machine) bool {
			m.mu.Lock()
			defer m.mu.Unlock()
			return m.neverReady
		},
		OnEvent:       m.record,
		RescueSudo:    sudo,
		RescueSSHUser: sshUser,
		Logger:        slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		f.Close()
		return nil, err
	}
	m.Hosts = hosts
	return m, nil
}

// record is called by the hosts with a machine's lock held: it only records.
func (m *Machines) record(ev machine.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, ev)
	if ev.What == "deleted" {
		delete(m.alive, ev.ServerID)
	} else {
		m.alive[ev.ServerID] = true
	}
}

// TalosAPIPort is the port of every Talos API (TALOS_API_PORT).
func (m *Machines) TalosAPIPort() int { return m.TalosPort() }

// SetNeverReady makes nodes registered from now on stay NotReady (a CNI
// that never comes up); false restores healthy nodes for later boots.
func (m *Machines) SetNeverReady(v bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.neverReady = v
}

// Events returns what the machines did so far, in order.
func (m *Machines) Events() []MachineEvent {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]MachineEvent(nil), m.events...)
}

// Alive returns the IDs of servers whose machine exists (not yet deleted).
func (m *Machines) Alive() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]string, 0, len(m.alive))
	for id := range m.alive {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Close powers every machine off.
func (m *Machines) Close() error {
	m.Hosts.Close()
	return m.logFile.Close()
}

// freePorts returns n distinct free TCP ports on the loopback interface.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, errors.Join(errors.New("no free port"), err)
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
