package cloudprovider

import (
	"slices"
	"sync"
	"time"

	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
)

// spendMarkTTL is how long an offering stays set aside for a NodeClass after
// ordering it would have crossed the NodeClass's spend limits.
const spendMarkTTL = 3 * time.Minute

// spendMarks set an offering aside for one NodeClass while ordering it would
// cross that NodeClass's spend limits, so that Karpenter's next choice for
// it is another offering. They are not catalogue marks: those hide the
// offering from every NodeClass and outlive a limit that is raised or lifted
// (the soak's seed 16 left pods pending that way). A mark is keyed by the
// limits it was made under, so changing them ends it at once.
type spendMarks struct {
	mu sync.Mutex
	m  map[spendKey]time.Time
}

type spendKey struct {
	nodeClass, limits, zone, offer string
	billing                        catalog.BillingPeriod
}

func limitsOf(nc *v1alpha1.ScalewayElasticMetalNodeClass) string {
	if nc.Spec.Limits == nil {
		return ""
	}
	return nc.Spec.Limits.HourlySpend + "/" + nc.Spec.Limits.MonthlyCommitment
}

func (s *spendMarks) mark(nc *v1alpha1.ScalewayElasticMetalNodeClass, zone, offer string, billing catalog.BillingPeriod, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[spendKey]time.Time{}
	}
	for k, until := range s.m {
		if !now.Before(until) {
			delete(s.m, k)
		}
	}
	s.m[spendKey{nodeClass: nc.Name, limits: limitsOf(nc), zone: zone, offer: offer, billing: billing}] = now.Add(spendMarkTTL)
}

// apply returns its with the NodeClass's marked offerings unavailable. The
// instance types are the catalogue's, shared by every NodeClass: a marked
// one is copied, never changed in place.
func (s *spendMarks) apply(nc *v1alpha1.ScalewayElasticMetalNodeClass, its []*cloudprovider.InstanceType, now time.Time) []*cloudprovider.InstanceType {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) == 0 {
		return its
	}
	limits := limitsOf(nc)
	marked := func(it *cloudprovider.InstanceType, of *cloudprovider.Offering) bool {
		until, ok := s.m[spendKey{nodeClass: nc.Name, limits: limits, zone: offeringZone(of), offer: it.Name, billing: offeringBilling(of)}]
		return ok && now.Before(until) && of.Available
	}
	var out []*cloudprovider.InstanceType
	for i, it := range its {
		if !slices.ContainsFunc(it.Offerings, func(of *cloudprovider.Offering) bool { return marked(it, of) }) {
			continue
		}
		if out == nil {
			out = slices.Clone(its)
		}
		offerings := slices.Clone(it.Offerings)
		for j, of := range offerings {
			if marked(it, of) {
				aside := *of
				aside.Available = false
				offerings[j] = &aside
			}
		}
		out[i] = &cloudprovider.InstanceType{Name: it.Name, Requirements: it.Requirements, Offerings: offerings,
			Capacity: it.Capacity, DynamicResources: it.DynamicResources, Overhead: it.Overhead}
	}
	if out == nil {
		return its
	}
	return out
}
