// Package ordertags holds what every order of a server carries, whoever
// places it (a NodeClaim's Create, the warm pool): the cluster's identity,
// the NodeClass, the phase, and which servers found under an order's
// idempotency tag may be taken for it.
package ordertags

import (
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/billing"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/identity"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// For is an order's tags: owner's identity, extra (the order's own, e.g.
// its NodeClaim), NodeClass nc, what the server is bought as (billing, paid
// from now: package billing reads it from there, never from the
// catalogue), the phase since now, then nc's spec.tags. The image tag is
// not among them: it says what the disk holds, and is written after
// imaging.
func For(owner *identity.Owner, nc *v1alpha1.ScalewayElasticMetalNodeClass, phase install.Phase, now time.Time, bought catalog.BillingPeriod, extra ...string) []string {
	tags := append(owner.Tags(), extra...)
	tags = append(tags, scaleway.Tag(scaleway.TagNodeClass, nc.Name))
	tags = append(tags, billing.Tags(bought, now)...)
	tags = install.SetPhaseIn(tags, phase, now)
	return append(tags, nc.Spec.Tags...)
}

// Match is CreateServerRequest.Match for owner: a server found under an
// order's idempotency tag is ours only with our identity, or with none
// (ordered by a version before identities, mid-upgrade); a namesake
// cluster's is never taken for ours.
func Match(owner *identity.Owner) func(tags []string) bool {
	return func(tags []string) bool {
		switch owner.Classify(tags) {
		case identity.Owned, identity.Legacy:
			return true
		}
		return false
	}
}
