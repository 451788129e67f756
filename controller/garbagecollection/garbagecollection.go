// Package garbagecollection releases servers this cluster pays for but no
// NodeClaim uses: orders whose NodeClaim is gone (a crash between ordering and
// recording, a Delete that never ran), duplicates, and monthly spares whose
// minimum lifetime has passed. Karpenter core's own garbage collection covers
// the opposite case (NodeClaims whose server is gone).
package garbagecollection

import (
	"context"
	"fmt"
	"sort"
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
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/bootstraptoken"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// Reasons a server is collected (the metric's label).
const (
	ReasonNoNodeClaim   = "no_nodeclaim"
	ReasonDuplicate     = "duplicate"
	ReasonUntagged      = "no_nodeclaim_tag"
	ReasonSpareExpired  = "spare_expired"
	ReasonSpareOrphaned = "spare_without_nodeclass"
)

// API is what the collector needs of the Scaleway API layer.
type API interface {
	ListServers(ctx context.Context, zone scw.Zone, tags []string) ([]*baremetal.Server, error)
	DeleteServer(ctx context.Context, zone scw.Zone, id string) (*baremetal.Server, error)
}

// Controller is a singleton that sweeps every Interval.
type Controller struct {
	Kube        client.Client
	API         API
	ClusterName string
	// Zones to sweep.
	Zones func(ctx context.Context) ([]string, error)
	// GracePeriod protects a server ordered moments ago whose NodeClaim the
	// cache has not shown yet, or whose NodeClaim is being created.
	GracePeriod time.Duration
	Interval    time.Duration
	Clock       clock.Clock
	Log         logr.Logger
	Collected   *prometheus.CounterVec
	// Tokens, when set, also sweeps the bootstrap tokens of registered or
	// gone NodeClaims whose NodeClass uses per-NodeClaim tokens.
	Tokens *bootstraptoken.Manager
}

// NewCollectedCounter is karpenter_scaleway_em_leaked_servers_collected_total.
func NewCollectedCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "karpenter_scaleway_em_leaked_servers_collected_total",
		Help: "Servers released by the provider's garbage collection, by reason.",
	}, []string{"reason"})
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}

// Reconcile sweeps once.
func (c *Controller) Reconcile(ctx context.Context) (reconciler.Result, error) {
	zones, err := c.Zones(ctx)
	if err != nil {
		return reconciler.Result{}, err
	}
	claims := &karpv1.NodeClaimList{}
	if err := c.Kube.List(ctx, claims); err != nil {
		return reconciler.Result{}, err
	}
	byName := map[string]*karpv1.NodeClaim{}
	for i := range claims.Items {
		byName[claims.Items[i].Name] = &claims.Items[i]
	}
	var errs []error
	if c.Tokens != nil {
		if err := c.Tokens.Sweep(ctx, byName, c.perNodeClaimTokens(ctx)); err != nil {
			errs = append(errs, err)
		}
	}
	for _, z := range zones {
		srvs, err := c.API.ListServers(ctx, scw.Zone(z), []string{scaleway.Tag(scaleway.TagManagedBy, c.ClusterName)})
		if err != nil {
			// Never act on a partial view.
			return reconciler.Result{}, fmt.Errorf("listing servers in %s: %w", z, err)
		}
		for _, s := range c.collectable(ctx, srvs, byName) {
			c.Log.Info("releasing leaked server", "server", s.srv.ID, "zone", z, "name", s.srv.Name, "offer", s.srv.OfferName, "reason", s.reason, "detail", s.detail)
			if _, err := c.API.DeleteServer(ctx, s.srv.Zone, s.srv.ID); err != nil && !scaleway.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("releasing server %s: %w", s.srv.ID, err))
				continue
			}
			if c.Collected != nil {
				c.Collected.WithLabelValues(s.reason).Inc()
			}
		}
	}
	interval := c.Interval
	if interval == 0 {
		interval = 2 * time.Minute
	}
	if len(errs) > 0 {
		return reconciler.Result{}, fmt.Errorf("garbage collection: %v", errs)
	}
	return reconciler.Result{RequeueAfter: interval}, nil
}

// perNodeClaimTokens says whether a claim's NodeClass uses per-NodeClaim
// bootstrap tokens: only those claims may have a token Secret, and a cluster
// without any never touches kube-system Secrets (nor needs the RBAC for it).
func (c *Controller) perNodeClaimTokens(ctx context.Context) func(*karpv1.NodeClaim) bool {
	perNode := map[string]bool{}
	return func(claim *karpv1.NodeClaim) bool {
		ref := claim.Spec.NodeClassRef
		if ref == nil {
			return false
		}
		uses, seen := perNode[ref.Name]
		if !seen {
			nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
			uses = c.Kube.Get(ctx, types.NamespacedName{Name: ref.Name}, nc) == nil &&
				nc.Spec.Talos.BootstrapToken == v1alpha1.BootstrapTokenPerNodeClaim
			perNode[ref.Name] = uses
		}
		return uses
	}
}

type victim struct {
	srv    *baremetal.Server
	reason string
	detail string
}

func (c *Controller) collectable(ctx context.Context, srvs []*baremetal.Server, claims map[string]*karpv1.NodeClaim) []victim {
	now := c.Clock.Now()
	var out []victim
	// Duplicates: several live servers for one NodeClaim; keep the one the
	// NodeClaim points at (or the oldest), release the others.
	perClaim := map[string][]*baremetal.Server{}
	for _, s := range srvs {
		if s.Status == baremetal.ServerStatusDeleting {
			continue
		}
		if s.CreatedAt != nil && now.Sub(*s.CreatedAt) < c.GracePeriod {
			continue
		}
		tags := scaleway.ParseTags(s.Tags)
		if install.Phase(tags[scaleway.TagPhase]) == install.PhaseSpare {
			if v, ok := c.spareExpired(ctx, s, tags, now); ok {
				out = append(out, v)
			}
			continue
		}
		name := tags[scaleway.TagNodeClaim]
		if name == "" {
			out = append(out, victim{s, ReasonUntagged, "managed by this cluster but tagged for no nodeclaim"})
			continue
		}
		if _, ok := claims[name]; !ok {
			out = append(out, victim{s, ReasonNoNodeClaim, "nodeclaim " + name + " does not exist"})
			continue
		}
		perClaim[name] = append(perClaim[name], s)
	}
	for name, list := range perClaim {
		if len(list) < 2 {
			continue
		}
		pid := claims[name].Status.ProviderID
		sort.Slice(list, func(i, j int) bool { return created(list[i]).Before(created(list[j])) })
		keep := list[0]
		for _, s := range list {
			if pid != "" && pid == scaleway.ProviderID(s.Zone, s.ID) {
				keep = s
			}
		}
		for _, s := range list {
			if s != keep {
				out = append(out, victim{s, ReasonDuplicate, fmt.Sprintf("nodeclaim %s uses server %s", name, keep.ID)})
			}
		}
	}
	return out
}

func (c *Controller) spareExpired(ctx context.Context, s *baremetal.Server, tags scaleway.Tags, now time.Time) (victim, bool) {
	nc := &v1alpha1.ScalewayElasticMetalNodeClass{}
	if err := c.Kube.Get(ctx, types.NamespacedName{Name: tags[scaleway.TagNodeClass]}, nc); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return victim{s, ReasonSpareOrphaned, "its nodeclass " + tags[scaleway.TagNodeClass] + " is gone"}, true
		}
		return victim{}, false
	}
	lifetime := nc.Spec.Billing.MinimumLifetime
	if lifetime == nil || s.CreatedAt == nil || now.After(s.CreatedAt.Add(lifetime.Duration)) {
		return victim{s, ReasonSpareExpired, "its minimum lifetime has passed"}, true
	}
	return victim{}, false
}

func created(s *baremetal.Server) time.Time {
	if s.CreatedAt == nil {
		return time.Time{}
	}
	return *s.CreatedAt
}

// Register adds the singleton to the manager.
func (c *Controller) Register(_ context.Context, m manager.Manager) error {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	return controllerruntime.NewControllerManagedBy(m).
		Named("scaleway-em.garbagecollection").
		WatchesRawSource(singleton.Source()).
		Complete(singleton.AsReconciler(c))
}
