package cloudprovider

import (
	"context"
	"fmt"
	"slices"
	"sort"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
)

// order gives the NodeClaim a server: a spare of a reserved offering (never
// an order), a spare monthly server of the cheapest fitting offering, or a
// new order, trying offerings cheapest first while they turn out exhausted,
// out of stock or over quota (the orderer's paths). A claim that allows only
// reserved offerings gets a spare or an InsufficientCapacityError, never an
// order. The NodeClass's spend limits hold for the whole Create: its lock
// is taken before the first offering is tried.
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
	o := c.orderer(claim, nc)
	if c.Limits != nil {
		limits, err := c.Limits.Begin(ctx, nc)
		if err != nil {
			return nil, err
		}
		// nil when the NodeClass has no limits.
		if limits != nil {
			defer limits.End()
			o.limits = limits
		}
	}
	return o.run(ctx, candidates)
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
