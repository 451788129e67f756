// Package machine implements scwsim.Host: the machine side of simulated
// Elastic Metal servers. The EM API simulator calls Boot, PowerOff and
// Delete at the edges of a server's state machine; this package then plays
// the hardware (test/sim/hardware), the rescue system (test/sim/rescue), the
// firmware's boot check (test/sim/diskimage) and Talos (test/sim/talosapi).
//
// Per server, under Options.Dir/<server-id>/:
//
//	sysroot/   fake /sys, /proc and /dev with the file-backed disks (EM_IMAGER_SYSROOT)
//	home/      the rescue user's home (emptied at every rescue boot: rescue runs from RAM)
//	bin/       the `sudo` shim put first on PATH
//
// Boot(rescue) starts an SSH server on <ipv4>:SSHPort (user "rescue", only
// the keys given to Boot). Boot(normal) checks the disks in order for a
// bootable Talos-like image (GPT, boot marker, a UKI in the EFI partition):
// none -> nothing listens (a server with no OS). Then Talos gets its config
// in the order Talos 1.12's acquire controller does:
//   - STATE holds a config: it boots installed (the config must validate);
//   - the UKI's kernel arguments say talos.config=metal-iso: config.yaml is
//     read from the metal-iso partition through go-diskfs (the bytes em-imager
//     write-config put there), validated for metal, stored in STATE; without
//     such a partition, or with a config that does not validate, Talos stops
//     there (PhaseBootFailed): nothing listens, no maintenance API, ever;
//   - no talos.config: the maintenance Talos API on <ipv4>:TalosPort, which
//     takes one config (a second apply hangs until the service stops, then
//     loses its connection), stores it in STATE and leaves.
//
// A configured Talos serves its API on TalosPort with mutual TLS only (see
// talosapi.API) and starts the kubelet, which registers the Node. Every call
// and TLS handshake on TalosPort is recorded (TalosAPICalls). PowerOff stops
// every listener, command and heartbeat (and, with NotReadyAfter, marks the
// Node Unknown as the node lifecycle controller would); Delete also removes
// the disks.
//
//	hosts, err := machine.New(machine.Options{Dir: dir, Kube: clientset})
//	opts, _ := scwsim.Profile(scwsim.ProfileTest)
//	opts.Host = hosts // the EM API simulator drives it
//	defer hosts.Close()
//
// Run its tests (they start a real kube-apiserver from bin/, see test/testenv,
// and use $TEST_ASSET_EM_IMAGER or build ./imager/cmd/em-imager):
//
//	go test -count=1 -race ./test/sim/machine/
package machine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/configpart"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/faketree"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/kernelargs"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/kexec"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/diskimage"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/hardware"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/talosapi"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/talosvolumes"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
	"golang.org/x/crypto/ssh"
	"k8s.io/client-go/kubernetes"
)

// Default ports. 22 would clash with the host's own sshd on loopback, so the
// simulated rescue SSH listens on 2222 unless told otherwise.
const (
	DefaultSSHPort         = 2222
	DefaultTalosPort       = 50000
	DefaultDiskSizeDivisor = 1000
)

// Options configure the simulated machines.
type Options struct {
	// Dir holds one directory per server (required).
	Dir string
	// SSHPort of the rescue system (DefaultSSHPort when 0).
	SSHPort int
	// TalosPort of the Talos API (DefaultTalosPort when 0).
	TalosPort int
	// DiskSizeDivisor scales the offer's disk sizes down (DefaultDiskSizeDivisor
	// when 0; 1 keeps the real sizes, as sparse files).
	DiskSizeDivisor int64
	// Kube is the cluster the kubelets register with (required to register nodes;
	// without it an applied config leaves the machine with a kubelet error).
	Kube kubernetes.Interface
	// Join decides which configs could really join (see talosapi.JoinPolicy).
	Join talosapi.JoinPolicy
	// HeartbeatInterval of the kubelets (5s when 0).
	HeartbeatInterval time.Duration
	// NotReadyAfter: once a machine stops (power-off, delete), mark its Node
	// Unknown with the unreachable taints after this grace, as the node
	// lifecycle controller does (40s in a real cluster). 0 leaves the Node as it is.
	NotReadyAfter time.Duration
	// NeverReady picks machines whose Node registers but never becomes Ready.
	NeverReady func(m scwsim.Machine) bool
	// OnEvent, when set, is told what each machine does (called with the
	// machine's lock held: do not call back into Hosts from it).
	OnEvent func(Event)
	// Hardware, when set, adjusts a machine's hardware before each boot
	// (e.g. add a mount to make a disk busy, mark a disk removable).
	Hardware func(m scwsim.Machine, spec *hardware.Spec)
	// RescueSudo is what sudo wants from the rescue user (default
	// SudoPasswordless). The user itself is the one the API shows for the
	// boot (scwsim.Options.RescueUser).
	RescueSudo SudoPolicy
	// RescueSSHUser, when set, is the only user the rescue hosts take the
	// key for, whatever user the API shows for the boot: with a per-server
	// API user, the variant where the API's rescue_server.user refuses the
	// key and the configured user (RESCUE_SSH_USER) is the one to use.
	RescueSSHUser string
	Logger        *slog.Logger
}

// SudoPolicy is what sudo wants from the rescue user in rescue boots.
type SudoPolicy string

const (
	// SudoPasswordless: sudo -n works (the key-only "rescue" user).
	SudoPasswordless SudoPolicy = ""
	// SudoAPIPassword: sudo wants the password the API shows for the boot
	// (rescue_server.password), as the per-server em-XXXXX users' does.
	SudoAPIPassword SudoPolicy = "api-password"
	// SudoRefusesAPIPassword: sudo wants a password and refuses the one
	// the API shows (an API and a rescue system that disagree).
	SudoRefusesAPIPassword SudoPolicy = "refuses-api-password"
)

// Phase is what a machine is doing.
type Phase string

const (
	PhaseOff         Phase = "off"
	PhaseRescue      Phase = "rescue"      // rescue SSH up
	PhaseNoOS        Phase = "no-os"       // booted normally, nothing bootable on the disks
	PhaseMaintenance Phase = "maintenance" // Talos maintenance API up
	PhaseRunning     Phase = "running"     // Talos configured, kubelet started
	// PhaseBootFailed: Talos booted but has no usable config (metal-iso
	// missing or invalid, invalid STATE): it retries forever, nothing listens.
	PhaseBootFailed Phase = "boot-failed"
	// PhaseKexec: em-imager kexec jumped from rescue: rescue is gone and
	// the loaded Talos boots (Machine.KexecBoot), nothing listens yet.
	PhaseKexec Phase = "kexec"
)

// How a running system was booted (Status.BootedBy).
const (
	BootedByFirmware = "firmware" // an API reboot, start or delivery
	BootedByKexec    = "kexec"    // em-imager's jump from rescue
)

// Where a running Talos got its config (Status.ConfigSource).
const (
	ConfigFromState       = "state"
	ConfigFromMetalISO    = "metal-iso"
	ConfigFromMaintenance = "maintenance"
)

// Event is something a machine did, for progress displays and assertions.
type Event struct {
	At       time.Time
	ServerID string
	// What: rescue, boot-empty, boot-bad-state, maintenance, applied,
	// config-from-disk, config-missing, config-invalid, kubelet,
	// join-rejected, poweroff, deleted, metal-iso-lost (LoseMetalISO).
	What   string
	Detail string
}

func (h *Hosts) event(id, what, detail string) {
	if h.opts.OnEvent != nil {
		h.opts.OnEvent(Event{At: time.Now(), ServerID: id, What: what, Detail: detail})
	}
}

// Status is a machine's state, for tests and the demo.
type Status struct {
	Phase     Phase
	SSHAddr   string // rescue
	TalosAddr string // maintenance
	// BootDisk is the disk Talos booted from (normal boots).
	BootDisk string
	// EphemeralDisk is the disk EPHEMERAL is on (its kernel name), where
	// the config's volume documents placed it.
	EphemeralDisk string
	// BootError says why a normal boot found no OS, or no config.
	BootError string
	// ConfigSource is where a running Talos got its config (ConfigFrom*).
	ConfigSource string
	NodeName     string
	// KubeletError is why the node did not register (join rejected...) or the
	// last heartbeat failure.
	KubeletError string
	// BootedBy says how the running system started: BootedByFirmware or
	// BootedByKexec ("" while off).
	BootedBy string
}

// Hosts implements scwsim.Host for any number of machines.
type Hosts struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	machines map[string]*host

	faultMu sync.Mutex
	loseISO map[string]bool // LoseMetalISO
}

var _ scwsim.Host = (*Hosts)(nil)

// ctxMutex is a mutex whose Lock can give up when a context ends. The Talos
// API's apply handler takes the machine's lock while a power-off holding it
// waits for that handler (gRPC's Stop waits for running handlers, after
// cancelling their contexts): the handler must be able to give up.
type ctxMutex chan struct{}

func (m ctxMutex) Lock()   { m <- struct{}{} }
func (m ctxMutex) Unlock() { <-m }
func (m ctxMutex) LockContext(ctx context.Context) error {
	select {
	case m <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// host is one machine.
type host struct {
	mu         ctxMutex
	m          scwsim.Machine
	dir        string
	tree       *hardware.Tree
	hostKey    ssh.Signer // of the current rescue boot
	neverReady *bool
	status     Status

	rescue      *rescue.Server
	maintenance *talosapi.Maintenance
	api         *talosapi.API
	talosLogs   []interface{ Calls() []talosapi.Call } // every Talos API this machine served
	kubelet     *talosapi.Kubelet
	unknown     *time.Timer // pending MarkUnknown after power-off
	kexecBoot   *time.Timer // pending Talos start after a kexec jump
	bootCount   int
}

// New returns the machines' host side; call Close when done.
func New(opts Options) (*Hosts, error) {
	if opts.Dir == "" {
		return nil, errors.New("machine: Options.Dir is required")
	}
	if opts.SSHPort == 0 {
		opts.SSHPort = DefaultSSHPort
	}
	if opts.TalosPort == 0 {
		opts.TalosPort = DefaultTalosPort
	}
	if opts.SSHPort < 0 || opts.SSHPort > 65535 || opts.TalosPort < 0 || opts.TalosPort > 65535 {
		return nil, fmt.Errorf("machine: ports %d/%d: must be 1-65535", opts.SSHPort, opts.TalosPort)
	}
	if opts.DiskSizeDivisor == 0 {
		opts.DiskSizeDivisor = DefaultDiskSizeDivisor
	}
	if opts.DiskSizeDivisor < 1 {
		return nil, fmt.Errorf("machine: DiskSizeDivisor %d: must be at least 1", opts.DiskSizeDivisor)
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Hosts{opts: opts, log: log, machines: map[string]*host{}}, nil
}

// SSHPort is the port rescue systems listen on.
func (h *Hosts) SSHPort() int { return h.opts.SSHPort }

// TalosPort is the port the Talos API listens on.
func (h *Hosts) TalosPort() int { return h.opts.TalosPort }

func (h *Hosts) get(id string, create bool, m scwsim.Machine) (*host, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if x, ok := h.machines[id]; ok {
		return x, nil
	}
	if !create {
		return nil, fmt.Errorf("machine %s: unknown", id)
	}
	x := &host{mu: make(ctxMutex, 1), m: m, dir: filepath.Join(h.opts.Dir, id), status: Status{Phase: PhaseOff}}
	h.machines[id] = x
	return x, nil
}

// Boot implements scwsim.Host. Listeners start before it returns; nothing
// here blocks on the network.
func (h *Hosts) Boot(_ context.Context, m scwsim.Machine, mode scwsim.BootMode, sshPublicKeys []string) error {
	if err := checkBootable(m); err != nil {
		return err
	}
	x, err := h.get(m.ID, true, m)
	if err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	h.stopLocked(x, false) // a boot is a reboot when it was running
	x.m = m
	// A Node whose kubelet stopped with the power still turns Unknown when
	// the machine comes back in rescue (a firmware reboot of a kexec-booted
	// node): rescue runs no kubelet to post its status. Only Talos's boot
	// brings the heartbeat back.
	if x.unknown != nil && mode != scwsim.BootRescue {
		x.unknown.Stop()
		x.unknown = nil
	}
	if err := h.powerOnLocked(x, mode); err != nil {
		return err
	}
	x.bootCount++
	log := h.log.With("server", m.ID, "mode", mode)
	switch mode {
	case scwsim.BootRescue:
		return h.bootRescue(x, sshPublicKeys, log)
	case scwsim.BootNormal:
		err := h.bootNormal(x, log)
		x.status.BootedBy = BootedByFirmware
		return err
	}
	return fmt.Errorf("machine %s: unknown boot mode %q", m.ID, mode)
}

// checkBootable refuses a machine the simulator cannot boot: no ID, or no
// IPv4 address to serve its APIs on.
func checkBootable(m scwsim.Machine) error {
	if m.ID == "" {
		return errors.New("machine: Boot: Machine.ID is empty")
	}
	if ip := net.ParseIP(m.IPv4); ip == nil || ip.To4() == nil {
		return fmt.Errorf("machine %s: Boot: IPv4 %q is not an IPv4 address", m.ID, m.IPv4)
	}
	return nil
}

// powerOnLocked lays out the machine's hardware from its offer (disks
// keep their contents across boots) and the kexec switches for mode.
// Caller holds x.mu.
func (h *Hosts) powerOnLocked(x *host, mode scwsim.BootMode) error {
	m := x.m
	spec, err := hardware.FromOffer(m.Offer, m.MACs, m.ID, h.opts.DiskSizeDivisor)
	if err != nil {
		return fmt.Errorf("machine %s: %w", m.ID, err)
	}
	if h.opts.Hardware != nil {
		h.opts.Hardware(m, &spec)
	}
	if x.tree, err = hardware.Create(x.dir, spec); err != nil {
		return fmt.Errorf("machine %s: hardware: %w", m.ID, err)
	}
	if err := writeKexecSwitches(x.tree.Sysroot, mode, m.Kexec); err != nil {
		return fmt.Errorf("machine %s: kexec switches: %w", m.ID, err)
	}
	return nil
}

func (h *Hosts) bootRescue(x *host, keys []string, log *slog.Logger) error {
	// Rescue runs from RAM and generates its host key at boot: every rescue
	// boot of a server shows a new key, as Scaleway's does.
	key, err := rescue.NewHostKey()
	if err != nil {
		return fmt.Errorf("machine %s: rescue host key: %w", x.m.ID, err)
	}
	x.hostKey = key
	home := filepath.Join(x.dir, "home")
	if err := os.RemoveAll(home); err != nil {
		return err
	}
	var sudoPassword string
	switch h.opts.RescueSudo {
	case SudoAPIPassword:
		sudoPassword = x.m.RescuePassword
	case SudoRefusesAPIPassword:
		sudoPassword = "not-" + x.m.RescuePassword
	}
	sshUser := x.m.RescueUser
	if h.opts.RescueSSHUser != "" {
		sshUser = h.opts.RescueSSHUser
	}
	srv, err := rescue.Start(rescue.Options{
		Addr:           net.JoinHostPort(x.m.IPv4, strconv.Itoa(h.opts.SSHPort)),
		User:           sshUser,
		SudoPassword:   sudoPassword,
		AuthorizedKeys: keys,
		Home:           home,
		BinDir:         filepath.Join(x.dir, "bin"),
		Env:            []string{"EM_IMAGER_SYSROOT=" + x.tree.Sysroot},
		HostKey:        x.hostKey,
		Logger:         log,
		// Kept beside the machines (not in the machine's directory, which
		// goes with the server) for tests that read what rescue said.
		Transcript: filepath.Join(h.opts.Dir, "transcripts", x.m.ID),
		Halted:     h.kexecHalt(x, x.bootCount),
	})
	if err != nil {
		return fmt.Errorf("machine %s: rescue: %w", x.m.ID, err)
	}
	x.rescue = srv
	x.status = Status{Phase: PhaseRescue, SSHAddr: srv.Addr(), BootedBy: BootedByFirmware}
	log.Info("rescue system up", "ssh", srv.Addr())
	h.event(x.m.ID, "rescue", srv.Addr())
	return nil
}

// writeKexecSwitches lays out what the rescue kernel says about kexec
// (refusal: scwsim.Options.Kexec's value, "" accepts) and removes what a
// jump of the previous boot left: a new kernel has nothing loaded.
func writeKexecSwitches(sysroot string, mode scwsim.BootMode, refusal string) error {
	// hardware.Create rewrote sys/ and proc/; kexec/ is only ours.
	if err := os.RemoveAll(filepath.Join(sysroot, "kexec")); err != nil {
		return err
	}
	if mode != scwsim.BootRescue || refusal == scwsim.KexecUnsupported {
		// No kexec_load_disabled: em-imager finds no kexec at all.
		return nil
	}
	var k faketree.Kexec
	switch refusal {
	case "":
	case scwsim.KexecDisabled:
		k.Disabled = true
	case scwsim.KexecLockdown:
		k.Lockdown = "integrity"
	case scwsim.KexecSecureBoot:
		k.SecureBoot = true
	default:
		k.Refuse = refusal // an errno name kexec_file_load fails with
	}
	return faketree.BuildKexec(sysroot, k)
}

// kexecHalt is the rescue server's Halted hook for boot number boot: after
// each command, a jump recorded in the fake root ends rescue (the command's
// connection drops without an exit status) and starts the loaded Talos.
func (h *Hosts) kexecHalt(x *host, boot int) func() bool {
	sysroot := x.tree.Sysroot
	return func() bool {
		rec, err := kexec.ReadRecord(hostroot.Root{Dir: sysroot})
		if err != nil || !rec.Jumped {
			return false
		}
		// Not under x.mu here: the command's session goroutine calls this,
		// and closing rescue waits for that goroutine.
		go h.kexecJump(x, boot)
		return true
	}
}

// kexecJump plays what follows reboot(LINUX_REBOOT_CMD_KEXEC): rescue
// goes away at once (its listeners and commands with it), and after
// Machine.KexecBoot the Talos on the disk runs, without the firmware: the
// API's status and boot type see nothing of it.
func (h *Hosts) kexecJump(x *host, boot int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.bootCount != boot {
		return // rebooted or powered off meanwhile
	}
	h.stopLocked(x, false)
	x.bootCount++
	boot = x.bootCount
	x.status = Status{Phase: PhaseKexec, BootedBy: BootedByKexec}
	h.event(x.m.ID, "kexec", x.m.KexecBoot.String())
	log := h.log.With("server", x.m.ID, "mode", "kexec")
	log.Info("kexec jump: rescue is gone, Talos boots", "in", x.m.KexecBoot)
	x.kexecBoot = time.AfterFunc(x.m.KexecBoot, func() {
		x.mu.Lock()
		defer x.mu.Unlock()
		if x.bootCount != boot {
			return
		}
		x.kexecBoot = nil
		if err := h.bootNormal(x, log); err != nil {
			log.Warn("talos after kexec", "err", err)
		}
		x.status.BootedBy = BootedByKexec
	})
}

// bootNormal plays the firmware (first bootable disk in order) and Talos.
func (h *Hosts) bootNormal(x *host, log *slog.Logger) error {
	if err := h.wipeMetalISOLocked(x); err != nil {
		return fmt.Errorf("machine %s: losing metal-iso: %w", x.m.ID, err)
	}
	disk, layout, errs := findBootDisk(x)
	if layout == nil {
		x.status = Status{Phase: PhaseNoOS, BootError: fmt.Sprint(errs)}
		log.Info("no bootable disk", "why", errs)
		h.event(x.m.ID, "boot-empty", fmt.Sprint(errs))
		return nil
	}
	x.status = Status{BootDisk: disk}
	raw, err := diskimage.ReadState(disk)
	if err != nil {
		// A corrupt STATE: Talos would not find a config there.
		log.Warn("STATE unreadable", "err", err)
		h.event(x.m.ID, "boot-bad-state", err.Error())
		raw = nil
	}
	if raw != nil {
		cfg, err := loadConfig(raw, talosapi.InstalledMode{})
		if err != nil {
			// Talos's acquire controller fails on it and retries: no maintenance.
			h.bootFailedLocked(x, "config-invalid", fmt.Errorf("machine config in STATE: %w", err), log)
			return nil
		}
		x.status.ConfigSource = ConfigFromState
		return h.runTalosLocked(x, cfg, layout, log)
	}
	switch source, ok := kernelargs.Get(layout.KernelArgs, kernelargs.ConfigParam); {
	case ok && source == kernelargs.ConfigMetalISO:
		return h.bootMetalISOLocked(x, disk, layout, log)
	case ok && source != "none":
		h.bootFailedLocked(x, "config-missing", fmt.Errorf("%s=%s: a config URL is not simulated", kernelargs.ConfigParam, source), log)
		return nil
	}
	return h.startMaintenanceLocked(x, disk, layout, log)
}

// findBootDisk is the first disk, in the firmware's order, that holds a
// bootable Talos layout; with none, why each disk was passed over.
func findBootDisk(x *host) (string, *diskimage.Layout, []string) {
	var errs []string
	for _, d := range x.tree.Spec.Disks {
		p := x.tree.DevicePath(d.Name)
		l, err := diskimage.InspectFile(p)
		if err == nil {
			return p, l, nil
		}
		errs = append(errs, d.Name+": "+err.Error())
	}
	return "", nil, errs
}

// startMaintenanceLocked starts Talos's maintenance API, as a Talos with no
// config does: an applied config is saved to STATE and starts the kubelet,
// then apid once the maintenance service is gone. An apply that races a
// reboot is refused. Caller holds x.mu.
func (h *Hosts) startMaintenanceLocked(x *host, disk string, layout *diskimage.Layout, log *slog.Logger) error {
	bootCount := x.bootCount
	m, err := talosapi.StartMaintenance(talosapi.MaintenanceOptions{
		Addr:   net.JoinHostPort(x.m.IPv4, strconv.Itoa(h.opts.TalosPort)),
		Logger: log,
		OnApply: func(ctx context.Context, cfg config.Provider, raw []byte) error {
			if err := x.mu.LockContext(ctx); err != nil {
				return err
			}
			defer x.mu.Unlock()
			if x.bootCount != bootCount {
				return errors.New("machine rebooted while applying the configuration")
			}
			if err := diskimage.WriteState(disk, raw); err != nil {
				return fmt.Errorf("failed to save config: %w", err)
			}
			m := x.maintenance
			x.maintenance = nil // it stops itself once this call returns
			x.status.ConfigSource = ConfigFromMaintenance
			h.event(x.m.ID, "applied", "")
			h.startKubeletLocked(x, cfg, layout, log)
			// apid takes the port over once the maintenance service is gone.
			go func() {
				<-m.Done()
				x.mu.Lock()
				defer x.mu.Unlock()
				if x.bootCount == bootCount {
					h.startAPILocked(x, cfg, layout, log)
				}
			}()
			return nil
		},
	})
	if err != nil {
		return fmt.Errorf("machine %s: talos api: %w", x.m.ID, err)
	}
	x.maintenance = m
	x.talosLogs = append(x.talosLogs, m)
	x.status.Phase = PhaseMaintenance
	x.status.TalosAddr = m.Addr()
	log.Info("talos maintenance api up", "addr", m.Addr())
	h.event(x.m.ID, "maintenance", m.Addr())
	return nil
}

// bootMetalISOLocked is Talos's metal platform with talos.config=metal-iso:
// config.yaml from the volume named (or labelled) metal-iso, or nothing.
func (h *Hosts) bootMetalISOLocked(x *host, disk string, layout *diskimage.Layout, log *slog.Logger) error {
	raw, vol, err := configpart.Read(disk, diskimage.SectorSize)
	if err != nil {
		// blockutils.ReadFromVolume: volume missing -> the platform fails,
		// the acquire controller retries; it never falls back to maintenance.
		h.bootFailedLocked(x, "config-missing", fmt.Errorf("%s=%s: %w", kernelargs.ConfigParam, kernelargs.ConfigMetalISO, err), log)
		return nil
	}
	cfg, err := loadConfig(raw, talosapi.MetalMode{})
	if err != nil {
		h.bootFailedLocked(x, "config-invalid", fmt.Errorf("config from %s: %w", configpart.PartitionName, err), log)
		return nil
	}
	if err := diskimage.WriteState(disk, raw); err != nil {
		h.bootFailedLocked(x, "config-invalid", fmt.Errorf("failed to save config: %w", err), log)
		return nil
	}
	sum := sha256.Sum256(raw)
	x.status.ConfigSource = ConfigFromMetalISO
	log.Info("machine config read from disk", "partition", vol.PartitionNumber, "sha256", hex.EncodeToString(sum[:]))
	h.event(x.m.ID, "config-from-disk", fmt.Sprintf("partition %d, sha256 %x", vol.PartitionNumber, sum))
	return h.runTalosLocked(x, cfg, layout, log)
}

// loadConfig parses and validates a config as Talos does before using it.
func loadConfig(raw []byte, mode validation.RuntimeMode) (config.Provider, error) {
	cfg, err := configloader.NewFromBytes(raw)
	if err != nil {
		return nil, fmt.Errorf("failed to load config: %w", err)
	}
	if _, err := cfg.Validate(mode); err != nil {
		return nil, fmt.Errorf("failed to validate config: %w", err)
	}
	return cfg, nil
}

func (h *Hosts) bootFailedLocked(x *host, what string, err error, log *slog.Logger) {
	x.status.Phase = PhaseBootFailed
	x.status.BootError = err.Error()
	log.Warn("talos has no usable machine config; it stays down", "err", err)
	h.event(x.m.ID, what, err.Error())
}

// runTalosLocked is a configured Talos: apid on TalosPort, then the kubelet.
func (h *Hosts) runTalosLocked(x *host, cfg config.Provider, layout *diskimage.Layout, log *slog.Logger) error {
	h.startAPILocked(x, cfg, layout, log)
	h.startKubeletLocked(x, cfg, layout, log)
	return nil
}

func (h *Hosts) startAPILocked(x *host, cfg config.Provider, layout *diskimage.Layout, log *slog.Logger) {
	a, err := talosapi.StartAPI(talosapi.APIOptions{
		Addr: net.JoinHostPort(x.m.IPv4, strconv.Itoa(h.opts.TalosPort)), Config: cfg, TalosVersion: layout.TalosVersion, Logger: log,
	})
	if err != nil {
		log.Warn("talos api", "err", err)
		return
	}
	x.api = a
	x.talosLogs = append(x.talosLogs, a)
}

// startKubeletLocked starts the kubelet; a config that cannot join leaves
// the machine running with the reason in KubeletError, as a real node whose
// kubelet keeps failing.
func (h *Hosts) startKubeletLocked(x *host, cfg config.Provider, layout *diskimage.Layout, log *slog.Logger) {
	x.status.Phase = PhaseRunning
	x.status.TalosAddr = ""
	if h.opts.Kube == nil {
		x.status.KubeletError = "no Kubernetes client configured in the simulator"
		h.event(x.m.ID, "join-rejected", x.status.KubeletError)
		return
	}
	offer := x.m.Offer
	hw := talosapi.Hardware{ServerID: x.m.ID, IPv4: x.m.IPv4, IPv6: x.m.IPv6, TalosVersion: layout.TalosVersion}
	for _, c := range offer.CPUs {
		if c != nil {
			hw.CPUThreads += int64(c.ThreadCount)
		}
	}
	for _, mem := range offer.Memories {
		if mem != nil {
			hw.MemoryBytes += int64(mem.Capacity)
		}
	}
	// Ephemeral storage is the filesystem of EPHEMERAL on the disk the
	// config's volume documents put it on, sized as the offer sells that
	// disk (not the scaled-down file): a wrong selector is a wrong capacity.
	eph, err := h.volumesLocked(x, cfg)
	if err != nil {
		// Talos waits for EPHEMERAL before it starts the kubelet.
		x.status.KubeletError = "EPHEMERAL volume: " + err.Error()
		log.Warn("volumes", "err", err)
		h.event(x.m.ID, "join-rejected", x.status.KubeletError)
		return
	}
	hw.EphemeralBytes = eph
	neverReady := h.opts.NeverReady != nil && h.opts.NeverReady(x.m)
	if x.neverReady != nil {
		neverReady = *x.neverReady
	}
	k, err := talosapi.StartKubelet(context.Background(), cfg, talosapi.KubeletOptions{
		Client: h.opts.Kube, Hardware: hw, Join: h.opts.Join, NeverReady: neverReady,
		HeartbeatInterval: h.opts.HeartbeatInterval, Logger: log,
	})
	if err != nil {
		x.status.KubeletError = err.Error()
		log.Warn("kubelet cannot join", "err", err)
		h.event(x.m.ID, "join-rejected", err.Error())
		return
	}
	x.kubelet = k
	x.status.NodeName = k.NodeName()
	log.Info("kubelet started", "node", k.NodeName())
	h.event(x.m.ID, "kubelet", k.NodeName())
}

// volumesLocked lets the simulated volume manager locate or provision
// EPHEMERAL and the user volumes on the machine's disks, and returns the
// ephemeral-storage capacity: EPHEMERAL's XFS on the offer's size of its disk.
func (h *Hosts) volumesLocked(x *host, cfg config.Provider) (int64, error) {
	sizes := make([]int64, len(x.tree.Spec.Disks))
	system := -1
	for i, d := range x.tree.Spec.Disks {
		if i < len(x.m.Offer.Disks) && x.m.Offer.Disks[i] != nil {
			sizes[i] = int64(x.m.Offer.Disks[i].Capacity)
		}
		if x.tree.DevicePath(d.Name) == x.status.BootDisk {
			system = i
		}
	}
	disks, err := talosvolumes.Disks(x.tree, sizes)
	if err != nil {
		return 0, err
	}
	eph, others := talosvolumes.Manage(cfg, disks, system)
	for _, v := range others {
		if v.Err != nil {
			// A user volume Talos cannot place is reported, the node still runs.
			h.event(x.m.ID, "volume-failed", v.Name+": "+v.Err.Error())
		}
	}
	if eph.Err != nil {
		return 0, eph.Err
	}
	x.status.EphemeralDisk = x.tree.Spec.Disks[eph.Disk].Name
	return localdisks.EphemeralBytes(sizes[eph.Disk], eph.Disk == system), nil
}

// stopLocked powers the machine off: listeners, commands, heartbeat.
func (h *Hosts) stopLocked(x *host, markUnknown bool) {
	if x.rescue != nil {
		_ = x.rescue.Close()
		x.rescue = nil
	}
	if x.maintenance != nil {
		x.maintenance.Close()
		x.maintenance = nil
	}
	if x.api != nil {
		x.api.Close()
		x.api = nil
	}
	if x.kexecBoot != nil {
		x.kexecBoot.Stop()
		x.kexecBoot = nil
	}
	if x.kubelet != nil {
		x.kubelet.Stop()
		node := x.kubelet.NodeName()
		x.kubelet = nil
		if markUnknown && h.opts.NotReadyAfter > 0 && h.opts.Kube != nil {
			kube := h.opts.Kube
			x.unknown = time.AfterFunc(h.opts.NotReadyAfter, func() {
				if err := talosapi.MarkUnknown(context.Background(), kube, node); err != nil {
					h.log.Warn("mark node unknown", "node", node, "err", err)
				}
			})
		}
	}
	x.status = Status{Phase: PhaseOff}
}

// PowerOff implements scwsim.Host.
func (h *Hosts) PowerOff(serverID string) {
	x, err := h.get(serverID, false, scwsim.Machine{})
	if err != nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.bootCount++
	h.stopLocked(x, true)
	h.event(serverID, "poweroff", "")
}

// Delete implements scwsim.Host: the machine is powered off and its disks
// released; once Status reports it unknown, its directory is gone.
func (h *Hosts) Delete(serverID string) {
	h.mu.Lock()
	x, ok := h.machines[serverID]
	h.mu.Unlock()
	if !ok {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.bootCount++
	h.stopLocked(x, true)
	if err := os.RemoveAll(x.dir); err != nil {
		h.log.Warn("remove machine dir", "server", serverID, "err", err)
	}
	h.event(serverID, "deleted", "")
	h.mu.Lock()
	if h.machines[serverID] == x {
		delete(h.machines, serverID)
	}
	h.mu.Unlock()
}

// Close powers every machine off (without marking Nodes Unknown) and cancels pending timers.
func (h *Hosts) Close() {
	h.mu.Lock()
	all := make([]*host, 0, len(h.machines))
	for _, x := range h.machines {
		all = append(all, x)
	}
	h.mu.Unlock()
	for _, x := range all {
		x.mu.Lock()
		h.stopLocked(x, false)
		if x.unknown != nil {
			x.unknown.Stop()
			x.unknown = nil
		}
		x.mu.Unlock()
	}
}

// Status returns the machine's current state.
func (h *Hosts) Status(serverID string) (Status, error) {
	x, err := h.get(serverID, false, scwsim.Machine{})
	if err != nil {
		return Status{}, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	st := x.status
	if x.kubelet != nil {
		if err := x.kubelet.Err(); err != nil {
			st.KubeletError = err.Error()
		}
	}
	return st, nil
}

// Hardware returns the machine's hardware tree (disk files, sysroot).
func (h *Hosts) Hardware(serverID string) (*hardware.Tree, error) {
	x, err := h.get(serverID, false, scwsim.Machine{})
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.tree == nil {
		return nil, fmt.Errorf("machine %s: never booted", serverID)
	}
	return x.tree, nil
}

// TalosAPICalls returns every call (and, on a configured node, every TLS
// handshake) the machine's Talos API received on TalosPort, across boots:
// empty when nothing ever talked to :50000.
func (h *Hosts) TalosAPICalls(serverID string) ([]talosapi.Call, error) {
	x, err := h.get(serverID, false, scwsim.Machine{})
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	var calls []talosapi.Call
	for _, l := range x.talosLogs {
		calls = append(calls, l.Calls()...)
	}
	return calls, nil
}

// HostKey is the SSH host key of the machine's current (or last) rescue
// boot; each rescue boot has a new one.
func (h *Hosts) HostKey(serverID string) (ssh.PublicKey, error) {
	x, err := h.get(serverID, false, scwsim.Machine{})
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.hostKey == nil {
		return nil, fmt.Errorf("machine %s: never booted into rescue", serverID)
	}
	return x.hostKey.PublicKey(), nil
}

// LoseMetalISO makes every later normal boot of serverID find the
// filesystem of its metal-iso partition gone (a disk that lost what rescue
// wrote): Talos booted with talos.config=metal-iso finds no volume and
// stays down. The machine need not exist yet.
func (h *Hosts) LoseMetalISO(serverID string) {
	h.faultMu.Lock()
	defer h.faultMu.Unlock()
	if h.loseISO == nil {
		h.loseISO = map[string]bool{}
	}
	h.loseISO[serverID] = true
}

// wipeMetalISOLocked zeroes the start of every metal-iso filesystem on
// x's disks when LoseMetalISO asked for it.
func (h *Hosts) wipeMetalISOLocked(x *host) error {
	h.faultMu.Lock()
	lose := h.loseISO[x.m.ID]
	h.faultMu.Unlock()
	if !lose {
		return nil
	}
	for _, d := range x.tree.Spec.Disks {
		p := x.tree.DevicePath(d.Name)
		_, vol, err := configpart.Read(p, diskimage.SectorSize)
		if err != nil {
			continue
		}
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = f.WriteAt(make([]byte, min(vol.SizeBytes, 1<<20)), vol.StartBytes)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		h.event(x.m.ID, "metal-iso-lost", fmt.Sprintf("%s partition %d", d.Name, vol.PartitionNumber))
	}
	return nil
}

// SetNeverReady overrides Options.NeverReady for one machine from its next
// kubelet start on (the machine must have booted once).
func (h *Hosts) SetNeverReady(serverID string, never bool) error {
	x, err := h.get(serverID, false, scwsim.Machine{})
	if err != nil {
		return err
	}
	x.mu.Lock()
	x.neverReady = &never
	x.mu.Unlock()
	return nil
}
