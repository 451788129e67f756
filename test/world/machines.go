package world

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/diskimage"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/hardware"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/talosapi"
)

// HostOptions tune the simulated machines.
type HostOptions struct {
	// DiskDivisor shrinks the offers' disks (sparse files) to keep tests
	// small; default 1000 (a 1.92 TB NVMe becomes 1.92 GB).
	DiskDivisor int64
	// HeartbeatInterval of the simulated kubelets (default 2s).
	HeartbeatInterval time.Duration
}

// Machines plays every simulated server of a world (scwsim.Host): a
// hardware tree with file-backed disks per server, the rescue SSH server
// (which runs the uploaded em-imager for real) when it boots into rescue, and
// when it boots from its disk, either the Talos maintenance API (no config
// yet) or a kubelet registering the Node (config stored on the disk by an
// earlier apply). Each server listens on its own loopback address.
type Machines struct {
	w        *World
	join     Join
	opts     HostOptions
	dir      string
	log      *slog.Logger
	logFile  *os.File
	sshPort  int
	talosAPI int

	mu         sync.Mutex
	servers    map[string]*machineState
	neverReady bool
	events     []MachineEvent
}

// MachineEvent is something a simulated machine did, for progress displays
// and assertions (rescue up, image written, config applied, node registered).
type MachineEvent struct {
	At       time.Time
	ServerID string
	What     string // rescue, rescue-down, maintenance, applied, kubelet, boot-empty, poweroff, deleted
	Detail   string
}

type machineState struct {
	m       scwsim.Machine
	tree    *hardware.Tree
	rescue  *rescue.Server
	maint   *talosapi.Maintenance
	kubelet *talosapi.Kubelet
	// gen counts power cycles, so an apply racing a power-off is dropped.
	gen int
}

func newMachines(w *World, join Join, opts HostOptions) (*Machines, error) {
	if opts.DiskDivisor == 0 {
		opts.DiskDivisor = 1000
	}
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = 2 * time.Second
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
	return &Machines{w: w, join: join, opts: opts, dir: dir, logFile: f,
		log:     slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})),
		sshPort: ports[0], talosAPI: ports[1], servers: map[string]*machineState{}}, nil
}

// SSHPort is the port of every rescue SSH server (RESCUE_SSH_PORT).
func (h *Machines) SSHPort() int { return h.sshPort }

// TalosAPIPort is the port of every Talos API (TALOS_API_PORT).
func (h *Machines) TalosAPIPort() int { return h.talosAPI }

// SetNeverReady makes nodes registered from now on stay NotReady (a CNI
// that never comes up); false restores healthy nodes for later boots.
func (h *Machines) SetNeverReady(v bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.neverReady = v
}

// Events returns what the machines did so far, in order.
func (h *Machines) Events() []MachineEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]MachineEvent(nil), h.events...)
}

// Alive returns the IDs of servers that still have a hardware tree (not deleted).
func (h *Machines) Alive() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ids []string
	for id := range h.servers {
		ids = append(ids, id)
	}
	return ids
}

func (h *Machines) event(id, what, detail string) {
	h.mu.Lock()
	h.events = append(h.events, MachineEvent{At: time.Now(), ServerID: id, What: what, Detail: detail})
	h.mu.Unlock()
	h.log.Info(what, "server", id, "detail", detail)
}

// Boot implements scwsim.Host.
func (h *Machines) Boot(ctx context.Context, m scwsim.Machine, mode scwsim.BootMode, keys []string) error {
	h.mu.Lock()
	st := h.servers[m.ID]
	if st == nil {
		st = &machineState{m: m}
		h.servers[m.ID] = st
	}
	st.m = m
	st.gen++
	gen := st.gen
	h.mu.Unlock()
	if st.tree == nil {
		spec, err := hardware.FromOffer(m.Offer, m.MACs, m.ID, h.opts.DiskDivisor)
		if err != nil {
			return fmt.Errorf("hardware of %s: %w", m.ID, err)
		}
		tree, err := hardware.Create(filepath.Join(h.dir, m.ID), spec)
		if err != nil {
			return fmt.Errorf("hardware of %s: %w", m.ID, err)
		}
		h.mu.Lock()
		st.tree = tree
		h.mu.Unlock()
	}
	switch mode {
	case scwsim.BootRescue:
		return h.bootRescue(st, keys)
	case scwsim.BootNormal:
		return h.bootDisk(ctx, st, gen)
	}
	return fmt.Errorf("boot mode %q", mode)
}

func (h *Machines) bootRescue(st *machineState, keys []string) error {
	home := filepath.Join(st.tree.Dir, "rescue-home")
	bin := filepath.Join(st.tree.Dir, "rescue-bin")
	for _, d := range []string{home, bin} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	srv, err := rescue.Start(rescue.Options{
		Addr: net.JoinHostPort(st.m.IPv4, strconv.Itoa(h.sshPort)), AuthorizedKeys: keys, Home: home, BinDir: bin,
		Env:    []string{hostroot.EnvVar + "=" + st.tree.Sysroot},
		Logger: h.log.With("server", st.m.ID, "role", "rescue"),
	})
	if err != nil {
		return fmt.Errorf("rescue SSH of %s: %w", st.m.ID, err)
	}
	h.mu.Lock()
	st.rescue = srv
	h.mu.Unlock()
	h.event(st.m.ID, "rescue", srv.Addr())
	return nil
}

func (h *Machines) bootDisk(ctx context.Context, st *machineState, gen int) error {
	disk := st.tree.DevicePath(st.tree.InstallDisk().Name)
	layout, err := diskimage.InspectFile(disk)
	if err != nil {
		// No OS (a fresh delivery, or an image that was never verified):
		// the server sits there, as a real one would at a PXE/boot prompt.
		h.event(st.m.ID, "boot-empty", err.Error())
		return nil
	}
	if raw, err := diskimage.ReadState(disk); err == nil && len(raw) > 0 {
		// Installed and configured: Talos boots and kubelet joins again.
		cfg, err := configloader.NewFromBytes(raw)
		if err != nil {
			h.event(st.m.ID, "boot-bad-state", err.Error())
			return nil
		}
		return h.startKubelet(ctx, st, cfg, layout.TalosVersion, gen)
	}
	maint, err := talosapi.StartMaintenance(talosapi.MaintenanceOptions{
		Addr:   net.JoinHostPort(st.m.IPv4, strconv.Itoa(h.talosAPI)),
		Logger: h.log.With("server", st.m.ID, "role", "talos"),
		OnApply: func(ctx context.Context, cfg config.Provider, raw []byte) error {
			if err := diskimage.WriteState(disk, raw); err != nil {
				return err
			}
			h.event(st.m.ID, "applied", "")
			// Talos reboots into the installed system with the config: the
			// kubelet comes up a moment later.
			go func() {
				if err := h.startKubelet(context.Background(), st, cfg, layout.TalosVersion, gen); err != nil {
					h.event(st.m.ID, "kubelet-failed", err.Error())
				}
			}()
			return nil
		},
	})
	if err != nil {
		return fmt.Errorf("Talos API of %s: %w", st.m.ID, err)
	}
	h.mu.Lock()
	st.maint = maint
	h.mu.Unlock()
	h.event(st.m.ID, "maintenance", maint.Addr())
	return nil
}

func (h *Machines) startKubelet(ctx context.Context, st *machineState, cfg config.Provider, version string, gen int) error {
	h.mu.Lock()
	if st.gen != gen || st.kubelet != nil {
		h.mu.Unlock()
		return nil
	}
	neverReady := h.neverReady
	h.mu.Unlock()
	o := st.m.Offer
	var threads, mem int64
	for _, c := range o.CPUs {
		threads += int64(c.ThreadCount)
	}
	for _, mm := range o.Memories {
		mem += int64(mm.Capacity)
	}
	var eph int64
	if len(o.Disks) > 0 {
		eph = int64(o.Disks[0].Capacity)
	}
	k, err := talosapi.StartKubelet(ctx, cfg, talosapi.KubeletOptions{
		Client: h.w.Clientset,
		Hardware: talosapi.Hardware{ServerID: st.m.ID, IPv4: st.m.IPv4, IPv6: st.m.IPv6, CPUThreads: threads,
			MemoryBytes: mem, EphemeralBytes: eph, TalosVersion: version},
		Join:              talosapi.JoinPolicy{RequireBootstrapToken: true, ClusterCA: h.join.CA, Endpoint: h.join.Endpoint},
		NeverReady:        neverReady,
		HeartbeatInterval: h.opts.HeartbeatInterval,
		Logger:            h.log.With("server", st.m.ID, "role", "kubelet"),
	})
	if err != nil {
		h.event(st.m.ID, "join-rejected", err.Error())
		return err
	}
	h.mu.Lock()
	if st.gen != gen || st.kubelet != nil {
		h.mu.Unlock()
		k.Stop()
		return nil
	}
	st.kubelet = k
	h.mu.Unlock()
	h.event(st.m.ID, "kubelet", k.NodeName())
	return nil
}

// PowerOff implements scwsim.Host.
func (h *Machines) PowerOff(id string) {
	h.mu.Lock()
	st := h.servers[id]
	if st == nil {
		h.mu.Unlock()
		return
	}
	st.gen++
	r, m, k := st.rescue, st.maint, st.kubelet
	st.rescue, st.maint, st.kubelet = nil, nil, nil
	h.mu.Unlock()
	if r != nil {
		_ = r.Close()
	}
	if m != nil {
		m.Close()
	}
	if k != nil {
		k.Stop()
	}
	h.event(id, "poweroff", "")
}

// Delete implements scwsim.Host.
func (h *Machines) Delete(id string) {
	h.PowerOff(id)
	h.mu.Lock()
	st := h.servers[id]
	delete(h.servers, id)
	h.mu.Unlock()
	if st != nil && st.tree != nil {
		_ = os.RemoveAll(st.tree.Dir)
	}
	h.event(id, "deleted", "")
}

// Close powers every machine off.
func (h *Machines) Close() error {
	h.mu.Lock()
	var ids []string
	for id := range h.servers {
		ids = append(ids, id)
	}
	h.mu.Unlock()
	for _, id := range ids {
		h.PowerOff(id)
	}
	return h.logFile.Close()
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
