package cloudprovider

import (
	"context"
	"fmt"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/nodeclass"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// A monthly server is paid for the month whether it runs or not. When its
// NodeClaim ends before the NodeClass's minimum lifetime, the server is kept
// as a spare (rebooted into rescue, so the old node is gone, and untagged from
// its NodeClaim) and the next NodeClaim of the same offer, zone and NodeClass
// takes it instead of ordering. The garbage collector releases spares whose
// minimum lifetime has passed.

// isMonthly reports whether srv was ordered with the monthly offer.
func (c *CloudProvider) isMonthly(srv *baremetal.Server) bool {
	offer, ok := c.catalog.Offer(string(srv.Zone), srv.OfferName, catalog.BillingMonthly)
	return ok && offer.ID == srv.OfferID
}

// SpareUntil is when a monthly server's minimum lifetime ends (zero when it has none).
func SpareUntil(srv *baremetal.Server, nc *v1alpha1.ScalewayElasticMetalNodeClass) time.Time {
	if nc == nil || nc.Spec.Billing.MinimumLifetime == nil || srv.CreatedAt == nil {
		return time.Time{}
	}
	return srv.CreatedAt.Add(nc.Spec.Billing.MinimumLifetime.Duration)
}

func (c *CloudProvider) keepAsSpare(ctx context.Context, claim *karpv1.NodeClaim, srv *baremetal.Server) (bool, error) {
	if !c.isMonthly(srv) {
		return false, nil
	}
	nc, err := nodeclass.Get(ctx, c.kube, claim.Spec.NodeClassRef)
	if err != nil {
		return false, nil // no NodeClass, no policy: release
	}
	if until := SpareUntil(srv, nc); until.IsZero() || time.Now().After(until) {
		return false, nil
	}
	tags := srv.Tags
	tags, _ = scaleway.RemoveTagIn(tags, scaleway.TagNodeClaim)
	tags, _ = scaleway.RemoveTagIn(tags, scaleway.TagNodePool)
	tags, _ = scaleway.SetTagIn(tags, scaleway.TagPhase, string(install.PhaseSpare))
	if _, err := c.api.UpdateServerTags(ctx, srv.Zone, srv.ID, tags); err != nil {
		return false, fmt.Errorf("keeping server %s as a spare: %w", srv.ID, err)
	}
	keyIDs, err := c.keys.KeyIDs(ctx)
	if err == nil {
		_, err = c.api.RebootServer(ctx, srv.Zone, srv.ID, baremetal.ServerBootTypeRescue, keyIDs)
	}
	if err != nil {
		// The tags already say spare; the next claim reboots it into rescue anyway.
		c.log.Error(err, "rebooting a spare server into rescue", "server", srv.ID)
	}
	c.log.Info("kept monthly server as a spare", "server", srv.ID, "offer", srv.OfferName, "until", SpareUntil(srv, nc))
	return true, nil
}

// claimSpare takes a spare server of offerName in zone for claim, if there is one.
func (c *CloudProvider) claimSpare(ctx context.Context, claim *karpv1.NodeClaim, nc *v1alpha1.ScalewayElasticMetalNodeClass, zone, offerName string) (*baremetal.Server, error) {
	c.claimMu.Lock()
	defer c.claimMu.Unlock()
	spares, err := c.api.ListServers(ctx, scw.Zone(zone), []string{
		c.managedByTag(), scaleway.Tag(scaleway.TagPhase, string(install.PhaseSpare)), scaleway.Tag(scaleway.TagNodeClass, nc.Name),
	})
	if err != nil {
		return nil, fmt.Errorf("looking for spare servers: %w", err)
	}
	for _, s := range spares {
		if s.OfferName != offerName || s.Status == baremetal.ServerStatusDeleting {
			continue
		}
		tags := s.Tags
		tags, _ = scaleway.SetTagIn(tags, scaleway.TagNodeClaim, claim.Name)
		tags, _ = scaleway.SetTagIn(tags, scaleway.TagNodePool, claim.Labels[karpv1.NodePoolLabelKey])
		tags, _ = scaleway.SetTagIn(tags, scaleway.TagPhase, string(install.PhaseRescue))
		if nc.Status.Image != nil {
			tags, _ = scaleway.SetTagIn(tags, scaleway.TagImage, shortDigest(nc.Status.Image.RawSHA256))
		}
		updated, err := c.api.UpdateServerTags(ctx, s.Zone, s.ID, tags)
		if err != nil {
			return nil, fmt.Errorf("claiming spare server %s: %w", s.ID, err)
		}
		c.publish(claim, "Normal", "ReusedSpare", fmt.Sprintf("reusing spare monthly server %s (%s) in %s", s.ID, s.OfferName, zone))
		return updated, nil
	}
	return nil, nil
}
