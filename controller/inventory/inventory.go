// Package inventory knows where this cluster's servers are and finds them:
// the default zone, every zone a NodeClass names, and every zone where a
// server of the cluster was seen. A sweep over every Elastic Metal zone, at
// the first use and then periodically, feeds the last set, so a zone removed
// from a NodeClass keeps its servers found (a retried Create resumes them),
// listed (Karpenter does not forget them) and collected (nothing leaks).
// Every listing goes through the cluster identity rule (package identity):
// a server with this cluster's name and another identity is never returned,
// and the sweep retags the cluster's servers that still carry a name it had
// before it was renamed.
package inventory

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/clocks"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// DefaultSweepInterval is the default of Inventory.SweepInterval.
const DefaultSweepInterval = 10 * time.Minute

// API is what the inventory needs of the Scaleway API (*scaleway.Client).
type API interface {
	ListServers(ctx context.Context, zone scw.Zone, tags []string) ([]*baremetal.Server, error)
}

// Inventory is safe for concurrent use.
type Inventory struct {
	API  API
	Kube client.Reader // NodeClasses
	// Owner keeps the servers that are this cluster's (name and identity).
	Owner       *identity.Owner
	DefaultZone string
	// AllZones are every Elastic Metal zone (the catalogue's); zones the
	// credentials cannot list are skipped by the sweep.
	AllZones []string
	// SweepInterval between sweeps of AllZones (default DefaultSweepInterval).
	SweepInterval time.Duration
	Clock         clock.Clock
	Log           logr.Logger

	sweepMu sync.Mutex // one sweep at a time
	mu      sync.Mutex
	seen    map[string]bool
	sweptAt time.Time
}

func (i *Inventory) managedBy() string { return scaleway.Tag(scaleway.TagManagedBy, i.Owner.Name) }

func (i *Inventory) clock() clock.Clock { return clocks.Or(i.Clock) }

// Saw records that the cluster has a server in zone.
func (i *Inventory) Saw(zone string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.seen == nil {
		i.seen = map[string]bool{}
	}
	i.seen[zone] = true
}

// Zones are the zones the cluster may have servers in, sorted. The first
// call sweeps every zone first.
func (i *Inventory) Zones(ctx context.Context) ([]string, error) {
	i.sweepIfDue(ctx)
	set := map[string]bool{i.DefaultZone: true}
	list := &v1alpha1.ScalewayElasticMetalNodeClassList{}
	if err := i.Kube.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing nodeclasses: %w", err)
	}
	for n := range list.Items {
		for _, z := range list.Items[n].Spec.Zones {
			set[z] = true
		}
	}
	i.mu.Lock()
	for z := range i.seen {
		set[z] = true
	}
	i.mu.Unlock()
	zones := make([]string, 0, len(set))
	for z := range set {
		if z != "" {
			zones = append(zones, z)
		}
	}
	sort.Strings(zones)
	return zones, nil
}

func (i *Inventory) sweepIfDue(ctx context.Context) {
	interval := i.SweepInterval
	if interval <= 0 {
		interval = DefaultSweepInterval
	}
	i.mu.Lock()
	due := i.sweptAt.IsZero() || i.clock().Since(i.sweptAt) >= interval
	i.mu.Unlock()
	if due {
		i.Sweep(ctx)
	}
}

// Sweep lists the cluster's servers in every Elastic Metal zone and records
// the zones that have some. A zone that cannot be listed is skipped (and
// logged); the next sweep tries it again.
func (i *Inventory) Sweep(ctx context.Context) {
	i.sweepMu.Lock()
	defer i.sweepMu.Unlock()
	for _, z := range i.AllZones {
		srvs, err := i.API.ListServers(ctx, scw.Zone(z), []string{i.managedBy()})
		if err != nil {
			i.Log.V(1).Info("zone sweep: cannot list servers", "zone", z, "error", err.Error())
			continue
		}
		// A server ordered before the cluster was renamed carries the old
		// name: found by the identity and retagged, or no listing by name
		// would ever show it again.
		renamed, err := i.Owner.SweepRenamed(ctx, scw.Zone(z))
		if err != nil {
			i.Log.Error(err, "zone sweep: cannot look for servers of this cluster under a previous name", "zone", z)
		}
		if len(srvs) > 0 || len(renamed) > 0 {
			i.Saw(z)
		}
	}
	i.mu.Lock()
	i.sweptAt = i.clock().Now()
	i.mu.Unlock()
}

// ServerOf finds NodeClaim claim's server (the oldest live one tagged for
// it) in every zone the cluster may have servers in. Any zone that cannot be
// listed is an error: "none" must be certain before anyone orders.
func (i *Inventory) ServerOf(ctx context.Context, claim string) (*baremetal.Server, error) {
	zones, err := i.Zones(ctx)
	if err != nil {
		return nil, err
	}
	var found []*baremetal.Server
	for _, z := range zones {
		srvs, err := i.API.ListServers(ctx, scw.Zone(z), []string{i.managedBy(), scaleway.Tag(scaleway.TagNodeClaim, claim)})
		if err == nil {
			srvs, err = i.Owner.Mine(ctx, scw.Zone(z), srvs, false)
		}
		if err != nil {
			return nil, fmt.Errorf("looking for the server of nodeclaim %s in %s: %w", claim, z, err)
		}
		for _, s := range srvs {
			if s.Status != baremetal.ServerStatusDeleting {
				found = append(found, s)
			}
		}
	}
	if len(found) == 0 {
		return nil, nil
	}
	slices.SortStableFunc(found, func(a, b *baremetal.Server) int { return created(a).Compare(created(b)) })
	return found[0], nil
}

// Servers lists every server of the cluster in every zone it may have
// servers in. Any failure is an error, never a shorter list.
func (i *Inventory) Servers(ctx context.Context) ([]*baremetal.Server, error) {
	l, err := i.list(ctx, true)
	if err != nil {
		return nil, err
	}
	return l.Servers, nil
}

// Listing is what List found: the servers of every zone that answered, and
// why each other zone did not.
type Listing struct {
	Servers []*baremetal.Server
	// Zones are every zone listed or tried, sorted.
	Zones []string
	// Failed holds the zones that could not be listed, with the error.
	Failed map[string]error
}

// Complete reports whether every zone answered.
func (l Listing) Complete() bool { return len(l.Failed) == 0 }

// List lists every server of the cluster zone by zone, as Servers does, but
// a zone that cannot be listed is recorded in Failed rather than ending the
// listing: the garbage collector acts on the zones it sees (a spare in a
// healthy zone still expires on time during another zone's outage), and
// the servers of a failed zone, unseen, are left alone. err is only for
// what stops every zone (the NodeClasses cannot be read).
func (i *Inventory) List(ctx context.Context) (Listing, error) { return i.list(ctx, false) }

// list lists zone by zone; strict stops at the first zone that fails and
// returns its error (Servers: the other zones' calls would be wasted).
func (i *Inventory) list(ctx context.Context, strict bool) (Listing, error) {
	zones, err := i.Zones(ctx)
	if err != nil {
		return Listing{}, err
	}
	l := Listing{Zones: zones}
	for _, z := range zones {
		srvs, err := i.API.ListServers(ctx, scw.Zone(z), []string{i.managedBy()})
		if err == nil {
			srvs, err = i.Owner.Mine(ctx, scw.Zone(z), srvs, true)
		}
		if err != nil {
			err = fmt.Errorf("listing servers in %s: %w", z, err)
			if strict {
				return Listing{}, err
			}
			if l.Failed == nil {
				l.Failed = map[string]error{}
			}
			l.Failed[z] = err
			continue
		}
		if len(srvs) > 0 {
			i.Saw(z)
		}
		l.Servers = append(l.Servers, srvs...)
	}
	return l, nil
}

func created(s *baremetal.Server) time.Time {
	if s.CreatedAt == nil {
		return time.Time{}
	}
	return *s.CreatedAt
}
