package billing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/awslabs/operatorpkg/reconciler"
	"github.com/awslabs/operatorpkg/singleton"
	"github.com/go-logr/logr"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// Tagger edits a server's tags (*scaleway.Client).
type Tagger interface {
	EditTags(ctx context.Context, zone scw.Zone, id string, edit func([]string) ([]string, bool)) (*baremetal.Server, error)
}

// Backfill writes the billing tags on the cluster's servers ordered before
// they existed, once Derive's answer is settled, so that what a server was
// bought as is derived from the catalogue once and read from the server
// ever after. Until then every reader derives it (Of), monthly when in
// doubt. Only the leader runs it.
type Backfill struct {
	// Servers lists every server of the cluster
	// ((*inventory.Inventory).Servers).
	Servers func(ctx context.Context) ([]*baremetal.Server, error)
	API     Tagger
	Offers  Offers
	// Interval between passes while some server is left to tag (the
	// catalogue's first refresh settles them); once none is, passes are an
	// hour apart (a server of an older replica, mid-upgrade).
	Interval time.Duration
	Log      logr.Logger
}

// Idle is the interval between passes once every server is tagged.
const Idle = time.Hour

// Reconcile is one pass.
func (b *Backfill) Reconcile(ctx context.Context) (reconciler.Result, error) {
	interval := b.Interval
	if interval <= 0 {
		interval = time.Minute
	}
	left, err := b.Pass(ctx)
	if err != nil {
		return reconciler.Result{RequeueAfter: interval}, err
	}
	if left > 0 {
		return reconciler.Result{RequeueAfter: interval}, nil
	}
	return reconciler.Result{RequeueAfter: Idle}, nil
}

// Pass tags every listed server whose record is settled and returns how
// many servers still have no billing tags.
func (b *Backfill) Pass(ctx context.Context) (left int, err error) {
	servers, err := b.Servers(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing servers for their billing tags: %w", err)
	}
	var errs []error
	for _, s := range servers {
		if _, ok := Tagged(s); ok || s.Status == baremetal.ServerStatusDeleting {
			continue
		}
		r, settled := Derive(b.Offers, s)
		if !settled {
			left++
			continue
		}
		_, err := b.API.EditTags(ctx, s.Zone, s.ID, func(tags []string) ([]string, bool) {
			if _, ok := Tagged(&baremetal.Server{Tags: tags}); ok {
				return tags, false // tagged meanwhile: that record stands
			}
			return SetIn(tags, r), true
		})
		switch {
		case scaleway.IsNotFound(err):
		case err != nil:
			left++
			errs = append(errs, fmt.Errorf("writing the billing tags of server %s: %w", s.ID, err))
		default:
			b.Log.Info("recorded what a server ordered before billing tags was bought as", "server", s.ID, "zone", string(s.Zone),
				"offer", s.OfferName, "billing", r.Period, "from", r.Source, "paidSince", r.Since)
		}
	}
	return left, errors.Join(errs...)
}

// Register adds the singleton to the manager.
func (b *Backfill) Register(_ context.Context, m manager.Manager) error {
	return controllerruntime.NewControllerManagedBy(m).
		Named("scaleway-em.billing-backfill").
		WatchesRawSource(singleton.Source()).
		Complete(singleton.AsReconciler(b))
}
