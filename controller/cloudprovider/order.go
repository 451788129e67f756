package cloudprovider

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/ordertags"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/reservation"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spendlimit"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/warmpool"
)

// order gives the NodeClaim a server: a spare of a reserved offering (never
// an order), a spare monthly server of the cheapest fitting offering, or a
// new order, trying offerings cheapest first while they turn out exhausted,
// out of stock or over quota. A claim that allows only reserved offerings
// gets a spare or an InsufficientCapacityError, never an order.
func (c *CloudProvider) order(ctx context.Context, claim *karpv1.NodeClaim, nc *v1alpha1.ScalewayElasticMetalNodeClass) (*baremetal.Server, error) {
	reqs := scheduling.NewNodeSelectorRequirementsWithMinValues(claim.Spec.Requirements...)
	f, ok := c.filter(nc, reqs)
	if !ok {
		return nil, cloudprovider.NewInsufficientCapacityError(fmt.Errorf("nodeclass %s allows no billing period the nodeclaim accepts", nc.Name))
	}
	its, err := c.instanceTypes(ctx, nc, f)
	if err != nil {
		return nil, fmt.Errorf("listing instance types: %w", err)
	}
	candidates := cheapestFirst(its, reqs)
	if len(candidates) == 0 {
		return nil, cloudprovider.NewInsufficientCapacityError(fmt.Errorf("no available Elastic Metal offering matches the nodeclaim's requirements"))
	}
	claimTag := scaleway.Tag(scaleway.TagNodeClaim, claim.Name)
	var limits *spendlimit.Session
	if c.Limits != nil {
		if limits, err = c.Limits.Begin(ctx, nc); err != nil {
			return nil, err
		}
		defer limits.End()
	}
	var lastErr error
	for _, cand := range candidates {
		zone, billing := offeringZone(cand.offering), offeringBilling(cand.offering)
		offer, ok := c.Catalog.Offer(zone, cand.it.Name, billing)
		if !ok {
			continue
		}
		if cand.offering.CapacityType() == karpv1.CapacityTypeReserved {
			srv, err := c.takeReserved(ctx, claim, nc, cand.offering, offer.Name, billing)
			if err != nil || srv != nil {
				return srv, err
			}
			lastErr = reservation.ErrExhausted(cand.offering.ReservationID())
			continue
		}
		// Hourly spares exist only in a warm pool: no listing otherwise.
		if billing == catalog.BillingMonthly || warmpool.Wants(nc, c.opts.DefaultZone, zone, offer.Name, billing) {
			srv, err := c.Spares.Take(ctx, scw.Zone(zone), offer.Name, billing, nc, claim.Name, claim.Labels[karpv1.NodePoolLabelKey])
			if err != nil {
				return nil, err
			}
			if srv != nil {
				c.publish(claim, corev1.EventTypeNormal, "ReusedSpare", fmt.Sprintf("reusing spare %s server %s (%s) in %s", billing, srv.ID, srv.OfferName, zone))
				return srv, nil
			}
		}
		if err := limits.Check(zone, offer); err != nil {
			// Another offering may fit under the limit; this one is set
			// aside briefly so that Karpenter's next choice is another.
			c.spend.mark(nc, zone, offer.Name, billing, time.Now())
			c.publish(claim, corev1.EventTypeWarning, "SpendLimitReached", fmt.Sprintf("%s (%s) in %s not ordered: %v", offer.Name, billing, zone, err))
			lastErr = err
			continue
		}
		srv, _, err := c.API.CreateServer(ctx, scaleway.CreateServerRequest{
			Zone:           scw.Zone(zone),
			OfferID:        offer.ID,
			Name:           claim.Name,
			Description:    fmt.Sprintf("Karpenter node of cluster %s (nodepool %s)", c.opts.ClusterName, claim.Labels[karpv1.NodePoolLabelKey]),
			Tags:           c.serverTags(claim, nc, billing),
			IdempotencyTag: claimTag,
			Match:          ordertags.Match(c.Inventory.Owner),
		})
		if err == nil {
			limits.Ordered(srv, zone, offer)
			c.publish(claim, corev1.EventTypeNormal, "Ordered", fmt.Sprintf("ordered %s (%s) in %s: server %s", offer.Name, billing, zone, srv.ID))
			return srv, nil
		}
		switch {
		case scaleway.IsOutOfStock(err):
			c.Catalog.MarkUnavailable(zone, offer.Name, billing, catalog.ReasonOutOfStock)
		case scaleway.IsQuotaExceeded(err):
			c.Catalog.MarkUnavailable(zone, offer.Name, billing, catalog.ReasonQuota)
		case scaleway.IsOrderRefused(err):
			// One refused order per Create: set the offering aside and let Karpenter pick again.
			c.Catalog.MarkUnavailable(zone, offer.Name, billing, catalog.ReasonRefused)
			c.publish(claim, corev1.EventTypeWarning, "OrderRefused", fmt.Sprintf("%s (%s) in %s: %v", offer.Name, billing, zone, err))
			return nil, cloudprovider.NewInsufficientCapacityError(fmt.Errorf("ordering %s in %s was refused: %w", offer.Name, zone, err))
		default:
			// Among these, an order whose answer was lost (ErrOrderInFlight
			// on the next tries): no other offering is tried while it may
			// have been taken. Karpenter retries Create.
			// If it may have been taken, it counts against the spend
			// limits until it shows or its settle window ends.
			limits.InFlight(claimTag, zone, offer)
			if errors.Is(err, scaleway.ErrOrderInFlight) || scaleway.IsAmbiguous(err) {
				c.publish(claim, corev1.EventTypeWarning, "OrderInFlight", fmt.Sprintf("the order of %s in %s may have been taken; looking for its server before any new order", offer.Name, zone))
			}
			return nil, fmt.Errorf("ordering %s in %s: %w", offer.Name, zone, err)
		}
		c.log.Info("offering unavailable, trying the next one", "offer", offer.Name, "zone", zone, "billing", billing, "error", err.Error())
		c.publish(claim, corev1.EventTypeWarning, "OfferingUnavailable", fmt.Sprintf("%s (%s) in %s: %s", offer.Name, billing, zone, scaleway.Classify(err)))
		lastErr = err
	}
	if lastErr == nil {
		lastErr = errors.New("no offering of the catalogue matches")
	}
	return nil, cloudprovider.NewInsufficientCapacityError(fmt.Errorf("every compatible offering is out of stock, over quota or over a spend limit: %w", lastErr))
}

// takeReserved takes a spare of a reserved offering for the claim; none
// left (taken meanwhile, released): the reservation is marked exhausted
// until the next listing, so that Karpenter's next choice is another.
func (c *CloudProvider) takeReserved(ctx context.Context, claim *karpv1.NodeClaim, nc *v1alpha1.ScalewayElasticMetalNodeClass,
	of *cloudprovider.Offering, offerName string, billing catalog.BillingPeriod) (*baremetal.Server, error) {
	zone, id := offeringZone(of), of.ReservationID()
	srv, err := c.Spares.TakeReserved(ctx, scw.Zone(zone), offerName, billing, nc, claim.Name, claim.Labels[karpv1.NodePoolLabelKey], id)
	if err != nil || srv != nil {
		if srv != nil {
			c.publish(claim, corev1.EventTypeNormal, "ReusedSpare", fmt.Sprintf("took spare server %s (%s) in %s from reservation %s", srv.ID, srv.OfferName, zone, id))
		}
		return srv, err
	}
	c.Reservations.Exhausted(nc.Name, zone, offerName, billing)
	c.log.Info("reservation exhausted, trying the next offering", "reservation", id, "nodeclaim", claim.Name)
	return nil, nil
}

// serverTags are an order's tags (package ordertags), bought as billing.
func (c *CloudProvider) serverTags(claim *karpv1.NodeClaim, nc *v1alpha1.ScalewayElasticMetalNodeClass, billing catalog.BillingPeriod) []string {
	return ordertags.For(c.Inventory.Owner, nc, install.PhaseOrdered, time.Now(), billing,
		scaleway.Tag(scaleway.TagNodePool, claim.Labels[karpv1.NodePoolLabelKey]),
		scaleway.Tag(scaleway.TagNodeClaim, claim.Name))
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

func offeringZones(its []*cloudprovider.InstanceType) []string {
	var zones []string
	for _, it := range its {
		for _, of := range it.Offerings {
			if z := offeringZone(of); !slices.Contains(zones, z) {
				zones = append(zones, z)
			}
		}
	}
	return zones
}

func offeringBilling(of *cloudprovider.Offering) catalog.BillingPeriod {
	if r := of.Requirements.Get(catalog.LabelBillingPeriod); r.Len() == 1 {
		return catalog.BillingPeriod(r.Any())
	}
	return catalog.BillingHourly
}
