// Package cloudprovider implements Karpenter's CloudProvider for Scaleway
// Elastic Metal. It orchestrates: Create finds or orders the NodeClaim's
// server and returns as soon as it exists (the install runs afterwards in
// package nodeinstall); Delete ends the use of the server under the spare
// policy (package spare); Get and List report servers from their tags, in
// every zone the cluster has servers in (package inventory); instance types
// come from the catalog.
package cloudprovider

import (
	"context"
	"fmt"
	"time"

	"github.com/awslabs/operatorpkg/status"
	"github.com/go-logr/logr"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/events"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/imagesource"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/inventory"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/nodeclass"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/reservation"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spendlimit"
)

// Name of this cloud provider.
const Name = "scaleway-em"

// ImageSource resolves a NodeClass's image to what em-imager needs (*imagesource.Source).
type ImageSource interface {
	Resolve(ctx context.Context, s imagesource.Settings) (*imagesource.Image, error)
}

// Installs stops a NodeClaim's install before Delete acts, counting a
// NodeClaim deleted before its install joined as a failed install
// (*nodeinstall.Controller).
type Installs interface {
	Deleted(ctx context.Context, claim *karpv1.NodeClaim)
}

// Breaker is the install-failure breaker (*breaker.Store): Admit refuses an
// order for a NodeClass whose installs keep failing.
type Breaker interface {
	Admit(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass, claim string) error
}

// Options of the CloudProvider.
type Options struct {
	ClusterName string
	DefaultZone string
	// RepairToleration before Karpenter replaces a NotReady node (default 20m).
	RepairToleration time.Duration
}

// Deps are the parts the CloudProvider orchestrates.
type Deps struct {
	Kube      client.Client
	Recorder  events.Recorder
	Catalog   *catalog.Catalog
	API       *scaleway.Client
	Inventory *inventory.Inventory
	Spares    *spare.Keeper
	Installs  Installs
	Images    ImageSource
	// Breaker and Limits gate orders (nil: none).
	Breaker Breaker
	Limits  *spendlimit.Limiter
	// Reservations offers spares as reserved capacity (nil: not offered,
	// Karpenter's ReservedCapacity feature gate is off).
	Reservations *reservation.Cache
}

// CloudProvider is Karpenter's CloudProvider for Elastic Metal.
type CloudProvider struct {
	Deps
	opts Options
	log  logr.Logger
	// process names this process in AnnotationOrdering.
	process string
	// spend sets offerings aside per NodeClass at its spend limits.
	spend spendMarks
}

// New returns the CloudProvider.
func New(deps Deps, opts Options, log logr.Logger) *CloudProvider {
	c := &CloudProvider{Deps: deps, opts: opts, log: log, process: newProcessID()}
	if deps.Limits != nil && deps.Kube != nil {
		// The orders an earlier process recorded on NodeClaims count
		// against the spend limits (of Create and the warm pool alike).
		deps.Limits.Records = append(deps.Limits.Records, c.Records)
	}
	return c
}

// Name implements cloudprovider.CloudProvider.
func (c *CloudProvider) Name() string { return Name }

// GetSupportedNodeClasses implements cloudprovider.CloudProvider.
func (c *CloudProvider) GetSupportedNodeClasses() []status.Object {
	return []status.Object{&v1alpha1.ScalewayElasticMetalNodeClass{}}
}

// RepairPolicies implements cloudprovider.CloudProvider. Bare metal takes
// minutes to reboot and a replacement takes ten or more to deliver, so a
// node gets longer to recover than a VM would.
func (c *CloudProvider) RepairPolicies() []cloudprovider.RepairPolicy {
	d := c.opts.RepairToleration
	if d <= 0 {
		d = 20 * time.Minute
	}
	return []cloudprovider.RepairPolicy{
		{ConditionType: corev1.NodeReady, ConditionStatus: corev1.ConditionFalse, TolerationDuration: d},
		{ConditionType: corev1.NodeReady, ConditionStatus: corev1.ConditionUnknown, TolerationDuration: d},
	}
}

// GetInstanceTypes implements cloudprovider.CloudProvider: monthly offerings
// only when both the NodeClass and the NodePool allow them; the NodeClass's
// spares as reserved offerings.
func (c *CloudProvider) GetInstanceTypes(ctx context.Context, np *karpv1.NodePool) ([]*cloudprovider.InstanceType, error) {
	nc, err := nodeclass.Get(ctx, c.Kube, np.Spec.Template.Spec.NodeClassRef)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	f, ok := c.filter(nc, scheduling.NewNodeSelectorRequirementsWithMinValues(np.Spec.Template.Spec.Requirements...))
	if !ok {
		return nil, nil
	}
	return c.instanceTypes(ctx, nc, f)
}

// instanceTypes are the catalogue's instance types for f with the
// NodeClass's spares added as reserved offerings.
func (c *CloudProvider) instanceTypes(ctx context.Context, nc *v1alpha1.ScalewayElasticMetalNodeClass, f catalog.Filter) ([]*cloudprovider.InstanceType, error) {
	its, err := c.Catalog.InstanceTypes(ctx, f)
	if err != nil {
		return nil, err
	}
	its = c.spend.apply(nc, its, time.Now())
	if c.Reservations == nil {
		return its, nil
	}
	zones := f.Zones
	if len(zones) == 0 {
		zones = offeringZones(its)
	}
	return reservation.Offerings(its, c.Reservations.Groups(ctx, nc.Name, zones)), nil
}

// filter is the catalogue filter for a NodeClass narrowed by NodePool or
// NodeClaim requirements; ok is false when they allow no billing period.
func (c *CloudProvider) filter(nc *v1alpha1.ScalewayElasticMetalNodeClass, reqs scheduling.Requirements) (catalog.Filter, bool) {
	f := nodeclass.Filter(nc, c.opts.DefaultZone)
	periods, ok := catalog.BillingPeriodsFor(f.BillingPeriods, reqs)
	f.BillingPeriods = periods
	return f, ok
}

// Create implements cloudprovider.CloudProvider. It returns as soon as the
// NodeClaim's server exists: Karpenter core keeps its cluster state unsynced
// (and so schedules and disrupts nothing) while any NodeClaim lacks a
// provider ID. The install runs afterwards (package nodeinstall).
func (c *CloudProvider) Create(ctx context.Context, claim *karpv1.NodeClaim) (*karpv1.NodeClaim, error) {
	// A server tagged for this NodeClaim is the answer whatever changed
	// since it was ordered (the NodeClass, its zones, the catalogue): look
	// it up first, everywhere, and never fail a claim that has one.
	srv, err := c.Inventory.ServerOf(ctx, claim.Name)
	if err != nil {
		return nil, err
	}
	if srv != nil {
		return c.hydrateExisting(ctx, claim, srv)
	}
	if err := c.earlierOrderPending(claim); err != nil {
		return nil, err
	}
	nc, err := c.orderableNodeClass(ctx, claim)
	if err != nil {
		return nil, err
	}
	// The rescue key and IAM are proven by the NodeClass's CredentialsReady
	// (Ready above), not again per order.
	if c.Breaker != nil {
		if err := c.Breaker.Admit(ctx, nc, claim.Name); err != nil {
			return nil, err
		}
	}
	if err := c.markOrdering(ctx, claim); err != nil {
		return nil, err
	}
	srv, err = c.order(ctx, claim, nc)
	if err != nil {
		return nil, err
	}
	c.Inventory.Saw(string(srv.Zone))
	// The NodeClass read before ordering: failing now, with listings that
	// may not show the new server yet, could make the retry order again.
	return c.hydrate(ctx, claim, srv, nc), nil
}

// hydrateExisting answers Create for a claim whose server is listed already.
func (c *CloudProvider) hydrateExisting(ctx context.Context, claim *karpv1.NodeClaim, srv *baremetal.Server) (*karpv1.NodeClaim, error) {
	c.log.Info("the nodeclaim already has its server", "nodeclaim", claim.Name, "server", srv.ID, "zone", string(srv.Zone), "phase", install.PhaseOf(srv))
	// The server is listed: failing on a read error is safe, the
	// retry finds it again.
	nc, err := nodeclass.Lookup(ctx, c.Kube, claim.Spec.NodeClassRef)
	if err != nil {
		return nil, err
	}
	return c.hydrate(ctx, claim, srv, nc), nil
}

// earlierOrderPending refuses (ErrOrderInFlight) a claim that may already
// have a server no listing shows yet.
func (c *CloudProvider) earlierOrderPending(claim *karpv1.NodeClaim) error {
	// An earlier order of this claim whose answer was lost may have been
	// taken although no listing shows it yet: giving the claim a spare or
	// another order now could leave it with two servers. It waits for that
	// order (Karpenter retries Create) until the order shows or its settle
	// window ends; the lookup above then searches the order's zone too.
	if zone, ok := c.API.OrderInFlight(scaleway.Tag(scaleway.TagNodeClaim, claim.Name)); ok {
		c.Inventory.Saw(string(zone))
		c.publish(earlierOrderInFlight(claim, zone))
		return fmt.Errorf("nodeclaim %s: %w (sent to %s); no spare is taken and nothing is ordered until it shows or its settle window ends", claim.Name, scaleway.ErrOrderInFlight, zone)
	}
	// The same, for a server another controller process (the leader before
	// a leader change, this controller before a restart) began giving the
	// claim and died before Karpenter recorded it: only its annotation
	// says so.
	if at, ok := c.orderingElsewhere(claim); ok {
		c.publish(orderingElsewhereInFlight(claim, time.Since(at)))
		return fmt.Errorf("nodeclaim %s: %w: an earlier controller process began taking or ordering its server at %s; no spare is taken and nothing is ordered until it shows or %s have passed",
			claim.Name, scaleway.ErrOrderInFlight, at.Format(time.RFC3339), c.API.Config().OrderSettle)
	}
	return nil
}

// orderableNodeClass reads the claim's NodeClass and checks that a server
// may be bought for it: ready, fully readable, its image resolvable.
func (c *CloudProvider) orderableNodeClass(ctx context.Context, claim *karpv1.NodeClaim) (*v1alpha1.ScalewayElasticMetalNodeClass, error) {
	nc, err := nodeclass.Get(ctx, c.Kube, claim.Spec.NodeClassRef)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, cloudprovider.NewNodeClassNotReadyError(fmt.Errorf("nodeclass %q not found", claim.Spec.NodeClassRef.Name))
		}
		return nil, fmt.Errorf("getting nodeclass: %w", err)
	}
	if err := readyToOrder(nc); err != nil {
		return nil, err
	}
	// A value the controller could not read was left at its zero value
	// (v1alpha1's UnmarshalJSON): never order on such a spec, even before
	// the status controller has said so.
	if err := nc.Unreadable(); err != nil {
		return nil, cloudprovider.NewNodeClassNotReadyError(err)
	}
	// Everything the install needs is checked before ordering: a server
	// that cannot be imaged must not be bought.
	if _, err := c.Images.Resolve(ctx, nodeclass.ImageSettings(nc)); err != nil {
		return nil, cloudprovider.NewNodeClassNotReadyError(fmt.Errorf("resolving the image: %w", err))
	}
	return nc, nil
}

// Delete implements cloudprovider.CloudProvider: it stops the install, then
// releases the server or keeps it as a spare (the policy reads its state
// now). It acts only on the server tagged for this NodeClaim.
func (c *CloudProvider) Delete(ctx context.Context, claim *karpv1.NodeClaim) error {
	c.Installs.Deleted(ctx, claim)
	srv, err := c.serverOf(ctx, claim)
	if err != nil {
		return err
	}
	if srv == nil {
		return cloudprovider.NewNodeClaimNotFoundError(fmt.Errorf("no server for nodeclaim %s", claim.Name))
	}
	if c.API.SeenDeleting(srv.Zone, srv.ID) {
		// Released by an earlier call (a deletion is final): gone for
		// Karpenter, as karpenter-provider-aws treats a shutting-down
		// instance, without reading it again.
		return cloudprovider.NewNodeClaimNotFoundError(fmt.Errorf("server %s is being deleted", srv.ID))
	}
	// nil only when the NodeClass is gone (no policy: release); a failed
	// read is retried, never taken for a deletion.
	nc, err := nodeclass.Lookup(ctx, c.Kube, claim.Spec.NodeClassRef)
	if err != nil {
		return fmt.Errorf("deciding what becomes of server %s: %w", srv.ID, err)
	}
	outcome, d, err := c.Spares.Release(ctx, srv.Zone, srv.ID, claim.Name, nc)
	if err != nil {
		return err
	}
	switch outcome {
	case spare.Released:
		c.log.Info("releasing server", "nodeclaim", claim.Name, "server", srv.ID, "zone", string(srv.Zone), "why", d.Reason)
		return nil
	case spare.Kept:
		c.publish(keptAsSpare(claim, srv.ID, d.Reason))
		return cloudprovider.NewNodeClaimNotFoundError(fmt.Errorf("server %s kept as a spare", srv.ID))
	}
	return cloudprovider.NewNodeClaimNotFoundError(fmt.Errorf("server %s is not (any more) nodeclaim %s's: %s", srv.ID, claim.Name, outcome))
}

// serverOf is the server a NodeClaim points at (its provider ID), else the
// one tagged for it.
func (c *CloudProvider) serverOf(ctx context.Context, claim *karpv1.NodeClaim) (*baremetal.Server, error) {
	if claim.Status.ProviderID == "" {
		return c.Inventory.ServerOf(ctx, claim.Name)
	}
	zone, id, err := scaleway.ParseProviderID(claim.Status.ProviderID)
	if err != nil {
		return nil, cloudprovider.NewNodeClaimNotFoundError(err)
	}
	return &baremetal.Server{ID: id, Zone: zone}, nil
}

// Get implements cloudprovider.CloudProvider. A server mid-install is a
// launched NodeClaim that has no node yet.
func (c *CloudProvider) Get(ctx context.Context, providerID string) (*karpv1.NodeClaim, error) {
	zone, id, err := scaleway.ParseProviderID(providerID)
	if err != nil {
		return nil, cloudprovider.NewNodeClaimNotFoundError(err)
	}
	srv, err := c.API.GetServer(ctx, zone, id)
	if err != nil {
		if scaleway.IsNotFound(err) {
			return nil, cloudprovider.NewNodeClaimNotFoundError(err)
		}
		return nil, err
	}
	srv, mine, err := c.Inventory.Owner.Check(ctx, srv)
	if err != nil {
		return nil, err
	}
	if !mine || install.PhaseOf(srv) == install.PhaseSpare {
		return nil, cloudprovider.NewNodeClaimNotFoundError(fmt.Errorf("server %s is not a node of cluster %s", id, c.opts.ClusterName))
	}
	return c.fromServer(srv), nil
}

// List implements cloudprovider.CloudProvider: every server of the cluster
// but spares, in every zone it has servers in, in every state (an errored
// server is a node with a problem, not a missing one). Any API failure is
// an error, never a shorter list: Karpenter's garbage collection deletes
// NodeClaims whose server List does not return.
func (c *CloudProvider) List(ctx context.Context) ([]*karpv1.NodeClaim, error) {
	srvs, err := c.Inventory.Servers(ctx)
	if err != nil {
		return nil, err
	}
	var out []*karpv1.NodeClaim
	for _, s := range srvs {
		if install.PhaseOf(s) != install.PhaseSpare {
			out = append(out, c.fromServer(s))
		}
	}
	return out, nil
}

// Drift reasons.
const (
	DriftNodeClass cloudprovider.DriftReason = "NodeClassDrift"
	DriftImage     cloudprovider.DriftReason = "ImageDrift"
)

// IsDrifted implements cloudprovider.CloudProvider. A NodeClaim mid-install
// is never drifted: its install writes the NodeClass's image of the moment.
func (c *CloudProvider) IsDrifted(ctx context.Context, claim *karpv1.NodeClaim) (cloudprovider.DriftReason, error) {
	if !claim.StatusConditions().Get(karpv1.ConditionTypeRegistered).IsTrue() {
		return "", nil
	}
	nc, err := nodeclass.Get(ctx, c.Kube, claim.Spec.NodeClassRef)
	if err != nil {
		return "", client.IgnoreNotFound(err)
	}
	if nc.Unreadable() != nil {
		// Its hash would be that of a spec that lost values: no decision
		// until it is fixed (its status says so).
		return "", nil
	}
	if claim.Annotations[v1alpha1.AnnotationNodeClassHashVersion] == v1alpha1.NodeClassHashVersion &&
		claim.Annotations[v1alpha1.AnnotationNodeClassHash] != "" &&
		claim.Annotations[v1alpha1.AnnotationNodeClassHash] != nc.Hash() {
		return DriftNodeClass, nil
	}
	// The annotation is what was written on the disk (set after imaging).
	if img := nc.Status.Image; img != nil && img.RawSHA256 != "" {
		if have := claim.Annotations[v1alpha1.AnnotationImageSHA256]; have != "" && have != img.RawSHA256 {
			return DriftImage, nil
		}
	}
	return "", nil
}

// publish records ev (events.go) on the provider's recorder, if any.
func (c *CloudProvider) publish(ev events.Event) { publish(c.Recorder, ev) }

// readyToOrder says whether a NodeClaim of this NodeClass may be given a
// server. Only a NodeClass whose status controller said Ready orders. One
// that said not Ready gets a NodeClassNotReadyError, on which Karpenter
// deletes the NodeClaim. One whose readiness is not known yet (created
// with the NodeClaim, as Karpenter's standalone NodeClaim specs do, and not
// reconciled yet) gets a retryable CreateError instead: Karpenter keeps the
// NodeClaim and calls Create again, as it does for its own KWOK provider,
// which refuses only a NodeClass that is Ready=False. Deleting the claim
// there lost the NodeClaim for good (regression suite: "NodeClaim
// StandaloneNodeClaim should create a standard NodeClaim").
func readyToOrder(nc *v1alpha1.ScalewayElasticMetalNodeClass) error {
	ready := nc.StatusConditions().Get(status.ConditionReady)
	switch {
	case ready != nil && ready.IsTrue():
		return nil
	case ready == nil || ready.IsUnknown():
		err := fmt.Errorf("nodeclass %q: readiness not known yet (its status controller has not reconciled it); nothing is ordered until it is Ready", nc.Name)
		return cloudprovider.NewCreateError(err, "NodeClassReadinessUnknown", err.Error())
	default:
		msg := "not ready"
		if ready.Message != "" {
			msg = ready.Message
		}
		return cloudprovider.NewNodeClassNotReadyError(fmt.Errorf("nodeclass %q: %s", nc.Name, msg))
	}
}
