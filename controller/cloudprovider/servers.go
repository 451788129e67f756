package cloudprovider

import (
	"context"
	"maps"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/nodeclass"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/reservation"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/spare"
)

// fromServer is the NodeClaim Karpenter sees for a server (Get and List).
func (c *CloudProvider) fromServer(s *baremetal.Server) *karpv1.NodeClaim {
	tags := scaleway.ParseTags(s.Tags)
	labels := reservation.Labels(s)
	labels[corev1.LabelTopologyZone] = string(s.Zone)
	labels[catalog.LabelBillingPeriod] = string(spare.Billing(c.Catalog, s))
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

// hydrate is the NodeClaim Create returns for srv: its instance type's and
// offering's labels and capacity (the offering of the server's own zone and
// billing period, whatever the NodeClass allows now), and the NodeClass's
// hash (nc: the claim's NodeClass, nil when it is gone). The image
// annotations come later, from what the install writes.
func (c *CloudProvider) hydrate(ctx context.Context, claim *karpv1.NodeClaim, srv *baremetal.Server, nc *v1alpha1.ScalewayElasticMetalNodeClass) *karpv1.NodeClaim {
	out := c.fromServer(srv)
	out.Name = claim.Name
	f := catalog.Filter{BillingPeriods: catalog.BillingPeriods}
	if nc != nil {
		f = nodeclass.Filter(nc, c.opts.DefaultZone)
		f.Zones, f.BillingPeriods = nil, catalog.BillingPeriods
	}
	if its, err := c.Catalog.InstanceTypes(ctx, f); err == nil {
		it, of := matchServer(its, srv, spare.Billing(c.Catalog, srv))
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
	} else {
		c.log.Error(err, "instance types for a server's labels", "server", srv.ID)
	}
	out.Labels[corev1.LabelTopologyZone] = string(srv.Zone)
	out.Labels[catalog.LabelBillingPeriod] = string(spare.Billing(c.Catalog, srv))
	// The offering matched is the on-demand one: a server taken from a
	// reservation is labelled as Get and List see it.
	maps.Copy(out.Labels, reservation.Labels(srv))
	if nc != nil {
		out.Annotations = map[string]string{
			v1alpha1.AnnotationNodeClassHash:        nc.Hash(),
			v1alpha1.AnnotationNodeClassHashVersion: v1alpha1.NodeClassHashVersion,
		}
	}
	return out
}

// matchServer finds the instance type and offering of an existing server:
// its offer, zone and billing period.
func matchServer(its []*cloudprovider.InstanceType, s *baremetal.Server, billing catalog.BillingPeriod) (*cloudprovider.InstanceType, *cloudprovider.Offering) {
	for _, it := range its {
		if it.Name != s.OfferName {
			continue
		}
		for _, of := range it.Offerings {
			if offeringZone(of) == string(s.Zone) && offeringBilling(of) == billing {
				return it, of
			}
		}
		return it, nil
	}
	return nil, nil
}
