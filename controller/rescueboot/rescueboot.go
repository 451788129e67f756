// Package rescueboot repairs nodes that kexec booted and that a firmware
// reboot took back to Scaleway's rescue system.
//
// An install that boots Talos by kexec from rescue (NodeClass spec.boot
// Auto) skips Scaleway's reboot, so the API keeps the server's boot type at
// rescue (install.RescueBooted): a later reboot by the firmware (a power
// cut, a reboot from the console, a kernel panic) lands in rescue, not in
// Talos, and the node stays NotReady. This controller sweeps the cluster's
// servers: a joined one whose kexec record stands with boot type rescue,
// and whose Node has not been Ready for NotReadyFor, is rebooted with boot
// type normal through the API (Decide), at most once per MinInterval per
// server, with an event on its NodeClaim and the
// karpenter_scaleway_em_rescue_boot_repairs_total metric. The reboot sets
// the boot type to normal, which ends the kexec record: the next firmware
// reboot boots Talos.
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

// Event reasons on the NodeClaim.
const (
	ReasonRescueBootRepaired     = "RescueBootRepaired"
	ReasonRescueBootRepairFailed = "RescueBootRepairFailed"
)

// Defaults of Controller's durations.
const (
	DefaultInterval = time.Minute
	// DefaultNotReadyFor rides out a kubelet restart or a short network
	// cut, and is far below Karpenter's node repair toleration (20 min by
	// default), so the node is rebooted before it is replaced.
	DefaultNotReadyFor = 2 * time.Minute
	// DefaultMinInterval is well above a reboot and a Talos boot (5-10 min
	// on real hardware): a server is not rebooted again while the first
	// repair may still be coming up.
	DefaultMinInterval = 30 * time.Minute
)

// Results of a repair (the metric's label).
const (
	ResultRebooted = "rebooted"
	ResultFailed   = "failed"
)

// API is what a repair calls (*scaleway.Client).
type API interface {
	FreshServer(ctx context.Context, zone scw.Zone, id string) (*baremetal.Server, error)
	RebootServer(ctx context.Context, zone scw.Zone, id string, bootType baremetal.ServerBootType, sshKeyIDs []string) (*baremetal.Server, error)
	EditTags(ctx context.Context, zone scw.Zone, id string, edit func(tags []string) ([]string, bool)) (*baremetal.Server, error)
}

// Controller is a singleton that sweeps every Interval.
type Controller struct {
	Kube client.Client
	API  API
	// Servers lists the cluster's servers (inventory.Servers).
	Servers func(ctx context.Context) ([]*baremetal.Server, error)
	// Recorder may be nil.
	Recorder events.Recorder
	// Interval between sweeps; NotReadyFor and MinInterval as in Policy.
	// Zero: the defaults.
	Interval, NotReadyFor, MinInterval time.Duration
	Clock                              clock.Clock
	Log                                logr.Logger
	// Repairs may be nil (NewRepairsCounter).
	Repairs *prometheus.CounterVec

	mu sync.Mutex
	// last is when each server was last rebooted by a repair. In memory:
	// a restart forgets it, but a repaired server's boot type is normal,
	// which Decide never repairs.
	last map[string]time.Time
}

// NewRepairsCounter is karpenter_scaleway_em_rescue_boot_repairs_total,
// both series at zero from the start.
func NewRepairsCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "karpenter_scaleway_em_rescue_boot_repairs_total",
		Help: "Reboots with boot type normal of NotReady nodes that kexec booted while Scaleway still booted their server into rescue, by result (rebooted, failed).",
	}, []string{"result"})
	for _, r := range []string{ResultRebooted, ResultFailed} {
		c.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}

// Policy is the controller's, with the defaults filled in.
func (c *Controller) Policy() Policy {
	p := Policy{NotReadyFor: c.NotReadyFor, MinInterval: c.MinInterval}
	if p.NotReadyFor <= 0 {
		p.NotReadyFor = DefaultNotReadyFor
	}
	if p.MinInterval <= 0 {
		p.MinInterval = DefaultMinInterval
	}
	return p
}

func (c *Controller) interval() time.Duration {
	if c.Interval > 0 {
		return c.Interval
	}
	return DefaultInterval
}

// Reconcile sweeps once: it lists Nodes only when a server was booted by
// kexec and still shows boot type rescue.
func (c *Controller) Reconcile(ctx context.Context) (reconciler.Result, error) {
	srvs, err := c.Servers(ctx)
	if err != nil {
		return reconciler.Result{}, err
	}
	var candidates []*baremetal.Server
	for _, s := range srvs {
		if install.RescueBooted(s) {
			candidates = append(candidates, s)
		}
	}
	next := c.interval()
	if len(candidates) == 0 {
		return reconciler.Result{RequeueAfter: next}, nil
	}
	nodes := &corev1.NodeList{}
	if err := c.Kube.List(ctx, nodes); err != nil {
		return reconciler.Result{}, err
	}
	byProvider := map[string]*corev1.Node{}
	for i := range nodes.Items {
		byProvider[nodes.Items[i].Spec.ProviderID] = &nodes.Items[i]
	}
	now := c.clock().Now()
	for _, s := range candidates {
		d := Decide(c.observe(s, byProvider[scaleway.ProviderID(s.Zone, s.ID)]), c.Policy(), now)
		switch d.Action {
		case Wait:
			// Sooner than a sweep when the wait ends sooner.
			next = min(next, max(d.At.Sub(now), time.Second))
		case Repair:
			c.repair(ctx, s, byProvider[scaleway.ProviderID(s.Zone, s.ID)])
		}
	}
	return reconciler.Result{RequeueAfter: next}, nil
}

// observe builds Decide's input from a server and its Node (nil: none).
func (c *Controller) observe(s *baremetal.Server, node *corev1.Node) Observation {
	claim, _ := scaleway.TagValue(s.Tags, scaleway.TagNodeClaim)
	o := Observation{
		KexecBooted: install.RescueBooted(s),
		Joined:      claim != "" && install.PhaseOf(s) == install.PhaseJoined,
		ServerReady: s.Status == baremetal.ServerStatusReady,
		NodeFound:   node != nil,
	}
	c.mu.Lock()
	o.LastRepair = c.last[s.ID]
	c.mu.Unlock()
	if node == nil {
		return o
	}
	o.NotReadySince = node.CreationTimestamp.Time
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			o.NodeReady = cond.Status
			if !cond.LastTransitionTime.IsZero() {
				o.NotReadySince = cond.LastTransitionTime.Time
			}
		}
	}
	return o
}

// repair reboots listed normal once a read by ID confirms what the
// listing showed (the same NodeClaim, still joined, still rescue-booted,
// ready), then removes the kexec record and tells the NodeClaim.
func (c *Controller) repair(ctx context.Context, listed *baremetal.Server, node *corev1.Node) {
	log := c.Log.WithValues("server", listed.ID, "zone", string(listed.Zone), "node", node.Name)
	fresh, err := c.API.FreshServer(ctx, listed.Zone, listed.ID)
	if err != nil {
		log.Error(err, "reading a rescue-booted server before its repair; the next sweep tries again")
		return
	}
	claim, _ := scaleway.TagValue(fresh.Tags, scaleway.TagNodeClaim)
	listedClaim, _ := scaleway.TagValue(listed.Tags, scaleway.TagNodeClaim)
	if o := c.observe(fresh, node); claim != listedClaim || Decide(o, c.Policy(), c.clock().Now()).Action != Repair {
		return // changed since the listing: the next sweep decides again
	}
	if _, err := c.API.RebootServer(ctx, fresh.Zone, fresh.ID, baremetal.ServerBootTypeNormal, nil); err != nil {
		// Not a reboot: the next sweep tries again (sweeps bound the rate).
		log.Error(err, "rebooting a rescue-booted node with boot type normal failed; the next sweep tries again")
		c.count(ResultFailed)
		c.publish(ctx, claim, corev1.EventTypeWarning, ReasonRescueBootRepairFailed,
			fmt.Sprintf("node %s is not Ready and server %s, booted by kexec, boots into rescue: the reboot with boot type normal failed (%v); tried again at the next sweep", node.Name, fresh.ID, err))
		return
	}
	c.mu.Lock()
	if c.last == nil {
		c.last = map[string]time.Time{}
	}
	c.last[fresh.ID] = c.clock().Now()
	c.mu.Unlock()
	c.count(ResultRebooted)
	// The boot type is normal now: the kexec record no longer holds. Left
	// behind (an API error), it is harmless: RescueBooted also needs boot
	// type rescue.
	if _, err := c.API.EditTags(ctx, fresh.Zone, fresh.ID, install.DropKexec); err != nil {
		log.Info("removing the kexec record after the repair failed; with boot type normal it says nothing", "error", err.Error())
	}
	log.Info("rebooted a kexec-booted node that was not Ready while Scaleway booted its server into rescue", "nodeclaim", claim)
	c.publish(ctx, claim, corev1.EventTypeWarning, ReasonRescueBootRepaired,
		fmt.Sprintf("node %s was not Ready for %s while server %s, booted by kexec, still had boot type rescue (a firmware reboot lands in rescue): rebooted it with boot type normal through the API", node.Name, c.Policy().NotReadyFor, fresh.ID))
}

func (c *Controller) publish(ctx context.Context, claimName, typ, reason, msg string) {
	if c.Recorder == nil || claimName == "" {
		return
	}
	claim := &karpv1.NodeClaim{}
	if err := c.Kube.Get(ctx, client.ObjectKey{Name: claimName}, claim); err != nil {
		return
	}
	c.Recorder.Publish(events.Event{InvolvedObject: claim, Type: typ, Reason: reason, Message: msg,
		DedupeValues: []string{claimName, reason}})
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
