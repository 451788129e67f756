// Package rescueboot repairs nodes that kexec booted and their firmware
// took back to rescue. An install that boots Talos by kexec from rescue
// (NodeClass spec.boot Auto) skips Scaleway's reboot, so the API keeps the
// server's boot type at rescue (install.RescueBooted): a later firmware
// reboot (a power cut, a console reboot, a kernel panic) lands in
// Scaleway's rescue system, not in Talos, and the node goes NotReady for
// good. This controller sweeps the joined servers: one whose kexec record
// still stands with boot type rescue, and whose Node has been NotReady for
// NotReadyFor, is rebooted normal through the API, at most once per Window
// per server, with a Warning event on its NodeClaim and the
// karpenter_scaleway_em_rescue_boot_repairs_total metric. The reboot sets
// the boot type to normal, which ends the kexec record (removed from the
// tags): the next firmware reboot boots Talos.
package rescueboot

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/awslabs/operatorpkg/reconciler"
	"github.com/awslabs/operatorpkg/singleton"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// ReasonRescueBootRepaired is the NodeClaim event of a repair.
const ReasonRescueBootRepaired = "RescueBootRepaired"

// Defaults of Controller's durations.
const (
	DefaultInterval    = time.Minute
	DefaultNotReadyFor = time.Minute
	DefaultWindow      = 30 * time.Minute
)

// API is what a repair calls (*scaleway.Client).
type API interface {
	RebootServer(ctx context.Context, zone scw.Zone, id string, bootType baremetal.ServerBootType, sshKeyIDs []string) (*baremetal.Server, error)
	FreshServer(ctx context.Context, zone scw.Zone, id string) (*baremetal.Server, error)
	EditTags(ctx context.Context, zone scw.Zone, id string, edit func(tags []string) ([]string, bool)) (*baremetal.Server, error)
}

// Controller is a singleton that sweeps every Interval.
type Controller struct {
	Kube client.Client
	API  API
	// Servers lists the cluster's servers (inventory.Servers).
	Servers func(ctx context.Context) ([]*baremetal.Server, error)
	// Recorder may be nil.
	Recorder    events.Recorder
	Interval    time.Duration
	NotReadyFor time.Duration
	Window      time.Duration
	Clock       clock.Clock
	Log         logr.Logger
	Repairs     *prometheus.CounterVec

	mu   sync.Mutex
	last map[string]time.Time // server ID -> last repair asked
}

// Repair results (the metric's label).
const (
	ResultRebooted = "rebooted"
	ResultFailed   = "failed"
)

// NewRepairsCounter is karpenter_scaleway_em_rescue_boot_repairs_total.
func NewRepairsCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "karpenter_scaleway_em_rescue_boot_repairs_total",
		Help: "Normal reboots through the API of NotReady nodes that kexec booted and whose server showed boot type rescue (a firmware reboot landed in rescue), by result.",
	}, []string{"result"})
	for _, r := range []string{ResultRebooted, ResultFailed} {
		c.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}

// Reconcile sweeps once.
func (c *Controller) Reconcile(ctx context.Context) (reconciler.Result, error) {
	interval := c.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	srvs, err := c.Servers(ctx)
	if err != nil {
		return reconciler.Result{}, err
	}
	var candidates []*baremetal.Server
	for _, s := range srvs {
		if install.PhaseOf(s) == install.PhaseJoined && install.RescueBooted(s) && s.Status == baremetal.ServerStatusReady {
			candidates = append(candidates, s)
		}
	}
	if len(candidates) == 0 {
		return reconciler.Result{RequeueAfter: interval}, nil
	}
	nodes := &corev1.NodeList{}
	if err := c.Kube.List(ctx, nodes); err != nil {
		return reconciler.Result{}, err
	}
	byProvider := map[string]*corev1.Node{}
	for i := range nodes.Items {
		byProvider[nodes.Items[i].Spec.ProviderID] = &nodes.Items[i]
	}
	for _, s := range candidates {
		node := byProvider[scaleway.ProviderID(s.Zone, s.ID)]
		if node == nil || !c.notReadyLongEnough(node) || !c.due(s.ID) {
			continue
		}
		c.repair(ctx, s, node)
	}
	return reconciler.Result{RequeueAfter: interval}, nil
}

// notReadyLongEnough: the node's Ready condition is not True, and has not
// been for NotReadyFor.
func (c *Controller) notReadyLongEnough(n *corev1.Node) bool {
	wait := c.NotReadyFor
	if wait <= 0 {
		wait = DefaultNotReadyFor
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status != corev1.ConditionTrue && c.clock().Since(cond.LastTransitionTime.Time) >= wait
		}
	}
	return false
}

// due reports whether server id may be repaired now (none within Window),
// and if so counts this one.
func (c *Controller) due(id string) bool {
	window := c.Window
	if window <= 0 {
		window = DefaultWindow
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last = map[string]time.Time{}
	}
	now := c.clock().Now()
	if t, ok := c.last[id]; ok && now.Sub(t) < window {
		return false
	}
	c.last[id] = now
	return true
}

// repair reboots srv normal once a read by ID confirms what the listing
// showed (still joined for the same NodeClaim, still rescue-booted).
func (c *Controller) repair(ctx context.Context, listed *baremetal.Server, node *corev1.Node) {
	log := c.Log.WithValues("server", listed.ID, "zone", string(listed.Zone), "node", node.Name)
	fresh, err := c.API.FreshServer(ctx, listed.Zone, listed.ID)
	if err != nil {
		log.Error(err, "reading a rescue-booted server before its repair")
		c.count(ResultFailed)
		return
	}
	claim, _ := scaleway.TagValue(fresh.Tags, scaleway.TagNodeClaim)
	listedClaim, _ := scaleway.TagValue(listed.Tags, scaleway.TagNodeClaim)
	if claim != listedClaim || install.PhaseOf(fresh) != install.PhaseJoined || !install.RescueBooted(fresh) || fresh.Status != baremetal.ServerStatusReady {
		return // changed since the listing: the next sweep decides again
	}
	if _, err := c.API.RebootServer(ctx, fresh.Zone, fresh.ID, baremetal.ServerBootTypeNormal, nil); err != nil {
		log.Error(err, "rebooting a rescue-booted node normal failed; tried again after the window")
		c.count(ResultFailed)
		return
	}
	c.count(ResultRebooted)
	// The boot type is normal now: the kexec record no longer holds.
	if _, err := c.API.EditTags(ctx, fresh.Zone, fresh.ID, install.DropKexec); err != nil {
		log.Info("removing the kexec record after the repair failed; it is harmless with boot type normal", "error", err.Error())
	}
	msg := fmt.Sprintf("node %s was NotReady while server %s, booted by kexec, showed boot type rescue (a firmware reboot lands in rescue): rebooted it normal through the API", node.Name, fresh.ID)
	log.Info("repaired a rescue-booted node", "nodeclaim", claim)
	c.publish(ctx, claim, msg)
}

func (c *Controller) publish(ctx context.Context, claimName, msg string) {
	if c.Recorder == nil || claimName == "" {
		return
	}
	claim := &karpv1.NodeClaim{}
	if err := c.Kube.Get(ctx, client.ObjectKey{Name: claimName}, claim); err != nil {
		return
	}
	c.Recorder.Publish(events.Event{InvolvedObject: claim, Type: corev1.EventTypeWarning, Reason: ReasonRescueBootRepaired,
		Message: msg, DedupeValues: []string{claimName, ReasonRescueBootRepaired}})
}

func (c *Controller) count(result string) {
	if c.Repairs != nil {
		c.Repairs.WithLabelValues(result).Inc()
	}
}

func (c *Controller) clock() clock.Clock {
	if c.Clock == nil {
		return clock.RealClock{}
	}
	return c.Clock
}

// Register adds the singleton to the manager.
func (c *Controller) Register(_ context.Context, m manager.Manager) error {
	return controllerruntime.NewControllerManagedBy(m).
		Named("rescueboot").
		WatchesRawSource(singleton.Source()).
		Complete(singleton.AsReconciler(c))
}
