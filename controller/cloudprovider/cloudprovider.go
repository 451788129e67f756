// Package cloudprovider implements Karpenter's CloudProvider for Scaleway
// Elastic Metal: Create orders (or resumes) a server and runs the install
// pipeline; Delete, Get and List work from the server's tags; instance types
// come from the catalog.
package cloudprovider

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/awslabs/operatorpkg/status"
	"github.com/go-logr/logr"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/events"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/bootstraptoken"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/imagesource"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/nodeclass"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/talosgen"
)

// Name of this cloud provider.
const Name = "scaleway-em"

// ImageSource resolves a NodeClass's image to what em-imager needs (*imagesource.Source).
type ImageSource interface {
	Resolve(ctx context.Context, s imagesource.Settings) (*imagesource.Image, error)
}

// RescueKeys gives the IAM SSH key IDs rescue systems must accept.
type RescueKeys interface {
	KeyIDs(ctx context.Context) ([]string, error)
}

// Options of the CloudProvider.
type Options struct {
	ClusterName string
	DefaultZone scw.Zone
	// IPv6Gateway for the nodes' static IPv6 route; empty: learnt from router advertisements.
	IPv6Gateway string
	// RepairToleration before Karpenter replaces a NotReady node (default 20m).
	RepairToleration time.Duration
	// Tokens makes per-NodeClaim bootstrap tokens (NodeClass bootstrapToken: PerNodeClaim).
	Tokens *bootstraptoken.Manager
}

// CloudProvider is Karpenter's CloudProvider for Elastic Metal.
type CloudProvider struct {
	kube      client.Client
	secrets   client.Reader // join Secrets, read directly (see nodeclass.StatusController)
	recorder  events.Recorder
	catalog   *catalog.Catalog
	api       *scaleway.Client
	installer *install.Installer
	images    ImageSource
	keys      RescueKeys
	opts      Options
	log       logr.Logger

	// inflight cancels the install of a NodeClaim that is deleted while Create runs.
	mu       sync.Mutex
	inflight map[string]context.CancelFunc
	// claimMu serialises claiming spare servers, so two Creates never take the same one.
	claimMu sync.Mutex
}

// New returns the CloudProvider.
func New(kube client.Client, secrets client.Reader, recorder events.Recorder, cat *catalog.Catalog, api *scaleway.Client, inst *install.Installer,
	images ImageSource, keys RescueKeys, opts Options, log logr.Logger) *CloudProvider {
	return &CloudProvider{
		kube: kube, secrets: secrets, recorder: recorder, catalog: cat, api: api, installer: inst, images: images, keys: keys,
		opts: opts, log: log, inflight: map[string]context.CancelFunc{},
	}
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

func (c *CloudProvider) managedByTag() string {
	return scaleway.Tag(scaleway.TagManagedBy, c.opts.ClusterName)
}

// GetInstanceTypes implements cloudprovider.CloudProvider.
func (c *CloudProvider) GetInstanceTypes(ctx context.Context, np *karpv1.NodePool) ([]*cloudprovider.InstanceType, error) {
	nc, err := nodeclass.Get(ctx, c.kube, np.Spec.Template.Spec.NodeClassRef)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return c.catalog.InstanceTypes(ctx, nodeclass.Filter(nc, string(c.opts.DefaultZone)))
}

// Create implements cloudprovider.CloudProvider: it returns once the image is
// written and the node is booting Talos with its config.
func (c *CloudProvider) Create(ctx context.Context, claim *karpv1.NodeClaim) (*karpv1.NodeClaim, error) {
	nc, err := nodeclass.Get(ctx, c.kube, claim.Spec.NodeClassRef)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, cloudprovider.NewNodeClassNotReadyError(fmt.Errorf("nodeclass %q not found", claim.Spec.NodeClassRef.Name))
		}
		return nil, fmt.Errorf("getting nodeclass: %w", err)
	}
	if !nc.StatusConditions().Root().IsTrue() {
		ready := nc.StatusConditions().Get(status.ConditionReady)
		msg := "not ready"
		if ready != nil && ready.Message != "" {
			msg = ready.Message
		}
		return nil, cloudprovider.NewNodeClassNotReadyError(fmt.Errorf("nodeclass %q: %s", nc.Name, msg))
	}
	ctx, cancel := context.WithCancel(ctx)
	c.mu.Lock()
	c.inflight[claim.Name] = cancel
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.inflight, claim.Name)
		c.mu.Unlock()
		cancel()
	}()

	// Everything the install needs is checked before ordering: a server that
	// cannot be imaged must not be bought.
	img, err := c.images.Resolve(ctx, nodeclass.ImageSettings(nc))
	if err != nil {
		return nil, cloudprovider.NewNodeClassNotReadyError(fmt.Errorf("resolving the image: %w", err))
	}
	keyIDs, err := c.keys.KeyIDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("rescue SSH key: %w", err)
	}
	srv, it, offering, err := c.findOrOrder(ctx, claim, nc)
	if err != nil {
		return nil, err
	}
	if err := c.install(ctx, claim, nc, srv, img, keyIDs); err != nil {
		return nil, err
	}
	return c.hydrate(claim, nc, srv, it, offering), nil
}

// findOrOrder returns the NodeClaim's server: the one already tagged for it
// (a restart or a retried Create), a spare monthly server, or a new order.
func (c *CloudProvider) findOrOrder(ctx context.Context, claim *karpv1.NodeClaim, nc *v1alpha1.ScalewayElasticMetalNodeClass) (*baremetal.Server, *cloudprovider.InstanceType, *cloudprovider.Offering, error) {
	its, err := c.catalog.InstanceTypes(ctx, nodeclass.Filter(nc, string(c.opts.DefaultZone)))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("listing instance types: %w", err)
	}
	zones := nc.ZonesOr(string(c.opts.DefaultZone))
	claimTag := scaleway.Tag(scaleway.TagNodeClaim, claim.Name)
	for _, z := range zones {
		srvs, err := c.api.ListServers(ctx, scw.Zone(z), []string{c.managedByTag(), claimTag})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("looking for the server of nodeclaim %s: %w", claim.Name, err)
		}
		for _, s := range srvs {
			if s.Status == baremetal.ServerStatusDeleting {
				continue
			}
			it, of := matchServer(its, s)
			c.log.Info("resuming the server already ordered for this nodeclaim", "nodeclaim", claim.Name, "server", s.ID, "zone", z, "phase", install.PhaseOf(s))
			return s, it, of, nil
		}
	}

	reqs := scheduling.NewNodeSelectorRequirementsWithMinValues(claim.Spec.Requirements...)
	candidates := cheapestFirst(its, reqs)
	if len(candidates) == 0 {
		return nil, nil, nil, cloudprovider.NewInsufficientCapacityError(fmt.Errorf("no available Elastic Metal offering matches the nodeclaim's requirements"))
	}
	var lastErr error
	for _, cand := range candidates {
		zone, billing := offeringZone(cand.offering), offeringBilling(cand.offering)
		offer, ok := c.catalog.Offer(zone, cand.it.Name, billing)
		if !ok {
			continue
		}
		if srv, err := c.claimSpare(ctx, claim, nc, zone, offer.Name); err != nil {
			return nil, nil, nil, err
		} else if srv != nil {
			return srv, cand.it, cand.offering, nil
		}
		srv, _, err := c.api.CreateServer(ctx, scaleway.CreateServerRequest{
			Zone:           scw.Zone(zone),
			OfferID:        offer.ID,
			Name:           claim.Name,
			Description:    fmt.Sprintf("Karpenter node of cluster %s (nodepool %s)", c.opts.ClusterName, claim.Labels[karpv1.NodePoolLabelKey]),
			Tags:           c.serverTags(claim, nc),
			IdempotencyTag: claimTag,
		})
		if err == nil {
			c.publish(claim, corev1.EventTypeNormal, "Ordered", fmt.Sprintf("ordered %s (%s) in %s: server %s", offer.Name, billing, zone, srv.ID))
			return srv, cand.it, cand.offering, nil
		}
		switch {
		case scaleway.IsOutOfStock(err):
			c.catalog.MarkUnavailable(zone, offer.Name, billing, catalog.ReasonOutOfStock)
		case scaleway.IsQuotaExceeded(err):
			c.catalog.MarkUnavailable(zone, offer.Name, billing, catalog.ReasonQuota)
		case scaleway.IsOrderRefused(err):
			// One refused order per Create: set the offering aside and let Karpenter pick again.
			c.catalog.MarkUnavailable(zone, offer.Name, billing, catalog.ReasonRefused)
			c.publish(claim, corev1.EventTypeWarning, "OrderRefused", fmt.Sprintf("%s (%s) in %s: %v", offer.Name, billing, zone, err))
			return nil, nil, nil, cloudprovider.NewInsufficientCapacityError(fmt.Errorf("ordering %s in %s was refused: %w", offer.Name, zone, err))
		default:
			return nil, nil, nil, fmt.Errorf("ordering %s in %s: %w", offer.Name, zone, err)
		}
		c.log.Info("offering unavailable, trying the next one", "offer", offer.Name, "zone", zone, "billing", billing, "error", err.Error())
		c.publish(claim, corev1.EventTypeWarning, "OfferingUnavailable", fmt.Sprintf("%s (%s) in %s: %s", offer.Name, billing, zone, scaleway.Classify(err)))
		lastErr = err
	}
	if lastErr == nil {
		lastErr = errors.New("no offering of the catalogue matches")
	}
	return nil, nil, nil, cloudprovider.NewInsufficientCapacityError(fmt.Errorf("every compatible offering is out of stock or over quota: %w", lastErr))
}

func (c *CloudProvider) serverTags(claim *karpv1.NodeClaim, nc *v1alpha1.ScalewayElasticMetalNodeClass) []string {
	tags := []string{
		c.managedByTag(),
		scaleway.Tag(scaleway.TagNodePool, claim.Labels[karpv1.NodePoolLabelKey]),
		scaleway.Tag(scaleway.TagNodeClaim, claim.Name),
		scaleway.Tag(scaleway.TagNodeClass, nc.Name),
		scaleway.Tag(scaleway.TagPhase, string(install.PhaseOrdered)),
	}
	if nc.Status.Image != nil {
		tags = append(tags, scaleway.Tag(scaleway.TagImage, shortDigest(nc.Status.Image.RawSHA256)))
	}
	return append(tags, nc.Spec.Tags...)
}

// install runs the pipeline; a phase that cannot go on releases the server.
func (c *CloudProvider) install(ctx context.Context, claim *karpv1.NodeClaim, nc *v1alpha1.ScalewayElasticMetalNodeClass,
	srv *baremetal.Server, img *imagesource.Image, keyIDs []string) error {
	job := &install.Job{
		Server:    srv,
		SSHKeyIDs: keyIDs,
		Image: install.Image{URL: img.URL, SHA256: img.RawSHA256, Format: img.Format, RawSize: img.RawSize,
			Disk: nc.Spec.Rescue.Disk, VerifyReadback: nc.Spec.Rescue.VerifyReadback},
		PrivateNetworkIDs: nc.Spec.PrivateNetworkIDs,
		Render: func(ctx context.Context, hw *report.Report, network talosgen.Network) ([]byte, error) {
			return c.render(ctx, claim, nc, srv, hw, network)
		},
		Progress: func(p install.Phase, msg string) {
			c.publish(claim, corev1.EventTypeNormal, "Install"+phaseReason(p), msg)
		},
		Joined: func(ctx context.Context) (bool, error) {
			return c.nodeRegistered(ctx, scaleway.ProviderID(srv.Zone, srv.ID))
		},
	}
	latest, err := c.installer.Run(ctx, job)
	if err == nil {
		return nil
	}
	if latest != nil {
		srv = latest
	}
	var pe *install.PhaseError
	if errors.As(err, &pe) && pe.Release && ctx.Err() == nil {
		c.publish(claim, corev1.EventTypeWarning, "InstallFailed", fmt.Sprintf("phase %s failed, releasing server %s: %v", pe.Phase, srv.ID, pe.Err))
		rctx := context.WithoutCancel(ctx)
		// A monthly server is paid for anyway: unless it is broken, keep it for the next NodeClaim.
		kept := false
		if srv.Status != baremetal.ServerStatusError {
			kept, _ = c.keepAsSpare(rctx, claim, srv)
		}
		if !kept {
			if _, derr := c.api.DeleteServer(rctx, srv.Zone, srv.ID); derr != nil && !scaleway.IsNotFound(derr) {
				c.log.Error(derr, "releasing a server whose install failed", "server", srv.ID)
			}
		}
		return cloudprovider.NewCreateError(err, "InstallFailed", truncate(err.Error(), 280))
	}
	if errors.As(err, &pe) {
		return cloudprovider.NewCreateError(err, "Install"+phaseReason(pe.Phase), truncate(err.Error(), 280))
	}
	return err
}

func (c *CloudProvider) render(ctx context.Context, claim *karpv1.NodeClaim, nc *v1alpha1.ScalewayElasticMetalNodeClass, srv *baremetal.Server,
	hw *report.Report, network talosgen.Network) ([]byte, error) {
	join, err := nodeclass.JoinMaterial(ctx, c.secrets, nc)
	if err != nil {
		return nil, err
	}
	if network.IPv6Gateway == "" {
		network.IPv6Gateway = c.opts.IPv6Gateway
	}
	if network.IPv6Gateway == "" {
		network.IPv6Address = "" // without a gateway a static /128 routes nowhere; leave IPv6 to router advertisements
	}
	vlans, err := c.privateNetworks(ctx, srv, nc)
	if err != nil {
		return nil, err
	}
	network.PrivateNetworks = vlans
	// talosgen reads the provider ID from the NodeClaim's status.
	settings := nodeclass.Settings(nc)
	if nc.Spec.Talos.BootstrapToken == v1alpha1.BootstrapTokenPerNodeClaim {
		if c.opts.Tokens == nil {
			return nil, errors.New("per-nodeclaim bootstrap tokens are not enabled in this controller")
		}
		if settings.BootstrapToken, err = c.opts.Tokens.Ensure(ctx, claim.Name); err != nil {
			return nil, err
		}
	}
	withID := claim.DeepCopy()
	withID.Status.ProviderID = scaleway.ProviderID(srv.Zone, srv.ID)
	out, err := talosgen.Render(join, withID, settings, hw, network)
	if err != nil {
		return nil, err
	}
	return out.Config, nil
}

func (c *CloudProvider) privateNetworks(ctx context.Context, srv *baremetal.Server, nc *v1alpha1.ScalewayElasticMetalNodeClass) ([]talosgen.PrivateNetwork, error) {
	if len(nc.Spec.PrivateNetworkIDs) == 0 {
		return nil, nil
	}
	list, err := c.api.ListServerPrivateNetworks(ctx, srv.Zone, srv.ID)
	if err != nil {
		return nil, fmt.Errorf("private networks of %s: %w", srv.ID, err)
	}
	vlans := scaleway.VLANs(list)
	var out []talosgen.PrivateNetwork
	for _, id := range nc.Spec.PrivateNetworkIDs {
		v, ok := vlans[id]
		if !ok {
			return nil, fmt.Errorf("private network %s is not attached to server %s", id, srv.ID)
		}
		out = append(out, talosgen.PrivateNetwork{VLAN: uint16(v), DHCP: true})
	}
	return out, nil
}

func (c *CloudProvider) nodeRegistered(ctx context.Context, providerID string) (bool, error) {
	nodes := &corev1.NodeList{}
	if err := c.kube.List(ctx, nodes, client.MatchingFields{"spec.providerID": providerID}); err != nil {
		// Without the field index (tests with a plain client), scan.
		if err := c.kube.List(ctx, nodes); err != nil {
			return false, err
		}
	}
	for _, n := range nodes.Items {
		if n.Spec.ProviderID == providerID {
			return true, nil
		}
	}
	return false, nil
}

// Delete implements cloudprovider.CloudProvider.
func (c *CloudProvider) Delete(ctx context.Context, claim *karpv1.NodeClaim) error {
	c.mu.Lock()
	if cancel, ok := c.inflight[claim.Name]; ok {
		cancel() // stop an install in flight; the server is found below by its tag
	}
	c.mu.Unlock()
	srv, err := c.serverOf(ctx, claim)
	if err != nil {
		return err
	}
	if srv == nil {
		return cloudprovider.NewNodeClaimNotFoundError(fmt.Errorf("no server for nodeclaim %s", claim.Name))
	}
	if srv.Status == baremetal.ServerStatusDeleting {
		return nil
	}
	if keep, err := c.keepAsSpare(ctx, claim, srv); err != nil || keep {
		if err != nil {
			return err
		}
		return cloudprovider.NewNodeClaimNotFoundError(fmt.Errorf("server %s kept as a spare", srv.ID))
	}
	if _, err := c.api.DeleteServer(ctx, srv.Zone, srv.ID); err != nil {
		if scaleway.IsNotFound(err) {
			return cloudprovider.NewNodeClaimNotFoundError(err)
		}
		return fmt.Errorf("deleting server %s: %w", srv.ID, err)
	}
	c.log.Info("deleting server", "nodeclaim", claim.Name, "server", srv.ID, "zone", string(srv.Zone))
	return nil
}

// serverOf finds a NodeClaim's server by provider ID, else by its tag (a
// NodeClaim deleted while Create was running has no provider ID yet).
func (c *CloudProvider) serverOf(ctx context.Context, claim *karpv1.NodeClaim) (*baremetal.Server, error) {
	if claim.Status.ProviderID != "" {
		zone, id, err := scaleway.ParseProviderID(claim.Status.ProviderID)
		if err != nil {
			return nil, err
		}
		srv, err := c.api.GetServer(ctx, zone, id)
		if scaleway.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if !scaleway.HasTags(srv.Tags, c.managedByTag()) {
			return nil, nil
		}
		return srv, nil
	}
	nc, err := nodeclass.Get(ctx, c.kube, claim.Spec.NodeClassRef)
	zones := []string{string(c.opts.DefaultZone)}
	if err == nil {
		zones = nc.ZonesOr(string(c.opts.DefaultZone))
	} else if !apierrors.IsNotFound(err) {
		return nil, err
	} else {
		zones = allZones()
	}
	for _, z := range zones {
		srvs, err := c.api.ListServers(ctx, scw.Zone(z), []string{c.managedByTag(), scaleway.Tag(scaleway.TagNodeClaim, claim.Name)})
		if err != nil {
			return nil, err
		}
		for _, s := range srvs {
			return s, nil
		}
	}
	return nil, nil
}

// Get implements cloudprovider.CloudProvider.
func (c *CloudProvider) Get(ctx context.Context, providerID string) (*karpv1.NodeClaim, error) {
	zone, id, err := scaleway.ParseProviderID(providerID)
	if err != nil {
		return nil, cloudprovider.NewNodeClaimNotFoundError(err)
	}
	srv, err := c.api.GetServer(ctx, zone, id)
	if err != nil {
		if scaleway.IsNotFound(err) {
			return nil, cloudprovider.NewNodeClaimNotFoundError(err)
		}
		return nil, err
	}
	if !scaleway.HasTags(srv.Tags, c.managedByTag()) || install.PhaseOf(srv) == install.PhaseSpare {
		return nil, cloudprovider.NewNodeClaimNotFoundError(fmt.Errorf("server %s is not a node of cluster %s", id, c.opts.ClusterName))
	}
	return c.fromServer(srv), nil
}

// List implements cloudprovider.CloudProvider. Servers in every state are
// listed (an errored server is a node with a problem, not a missing one); any
// API failure is an error, never a shorter list.
func (c *CloudProvider) List(ctx context.Context) ([]*karpv1.NodeClaim, error) {
	zones, err := c.ZonesInUse(ctx)
	if err != nil {
		return nil, err
	}
	var out []*karpv1.NodeClaim
	for _, z := range zones {
		srvs, err := c.api.ListServers(ctx, scw.Zone(z), []string{c.managedByTag()})
		if err != nil {
			return nil, fmt.Errorf("listing servers in %s: %w", z, err)
		}
		for _, s := range srvs {
			if install.PhaseOf(s) == install.PhaseSpare {
				continue
			}
			out = append(out, c.fromServer(s))
		}
	}
	return out, nil
}

// ZonesInUse are the default zone plus every NodeClass's zones.
func (c *CloudProvider) ZonesInUse(ctx context.Context) ([]string, error) {
	set := map[string]bool{string(c.opts.DefaultZone): true}
	list := &v1alpha1.ScalewayElasticMetalNodeClassList{}
	if err := c.kube.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing nodeclasses: %w", err)
	}
	for i := range list.Items {
		for _, z := range list.Items[i].Spec.Zones {
			set[z] = true
		}
	}
	zones := make([]string, 0, len(set))
	for z := range set {
		zones = append(zones, z)
	}
	sort.Strings(zones)
	return zones, nil
}

// fromServer is the NodeClaim Karpenter sees for a server (Get and List).
func (c *CloudProvider) fromServer(s *baremetal.Server) *karpv1.NodeClaim {
	tags := scaleway.ParseTags(s.Tags)
	labels := map[string]string{
		corev1.LabelTopologyZone:    string(s.Zone),
		karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeOnDemand,
	}
	if s.OfferName != "" {
		labels[corev1.LabelInstanceTypeStable] = s.OfferName
	}
	if np := tags[scaleway.TagNodePool]; np != "" {
		labels[karpv1.NodePoolLabelKey] = np
	}
	nc := &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:   tags[scaleway.TagNodeClaim],
			Labels: labels,
		},
		Status: karpv1.NodeClaimStatus{ProviderID: scaleway.ProviderID(s.Zone, s.ID)},
	}
	if s.CreatedAt != nil {
		nc.CreationTimestamp = metav1.NewTime(*s.CreatedAt)
	}
	if s.Status == baremetal.ServerStatusDeleting {
		now := metav1.Now()
		nc.DeletionTimestamp = &now
	}
	if ncName := tags[scaleway.TagNodeClass]; ncName != "" {
		nc.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: v1alpha1.SchemeGroupVersion.Group, Kind: "ScalewayElasticMetalNodeClass", Name: ncName}
	}
	return nc
}

// hydrate is the NodeClaim Create returns.
func (c *CloudProvider) hydrate(claim *karpv1.NodeClaim, nc *v1alpha1.ScalewayElasticMetalNodeClass, srv *baremetal.Server,
	it *cloudprovider.InstanceType, of *cloudprovider.Offering) *karpv1.NodeClaim {
	out := c.fromServer(srv)
	out.Name = claim.Name
	if it != nil {
		for key, req := range it.Requirements {
			if req.Len() == 1 {
				out.Labels[key] = req.Values()[0]
			}
		}
		out.Status.Capacity = it.Capacity
		out.Status.Allocatable = it.Allocatable()
	}
	if of != nil {
		for key, req := range of.Requirements {
			if req.Len() == 1 {
				out.Labels[key] = req.Values()[0]
			}
		}
	}
	out.Labels[corev1.LabelTopologyZone] = string(srv.Zone)
	out.Annotations = map[string]string{
		v1alpha1.AnnotationNodeClassHash:        nc.Hash(),
		v1alpha1.AnnotationNodeClassHashVersion: v1alpha1.NodeClassHashVersion,
	}
	if img := nc.Status.Image; img != nil {
		out.Annotations[v1alpha1.AnnotationImageSHA256] = img.RawSHA256
		out.Annotations[v1alpha1.AnnotationTalosVersion] = img.TalosVersion
		out.Annotations[v1alpha1.AnnotationSchematicID] = img.SchematicID
		out.Status.ImageID = img.RawSHA256
	}
	return out
}

// Drift reasons.
const (
	DriftNodeClass cloudprovider.DriftReason = "NodeClassDrift"
	DriftImage     cloudprovider.DriftReason = "ImageDrift"
)

// IsDrifted implements cloudprovider.CloudProvider.
func (c *CloudProvider) IsDrifted(ctx context.Context, claim *karpv1.NodeClaim) (cloudprovider.DriftReason, error) {
	nc, err := nodeclass.Get(ctx, c.kube, claim.Spec.NodeClassRef)
	if err != nil {
		return "", client.IgnoreNotFound(err)
	}
	if claim.Annotations[v1alpha1.AnnotationNodeClassHashVersion] == v1alpha1.NodeClassHashVersion &&
		claim.Annotations[v1alpha1.AnnotationNodeClassHash] != "" &&
		claim.Annotations[v1alpha1.AnnotationNodeClassHash] != nc.Hash() {
		return DriftNodeClass, nil
	}
	if img := nc.Status.Image; img != nil && img.RawSHA256 != "" {
		if have := claim.Annotations[v1alpha1.AnnotationImageSHA256]; have != "" && have != img.RawSHA256 {
			return DriftImage, nil
		}
	}
	return "", nil
}

func (c *CloudProvider) publish(claim *karpv1.NodeClaim, typ, reason, msg string) {
	if c.recorder == nil {
		return
	}
	c.recorder.Publish(events.Event{
		InvolvedObject: claim,
		Type:           typ,
		Reason:         reason,
		Message:        msg,
		DedupeValues:   []string{claim.Name, reason, msg},
	})
}

type candidate struct {
	it       *cloudprovider.InstanceType
	offering *cloudprovider.Offering
}

// cheapestFirst lists every available offering compatible with reqs, cheapest first.
func cheapestFirst(its []*cloudprovider.InstanceType, reqs scheduling.Requirements) []candidate {
	var out []candidate
	for _, it := range its {
		if err := reqs.Compatible(it.Requirements, scheduling.AllowUndefinedWellKnownLabels); err != nil {
			continue
		}
		for _, of := range it.Offerings.Available().Compatible(reqs) {
			out = append(out, candidate{it: it, offering: of})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].offering.Price != out[j].offering.Price {
			return out[i].offering.Price < out[j].offering.Price
		}
		return out[i].it.Name < out[j].it.Name
	})
	return out
}

func offeringZone(of *cloudprovider.Offering) string {
	return of.Requirements.Get(corev1.LabelTopologyZone).Any()
}

func offeringBilling(of *cloudprovider.Offering) catalog.BillingPeriod {
	if r := of.Requirements.Get(catalog.LabelBillingPeriod); r.Len() == 1 {
		return catalog.BillingPeriod(r.Any())
	}
	return catalog.BillingHourly
}

// matchServer finds the instance type and offering of an existing server.
func matchServer(its []*cloudprovider.InstanceType, s *baremetal.Server) (*cloudprovider.InstanceType, *cloudprovider.Offering) {
	for _, it := range its {
		if it.Name != s.OfferName {
			continue
		}
		for _, of := range it.Offerings {
			if offeringZone(of) == string(s.Zone) {
				return it, of
			}
		}
		return it, nil
	}
	return nil, nil
}

func phaseReason(p install.Phase) string {
	s := string(p)
	if s == "" {
		return ""
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func shortDigest(d string) string {
	if len(d) > 16 {
		return d[:16]
	}
	return d
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func allZones() []string {
	return []string{"fr-par-1", "fr-par-2", "nl-ams-1", "nl-ams-2", "pl-waw-2", "pl-waw-3"}
}
