// Package identity tells this cluster's servers from every other's. A name
// is chosen by people and gets copied (a staging cluster installed from
// production's values has production's clusterName), so what makes a server
// this cluster's is its identity (karpenter-scaleway-em/cluster-id: the
// kube-system namespace's UID unless CLUSTER_ID sets one), next to a name
// (karpenter.sh/managed-by), which listings filter on. A server with this
// cluster's identity and another name was ordered before the cluster was
// renamed (clusterName changed): it stays the cluster's and is retagged
// with the new name when seen (a sweep of every zone at the first use, then
// every read). A server with the name and another identity is another
// cluster's: never listed, collected, reused or released, only reported. A
// server with the name and no identity was ordered before identities
// existed: it is adopted (the tag added) only when this cluster proves it
// is its own (adoptionRule). A changed identity while servers carry the
// previous one is refused at start (Owner.Start).
package identity

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"sync"

	"github.com/go-logr/logr"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// Identity is the cluster's name and identity.
type Identity struct {
	Name string
	ID   string
}

// Tags are the two tags every server of the cluster carries.
func (id Identity) Tags() []string {
	return []string{scaleway.Tag(scaleway.TagManagedBy, id.Name), scaleway.Tag(scaleway.TagClusterID, id.ID)}
}

// Class of a server with respect to this cluster.
type Class int

const (
	// Other: not tagged with this cluster's name.
	Other Class = iota
	// Owned: this cluster's identity (and a name: this cluster's, or the
	// one it had before it was renamed).
	Owned
	// Legacy: this cluster's name, no identity (ordered by a version
	// before identities).
	Legacy
	// Foreign: this cluster's name, another cluster's identity.
	Foreign
)

// Classify a server by its tags.
func (id Identity) Classify(tags []string) Class {
	name, named := scaleway.TagValue(tags, scaleway.TagManagedBy)
	got, ok := scaleway.TagValue(tags, scaleway.TagClusterID)
	if named && ok && got == id.ID {
		// Whatever the name: a renamed cluster keeps its servers.
		return Owned
	}
	if name != id.Name {
		return Other
	}
	switch {
	case !ok:
		return Legacy
	case got == id.ID:
		return Owned
	}
	return Foreign
}

var validID = regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9_.]{0,61}[a-zA-Z0-9])?$`)

// Validate checks a CLUSTER_ID set by the operator ("" is valid: the
// kube-system namespace's UID is used).
func Validate(configured string) error {
	if configured != "" && !validID.MatchString(configured) {
		return fmt.Errorf("%q is not a valid cluster identity (1-63 letters, digits, '-', '_', '.', starting and ending with a letter or digit)", configured)
	}
	return nil
}

// Resolve is the cluster's identity: configured when set, else the UID of
// the kube-system namespace, which a new cluster gets afresh whatever its
// values (a cluster restored from another's etcd backup keeps the UID: set
// CLUSTER_ID there).
func Resolve(ctx context.Context, kube client.Reader, configured string) (string, error) {
	if err := Validate(configured); err != nil {
		return "", err
	}
	if configured != "" {
		return configured, nil
	}
	ns := &corev1.Namespace{}
	if err := kube.Get(ctx, types.NamespacedName{Name: metav1.NamespaceSystem}, ns); err != nil {
		return "", fmt.Errorf("reading the kube-system namespace's UID (the cluster's identity; set CLUSTER_ID to choose one): %w", err)
	}
	if ns.UID == "" {
		return "", errors.New("the kube-system namespace has no UID")
	}
	return string(ns.UID), nil
}

// Renamed reports whether a server of this cluster (Owned) carries another
// name: ordered before the cluster was renamed.
func (id Identity) Renamed(tags []string) bool {
	name, _ := scaleway.TagValue(tags, scaleway.TagManagedBy)
	return id.Classify(tags) == Owned && name != id.Name
}

// API is what the Owner needs of the Scaleway API (*scaleway.Client).
type API interface {
	EditTags(ctx context.Context, zone scw.Zone, id string, edit func([]string) ([]string, bool)) (*baremetal.Server, error)
	ListServers(ctx context.Context, zone scw.Zone, tags []string) ([]*baremetal.Server, error)
}

// Reasons a server with this cluster's name is left alone (the metric's label).
const (
	ReasonForeignIdentity = "foreign_identity"
	ReasonNoIdentity      = "no_identity"
)

// LeftAlone is a server with this cluster's name that is not this cluster's.
type LeftAlone struct {
	ID, Zone, Name string
	// ClusterID is its identity ("" for a server without one).
	ClusterID string
	Reason    string
}

// Owner applies the rule to what the API returns. Safe for concurrent use.
type Owner struct {
	Identity
	API API
	// Kube reads NodeClaims (the adoption rule).
	Kube client.Reader
	// AdoptAll adopts every server without an identity (ADOPT_SERVERS_WITHOUT_IDENTITY):
	// for the upgrade of the one cluster that ordered them, when some of
	// them (spares, leaks) have no NodeClaim to prove it.
	AdoptAll bool
	Log      logr.Logger
	// Metrics may be nil.
	Metrics *Metrics

	mu     sync.Mutex
	alone  map[string]LeftAlone // by server ID
	logged map[string]bool
}

// Mine keeps the servers of a listing of zone that are this cluster's,
// adopting those the rule allows. complete says the listing holds every
// server with the cluster's name in zone, so servers left alone earlier
// and absent now are forgotten.
func (o *Owner) Mine(ctx context.Context, zone scw.Zone, srvs []*baremetal.Server, complete bool) ([]*baremetal.Server, error) {
	var claims map[string]*karpv1.NodeClaim
	out := make([]*baremetal.Server, 0, len(srvs))
	seen := map[string]bool{}
	for _, s := range srvs {
		kept, alone, err := o.mine(ctx, s, &claims)
		if err != nil {
			return nil, err
		}
		if kept != nil {
			out = append(out, kept)
		}
		if alone {
			seen[s.ID] = true
			o.leaveAlone(s)
		}
	}
	if complete {
		o.forget(string(zone), seen)
	}
	return out, nil
}

// mine decides one server of a listing: the server as this cluster keeps
// it (nil: not kept), and whether it is left alone, a server with the
// cluster's name that the rule does not adopt. claims is read once, on the
// first legacy server.
func (o *Owner) mine(ctx context.Context, s *baremetal.Server, claims *map[string]*karpv1.NodeClaim) (*baremetal.Server, bool, error) {
	switch o.Classify(s.Tags) {
	case Owned:
		if !o.Renamed(s.Tags) {
			return s, false, nil
		}
		// nil when gone, or no longer this cluster's.
		renamed, err := o.retagRenamed(ctx, s)
		return renamed, false, err
	case Legacy:
		if *claims == nil {
			var err error
			if *claims, err = o.nodeClaims(ctx); err != nil {
				return nil, false, err
			}
		}
		adopted, err := o.adoptIfProven(ctx, s, *claims)
		if err != nil {
			return nil, false, err
		}
		return adopted, adopted == nil, nil
	case Other:
		return nil, false, nil
	}
	// Foreign: this cluster's name, another cluster's identity.
	return nil, true, nil
}

// Check is Mine for one server read on its own: the server as it is now
// (adopted if the rule allows), and whether it is this cluster's.
func (o *Owner) Check(ctx context.Context, srv *baremetal.Server) (*baremetal.Server, bool, error) {
	mine, err := o.Mine(ctx, srv.Zone, []*baremetal.Server{srv}, false)
	if err != nil || len(mine) == 0 {
		return srv, false, err
	}
	return mine[0], true, nil
}

// LeftAlone lists the servers with this cluster's name that are not its
// own, as of the last listings, sorted by zone and ID.
func (o *Owner) LeftAlone() []LeftAlone {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]LeftAlone, 0, len(o.alone))
	for _, a := range o.alone {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Zone != out[j].Zone {
			return out[i].Zone < out[j].Zone
		}
		return out[i].ID < out[j].ID
	})
	return out
}

func (o *Owner) nodeClaims(ctx context.Context) (map[string]*karpv1.NodeClaim, error) {
	list := &karpv1.NodeClaimList{}
	if err := o.Kube.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing nodeclaims (to adopt servers without a cluster identity): %w", err)
	}
	out := make(map[string]*karpv1.NodeClaim, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

// adoptionRule says whether a server without an identity is this
// cluster's: with AdoptAll, always; else only when a NodeClaim of this
// cluster names it: the NodeClaim its nodeclaim tag names exists and
// either points at it (provider ID) or points nowhere yet and is older than
// the server (an order the previous version made and had not recorded).
// A cluster installed afresh with another's values has none of that
// cluster's NodeClaims, so it adopts none of its servers.
func (o *Owner) adoptionRule(srv *baremetal.Server, claims map[string]*karpv1.NodeClaim) (bool, string) {
	if o.AdoptAll {
		return true, "ADOPT_SERVERS_WITHOUT_IDENTITY is set"
	}
	name, _ := scaleway.TagValue(srv.Tags, scaleway.TagNodeClaim)
	claim := claims[name]
	if name == "" || claim == nil {
		return false, ""
	}
	switch pid := claim.Status.ProviderID; {
	case pid == scaleway.ProviderID(srv.Zone, srv.ID):
		return true, "nodeclaim " + name + " points at it"
	case pid == "" && srv.CreatedAt != nil && !claim.CreationTimestamp.After(*srv.CreatedAt):
		return true, "nodeclaim " + name + " ordered it and has no server yet"
	}
	return false, ""
}

func (o *Owner) adoptIfProven(ctx context.Context, srv *baremetal.Server, claims map[string]*karpv1.NodeClaim) (*baremetal.Server, error) {
	ok, why := o.adoptionRule(srv, claims)
	if !ok {
		return nil, nil
	}
	var class Class
	updated, err := o.API.EditTags(ctx, srv.Zone, srv.ID, func(tags []string) ([]string, bool) {
		// Read again: another writer may have tagged it meanwhile.
		if class = o.Classify(tags); class != Legacy {
			return tags, false
		}
		tags, _ = scaleway.SetTagIn(tags, scaleway.TagClusterID, o.ID)
		return tags, true
	})
	if scaleway.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("adopting server %s (adding tag %s): %w", srv.ID, scaleway.TagClusterID, err)
	}
	switch class {
	case Legacy:
		o.Log.Info("adopted a server ordered before cluster identities: tag added", "server", srv.ID, "zone", string(srv.Zone),
			"name", srv.Name, "tag", scaleway.Tag(scaleway.TagClusterID, o.ID), "why", why)
		if o.Metrics != nil {
			o.Metrics.Adopted.Inc()
		}
		return updated, nil
	case Owned:
		return updated, nil
	}
	return nil, nil
}

// retagRenamed writes this cluster's name on srv, a server of its identity
// tagged with the name the cluster had before it was renamed: every
// listing filters on the name, and without the new one the server would
// be unlisted, its NodeClaim's Get would answer NotFound, Karpenter would
// delete the NodeClaim and order a replacement while the server stays
// billed. nil when the server is gone or no longer this cluster's.
func (o *Owner) retagRenamed(ctx context.Context, srv *baremetal.Server) (*baremetal.Server, error) {
	old, _ := scaleway.TagValue(srv.Tags, scaleway.TagManagedBy)
	var class Class
	updated, err := o.API.EditTags(ctx, srv.Zone, srv.ID, func(tags []string) ([]string, bool) {
		// Read again: another writer may have retagged it meanwhile.
		if class = o.Classify(tags); class != Owned || !o.Renamed(tags) {
			return tags, false
		}
		tags, _ = scaleway.SetTagIn(tags, scaleway.TagManagedBy, o.Name)
		return tags, true
	})
	if scaleway.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("retagging server %s with the cluster's new name %s: %w", srv.ID, scaleway.Tag(scaleway.TagManagedBy, o.Name), err)
	}
	if class != Owned {
		return nil, nil
	}
	o.Log.Info("a server of this cluster's identity carried another cluster name (the cluster was renamed): retagged with the new name",
		"server", srv.ID, "zone", string(srv.Zone), "name", srv.Name, "old", old, "new", o.Name, "identity", o.ID)
	if o.Metrics != nil {
		o.Metrics.Renamed.Inc()
	}
	return updated, nil
}

// SweepRenamed lists zone's servers of this cluster's identity and
// retags those still carrying a name the cluster had before (Mine does):
// they are invisible to every listing by name until then. It returns the
// cluster's servers found there.
func (o *Owner) SweepRenamed(ctx context.Context, zone scw.Zone) ([]*baremetal.Server, error) {
	srvs, err := o.API.ListServers(ctx, zone, []string{scaleway.Tag(scaleway.TagClusterID, o.ID)})
	if err != nil {
		return nil, err
	}
	return o.Mine(ctx, zone, srvs, false)
}

func (o *Owner) leaveAlone(srv *baremetal.Server) {
	id, _ := scaleway.TagValue(srv.Tags, scaleway.TagClusterID)
	a := LeftAlone{ID: srv.ID, Zone: string(srv.Zone), Name: srv.Name, ClusterID: id, Reason: ReasonForeignIdentity}
	if id == "" {
		a.Reason = ReasonNoIdentity
	}
	o.mu.Lock()
	if o.alone == nil {
		o.alone, o.logged = map[string]LeftAlone{}, map[string]bool{}
	}
	o.alone[srv.ID] = a
	first := !o.logged[srv.ID]
	o.logged[srv.ID] = true
	o.mu.Unlock()
	o.updateGauge()
	if !first {
		return
	}
	switch a.Reason {
	case ReasonForeignIdentity:
		o.Log.Info("WARNING: a server carries this cluster's name and another cluster's identity: another cluster uses the name "+o.Name+"; leaving it alone",
			"server", srv.ID, "zone", a.Zone, "name", srv.Name, "its-identity", id, "our-identity", o.ID)
	default:
		o.Log.Info("WARNING: a server carries this cluster's name but no cluster identity, and no nodeclaim of this cluster names it; leaving it alone (set ADOPT_SERVERS_WITHOUT_IDENTITY=true on the cluster that ordered it to adopt it)",
			"server", srv.ID, "zone", a.Zone, "name", srv.Name, "our-identity", o.ID)
	}
}

// forget drops the servers of zone left alone earlier and absent from a
// complete listing (deleted, or retagged).
func (o *Owner) forget(zone string, present map[string]bool) {
	o.mu.Lock()
	for id, a := range o.alone {
		if a.Zone == zone && !present[id] {
			delete(o.alone, id)
		}
	}
	o.mu.Unlock()
	o.updateGauge()
}

func (o *Owner) updateGauge() {
	if o.Metrics == nil {
		return
	}
	counts := map[string]float64{ReasonForeignIdentity: 0, ReasonNoIdentity: 0}
	for _, a := range o.LeftAlone() {
		counts[a.Reason]++
	}
	for r, n := range counts {
		o.Metrics.LeftAlone.WithLabelValues(r).Set(n)
	}
}
