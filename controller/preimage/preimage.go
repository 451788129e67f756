// Package preimage writes the NodeClass's current image onto idle spares in
// the background, so that reusing one costs the machine config and one
// reboot instead of a reboot into rescue, the image write and a reboot.
//
// Every sweep lists the cluster's servers; a spare (phase spare, warm-pool
// or not) that is delivered (status ready) and not already pre-imaged with
// its NodeClass's current image (spare.PreImaged: the image tag, the keyed
// rescue boot that wrote it, its pinned host key) is imaged by
// install.Installer.PreImage: the rescue key is acquired, the server
// rebooted into rescue with it (unless it runs such a boot), em-imager
// writes the image only (verified, first MiB last), the image and disk tags
// are recorded, the key released. The spare stays phase spare throughout
// (Get/List ignore it as before). A spare whose rescue went away (rebooted
// by hand) or whose image is older than its NodeClass's is imaged again by
// the next sweep. Images are written within the installs' imaging slots; a
// spare that failed waits out a backoff. spare.Keeper.Busy makes a take, a
// release or the end of the spare stop the work and wait for it first.
package preimage

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/awslabs/operatorpkg/reconciler"
	"github.com/awslabs/operatorpkg/singleton"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/clocks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/nodeinstall"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
)

// Imager writes an image onto a spare (*install.Installer).
type Imager interface {
	PreImage(ctx context.Context, srv *baremetal.Server, img install.Image, erased func(*baremetal.Server)) (*baremetal.Server, error)
}

// API reads one server afresh (*scaleway.Client).
type API interface {
	GetServer(ctx context.Context, zone scw.Zone, id string) (*baremetal.Server, error)
}

// MaxBackoff caps the wait before a spare that failed is tried again.
const MaxBackoff = time.Hour

// Controller is a singleton that sweeps every Interval.
type Controller struct {
	Kube client.Client
	API  API
	// Servers lists every server of the cluster (inventory.Servers).
	Servers  func(ctx context.Context) ([]*baremetal.Server, error)
	Spares   *spare.Keeper
	Imager   Imager
	Images   nodeinstall.ImageSource
	Interval time.Duration
	Clock    clock.Clock
	Log      logr.Logger
	Metrics  *Metrics

	// base bounds the pre-imagings (the operator's context, from
	// Register): they outlive the sweep that started them, which a
	// reconcile timeout could cancel.
	base context.Context

	mu      sync.Mutex
	running map[string]bool
	failed  map[string]failure
	wg      sync.WaitGroup
}

type failure struct {
	count int
	next  time.Time
}

// Reconcile sweeps once: the spares to image are started in the
// background (bounded by Register's context, else ctx) and the sweep returns.
func (c *Controller) Reconcile(ctx context.Context) (reconciler.Result, error) {
	srvs, err := c.Servers(ctx)
	if err != nil {
		return reconciler.Result{}, err
	}
	if c.base != nil {
		ctx = c.base
	}
	c.forgetFailures(srvs)
	for _, s := range srvs {
		if !c.candidate(s) || !c.start(s.ID) {
			continue
		}
		c.wg.Add(1)
		go func(s *baremetal.Server) {
			defer c.wg.Done()
			defer c.finish(s.ID)
			if _, err := c.ImageSpare(ctx, s); err != nil && ctx.Err() == nil {
				c.Log.Error(err, "pre-imaging a spare failed; it stays a spare, not imaged, and is tried again after a backoff",
					"server", s.ID, "zone", string(s.Zone), "offer", s.OfferName)
			}
		}(s)
	}
	return reconciler.Result{RequeueAfter: c.interval()}, nil
}

// Wait waits for the pre-imagings the sweeps started.
func (c *Controller) Wait() { c.wg.Wait() }

// candidate: a delivered spare, back in rescue (the keeper's reboot of a
// spare that may run its old node comes first: spare.RescuePending), not
// backing off.
func (c *Controller) candidate(s *baremetal.Server) bool {
	if install.PhaseOf(s) != install.PhaseSpare || s.Status != baremetal.ServerStatusReady || spare.RescuePending(s) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f, failed := c.failed[s.ID]
	return !failed || !c.clock().Now().Before(f.next)
}

// forgetFailures drops the backoffs of servers that are no spares in the
// listing (taken, released, gone): a server that is a spare again later
// starts afresh, and the map does not grow with every server that ever failed.
func (c *Controller) forgetFailures(listed []*baremetal.Server) {
	spares := map[string]bool{}
	for _, s := range listed {
		if install.PhaseOf(s) == install.PhaseSpare {
			spares[s.ID] = true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.failed {
		if !spares[id] {
			delete(c.failed, id)
		}
	}
}

func (c *Controller) start(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running[id] {
		return false
	}
	if c.running == nil {
		c.running = map[string]bool{}
	}
	c.running[id] = true
	return true
}

func (c *Controller) finish(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.running, id)
}

// ImageSpare images spare srv with its NodeClass's current image unless it
// holds it already in its keyed rescue boot; it returns whether it wrote
// one. A server that is not (any more) a delivered spare, or whose
// NodeClass is gone or has no resolved image, is left alone. The work
// stops when the spare is taken, released or ended meanwhile
// (spare.Keeper.Busy). A failure is counted and backs the spare off.
func (c *Controller) ImageSpare(ctx context.Context, srv *baremetal.Server) (bool, error) {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	end, ok := c.Spares.Busy(srv.ID, stop)
	if !ok {
		return false, nil
	}
	defer end()
	srv, err := c.freshSpare(ctx, srv)
	if srv == nil || err != nil {
		return false, err
	}
	nc, err := c.nodeClassWithImage(ctx, srv)
	if nc == nil || err != nil {
		return false, err
	}
	if spare.PreImaged(srv, nc.Status.Image.RawSHA256) {
		return false, c.passed(ctx, srv)
	}
	img, err := nodeinstall.ImageFor(ctx, c.Images, nc)
	if err != nil {
		return false, c.failedWith(srv, "image", err)
	}
	if img.SHA256 != nc.Status.Image.RawSHA256 {
		// The NodeClass's status has not caught up with its image yet: the
		// next sweep writes the one it shows.
		return false, nil
	}
	return c.preImage(ctx, srv, nc, img)
}

// freshSpare reads srv afresh once held (a take before the hold shows
// here); nil when it is gone or no longer a delivered spare ready to image.
func (c *Controller) freshSpare(ctx context.Context, srv *baremetal.Server) (*baremetal.Server, error) {
	srv, err := c.API.GetServer(ctx, srv.Zone, srv.ID)
	if scaleway.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if install.PhaseOf(srv) != install.PhaseSpare || srv.Status != baremetal.ServerStatusReady || spare.RescuePending(srv) {
		return nil, nil
	}
	return srv, nil
}

// nodeClassWithImage is the spare's NodeClass when it has a resolved image
// and is not being deleted; nil otherwise.
func (c *Controller) nodeClassWithImage(ctx context.Context, srv *baremetal.Server) (*v1alpha1.ScalewayElasticMetalNodeClass, error) {
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	name, _ := scaleway.TagValue(srv.Tags, scaleway.TagNodeClass)
	if err := c.Kube.Get(ctx, types.NamespacedName{Name: name}, nc); err != nil {
		return nil, client.IgnoreNotFound(err) // gone: its spares are ended, not imaged
	}
	if nc.DeletionTimestamp != nil || nc.Status.Image == nil || nc.Status.Image.RawSHA256 == "" {
		return nil, nil
	}
	return nc, nil
}

// preImage writes img onto spare srv, then clears its failures and its
// quarantine.
// erased is told by the pre-imaging that srv's disks are erased and
// recorded so: the spare is takeable from then on, so the reserved
// offerings' cache counts it at once instead of at its next refresh (not
// after the image write that follows: pods that came meanwhile would be
// given new servers' offerings, seen in TestMonthlyNodePoolReusesSparesAsReservedCapacity).
func (c *Controller) erased(srv *baremetal.Server) {
	if c.Spares.Changed != nil {
		c.Spares.Changed(srv.Zone)
	}
}

func (c *Controller) preImage(ctx context.Context, srv *baremetal.Server, nc *v1alpha1.ScalewayElasticMetalNodeClass, img install.Image) (bool, error) {
	log := c.Log.WithValues("server", srv.ID, "zone", string(srv.Zone), "offer", srv.OfferName, "nodeclass", nc.Name)
	log.Info("pre-imaging a spare", "image", install.ShortDigest(img.SHA256), "imaged", install.Imaged(srv, img.SHA256))
	start := c.clock().Now()
	if _, err := c.Imager.PreImage(ctx, srv, img, c.erased); err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err() // taken, released or stopping: not a failure of the spare
		}
		return false, c.failedWith(srv, failedPhase(err), err)
	}
	c.mu.Lock()
	delete(c.failed, srv.ID)
	c.mu.Unlock()
	if err := c.passed(ctx, srv); err != nil {
		return true, err
	}
	c.Metrics.preImaged(c.clock().Since(start))
	log.Info("spare pre-imaged: a NodeClaim taking it writes its config and boots", "seconds", int(c.clock().Since(start).Seconds()))
	return true, nil
}

// failedPhase is the install phase a pre-imaging failed in, "imaging" when
// the error does not say.
func failedPhase(err error) string {
	var pe *install.PhaseError
	if errors.As(err, &pe) {
		return string(pe.Phase)
	}
	return "imaging"
}

// passed lifts srv's quarantine, if any: a pre-imaging is the health check
// of a spare whose install failed because of the server (a rescue boot
// with the controller's key, a verified image write, a NIC with a link).
func (c *Controller) passed(ctx context.Context, srv *baremetal.Server) error {
	if _, q := spare.Quarantined(srv); !q {
		return nil
	}
	return c.Spares.ClearQuarantine(ctx, srv.Zone, srv.ID)
}

// failedWith counts a failure and backs srv off (Interval doubling per
// failure, at most MaxBackoff).
func (c *Controller) failedWith(srv *baremetal.Server, phase string, err error) error {
	c.Metrics.failed(phase)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed == nil {
		c.failed = map[string]failure{}
	}
	f := c.failed[srv.ID]
	f.count++
	f.next = c.clock().Now().Add(min(c.interval()<<min(f.count-1, 10), MaxBackoff))
	c.failed[srv.ID] = f
	return err
}

func (c *Controller) interval() time.Duration {
	if c.Interval > 0 {
		return c.Interval
	}
	return 2 * time.Minute
}

func (c *Controller) clock() clock.Clock { return clocks.Or(c.Clock) }

// Register adds the singleton to the manager.
func (c *Controller) Register(ctx context.Context, m manager.Manager) error {
	c.base = ctx
	return controllerruntime.NewControllerManagedBy(m).
		Named("scaleway-em.preimage").
		WatchesRawSource(singleton.Source()).
		Complete(singleton.AsReconciler(c))
}

// Metrics of the pre-imager.
type Metrics struct {
	done     prometheus.Counter
	failures *prometheus.CounterVec
	duration prometheus.Histogram
}

// NewMetrics registers the pre-imager's metrics with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		done: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "karpenter_scaleway_em_spares_preimaged_total",
			Help: "Spares written with their NodeClass's current image in the background.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "karpenter_scaleway_em_spare_preimage_failures_total",
			Help: "Failed pre-imagings of spares, by the step that failed (image, rescue, imaging); the spare stays, not imaged, and is retried after a backoff.",
		}, []string{"phase"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "karpenter_scaleway_em_spare_preimage_duration_seconds",
			Help:    "Time to pre-image one spare: the reboot into rescue (when needed) and the verified image write.",
			Buckets: []float64{5, 15, 30, 60, 120, 180, 300, 600, 1200},
		}),
	}
	for _, p := range []string{"image", string(install.PhaseRescue), string(install.PhaseImaging)} {
		m.failures.WithLabelValues(p)
	}
	if reg != nil {
		reg.MustRegister(m.done, m.failures, m.duration)
	}
	return m
}

func (m *Metrics) preImaged(d time.Duration) {
	if m != nil {
		m.done.Inc()
		m.duration.Observe(d.Seconds())
	}
}

func (m *Metrics) failed(phase string) {
	if m != nil {
		m.failures.WithLabelValues(phase).Inc()
	}
}
