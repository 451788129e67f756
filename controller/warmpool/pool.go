// Package warmpool keeps a NodeClass's warm pool (spec.warmPool): N spare
// servers per offer, zone and billing period, ordered straight into phase
// spare and tagged scaleway.TagWarmPool, so that a NodeClaim takes a
// delivered server (spare.Keeper.Take) instead of waiting for a delivery.
// Every order goes through the gates of a NodeClaim's (NodeClass Ready, the
// install-failure breaker, spend limits, catalogue availability) and carries
// a slot tag as its idempotency tag, so that a lost answer or a restart
// never orders a slot twice. A taken server leaves the pool (Take removes
// its pool tags) and its slot is ordered again; surplus hourly servers are
// released, surplus monthly ones become ordinary spares (package spare).
package warmpool

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// Key is one kind of pool server.
type Key struct {
	Zone, Offer string
	Billing     catalog.BillingPeriod
}

func (k Key) String() string { return fmt.Sprintf("%s/%s/%s", k.Zone, k.Offer, k.Billing) }

// Offers is what validation needs of the catalogue (*catalog.Catalog).
type Offers interface {
	Offer(zone, offerName string, billing catalog.BillingPeriod) (*baremetal.Offer, bool)
}

// Entries is nc's pool by key (entries of one key added up) and, for every
// entry that cannot be served, why: a zone the NodeClass does not use, a
// billing period it does not allow, an offer the catalogue does not know
// there or whose CPU is not of the image's architecture (nil offers: not
// checked), more than WarmPoolMaxServers in all (the
// CRD refuses it; checked again for objects stored before the rule). A
// NodeClass being deleted wants no pool. defaultZone is the controller's
// (SCW_DEFAULT_ZONE); "" falls back to the zones the status resolved.
func Entries(nc *v1alpha1.ScalewayElasticMetalNodeClass, defaultZone string, offers Offers) (map[Key]int, []string) {
	if nc == nil || nc.DeletionTimestamp != nil || len(nc.Spec.WarmPool) == 0 {
		return nil, nil
	}
	sc := scopeOf(nc, defaultZone)
	want := map[Key]int{}
	var problems []string
	total := 0
	for i, e := range nc.Spec.WarmPool {
		k := sc.key(e)
		bad := sc.problem(k, offers)
		if bad == "" && total+int(e.Servers) > v1alpha1.WarmPoolMaxServers {
			bad = fmt.Sprintf("more than %d servers in all", v1alpha1.WarmPoolMaxServers)
		}
		if bad != "" {
			problems = append(problems, fmt.Sprintf("spec.warmPool[%d]: %s", i, bad))
			continue
		}
		total += int(e.Servers)
		want[k] += int(e.Servers)
	}
	return want, problems
}

// scope is what a NodeClass allows its pool: its zones, billing periods and
// image architecture, defaults applied.
type scope struct {
	zones, periods []string
	arch           string
}

// scopeOf reads nc's scope: zones from the spec, else defaultZone, else the
// zones the status resolved; hourly billing and amd64 by default.
func scopeOf(nc *v1alpha1.ScalewayElasticMetalNodeClass, defaultZone string) scope {
	sc := scope{zones: nc.Spec.Zones, periods: nc.Spec.Billing.Periods, arch: nc.Spec.Image.Architecture}
	if len(sc.zones) == 0 && defaultZone != "" {
		sc.zones = []string{defaultZone}
	}
	if len(sc.zones) == 0 {
		sc.zones = nc.Status.Zones
	}
	if len(sc.periods) == 0 {
		sc.periods = []string{string(catalog.BillingHourly)}
	}
	if sc.arch == "" {
		sc.arch = "amd64"
	}
	return sc
}

// key is entry e's key: no zone means the first zone, no period hourly.
func (sc scope) key(e v1alpha1.WarmPoolEntry) Key {
	k := Key{Zone: e.Zone, Offer: e.Offer, Billing: catalog.BillingPeriod(e.BillingPeriod)}
	if k.Zone == "" && len(sc.zones) > 0 {
		k.Zone = sc.zones[0]
	}
	if k.Billing == "" {
		k.Billing = catalog.BillingHourly
	}
	return k
}

// problem says why key k is outside the scope, or "" (offers nil: the offer
// is not checked).
func (sc scope) problem(k Key, offers Offers) string {
	switch {
	case k.Zone == "" || !contains(sc.zones, k.Zone):
		return fmt.Sprintf("zone %q is not one of the nodeclass's zones %v", k.Zone, sc.zones)
	case !contains(sc.periods, string(k.Billing)):
		return fmt.Sprintf("billing period %s is not allowed by spec.billing.periods %v", k.Billing, sc.periods)
	case offers != nil:
		return offerProblem(offers, k, sc.arch)
	}
	return ""
}

// offerProblem says why key k's offer cannot be in the pool, or "": the
// catalogue must sell it there, and its CPU must be of the image's
// architecture. A pool names its offer by hand, past the instance-type
// filter that keeps other architectures from NodeClaims: without the check,
// a RISC-V board (or an offer whose CPU the catalogue does not know) would be
// ordered, billed, and never installed.
func offerProblem(offers Offers, k Key, arch string) string {
	o, ok := offers.Offer(k.Zone, k.Offer, k.Billing)
	if !ok {
		return fmt.Sprintf("offer %s is not sold %s in %s", k.Offer, k.Billing, k.Zone)
	}
	if a := catalog.OfferArch(o); a != arch {
		return fmt.Sprintf("offer %s is %s (from its CPU), the image is %s: em-imager cannot install it", k.Offer, a, arch)
	}
	return ""
}

// SlotTag is the idempotency tag of the order for slot i of key in nc's
// pool: the same slot always gets the same tag, so an order whose answer
// was lost is found again instead of placed twice.
func SlotTag(nodeClass string, k Key, i int) string {
	return scaleway.Tag(scaleway.TagWarmPoolSlot, fmt.Sprintf("%s/%s/%s/%s/%d", nodeClass, k.Zone, k.Offer, k.Billing, i))
}

// slotIndex is the slot number of a pool server (-1 when unreadable).
func slotIndex(srv *baremetal.Server) int {
	v, _ := scaleway.TagValue(srv.Tags, scaleway.TagWarmPoolSlot)
	n, err := strconv.Atoi(v[strings.LastIndex(v, "/")+1:])
	if err != nil {
		return -1
	}
	return n
}

// InPool reports whether srv is a warm-pool server (a spare tagged TagWarmPool).
func InPool(srv *baremetal.Server) bool {
	v, _ := scaleway.TagValue(srv.Tags, scaleway.TagWarmPool)
	return v == "true" && install.PhaseOf(srv) == install.PhaseSpare
}

// Slot is an order to place.
type Slot struct {
	Key   Key
	Index int
}

// Plan is what keeps a pool at its size.
type Plan struct {
	// Keep are the pool's servers, by key, that count towards it.
	Keep map[Key][]*baremetal.Server
	// Order are the missing slots.
	Order []Slot
	// Release: hourly surplus and broken servers (deleted).
	Release []*baremetal.Server
	// Demote: monthly surplus (paid for the month): they leave the pool and
	// become ordinary spares under the spare policy.
	Demote []*baremetal.Server
}

// Decide sizes a pool: want by key, pool the NodeClass's pool servers
// (InPool) as listed, billing how a server is paid, inFlight the slot tags
// ordered but not listed yet (they count as there).
func Decide(want map[Key]int, pool []*baremetal.Server, billing func(*baremetal.Server) catalog.BillingPeriod, inFlight map[string]bool, nodeClass string) Plan {
	byKey, used, broken := groupPool(pool, billing)
	p := Plan{Keep: map[Key][]*baremetal.Server{}, Release: broken}
	for k, list := range byKey {
		sort.SliceStable(list, func(i, j int) bool { return slotIndex(list[i]) < slotIndex(list[j]) })
		n := min(want[k], len(list))
		p.Keep[k] = list[:n]
		for _, s := range list[n:] {
			if k.Billing == catalog.BillingMonthly {
				p.Demote = append(p.Demote, s)
			} else {
				p.Release = append(p.Release, s)
			}
		}
	}
	p.Order = missingSlots(want, p.Keep, used, inFlight, nodeClass)
	return p
}

// groupPool sorts the listed pool servers by key (servers being deleted are
// left out), with the slot indexes each key's servers use; servers in error
// or out of stock are returned apart (broken), to be released.
func groupPool(pool []*baremetal.Server, billing func(*baremetal.Server) catalog.BillingPeriod) (byKey map[Key][]*baremetal.Server, used map[Key]map[int]bool, broken []*baremetal.Server) {
	byKey = map[Key][]*baremetal.Server{}
	used = map[Key]map[int]bool{}
	for _, s := range pool {
		if s.Status == baremetal.ServerStatusDeleting {
			continue
		}
		k := Key{Zone: string(s.Zone), Offer: s.OfferName, Billing: billing(s)}
		if used[k] == nil {
			used[k] = map[int]bool{}
		}
		used[k][slotIndex(s)] = true // a slot tag still listed is never reused
		if s.Status == baremetal.ServerStatusError || s.Status == baremetal.ServerStatusOutOfStock {
			broken = append(broken, s)
			continue
		}
		byKey[k] = append(byKey[k], s)
	}
	return byKey, used, broken
}

// missingSlots are the slots to order, by key in a fixed order: for each key
// as many as want exceeds what is kept and in flight, at the lowest slot
// indexes no listed server uses.
func missingSlots(want map[Key]int, keep map[Key][]*baremetal.Server, used map[Key]map[int]bool, inFlight map[string]bool, nodeClass string) []Slot {
	keys := make([]Key, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	var order []Slot
	for _, k := range keys {
		missing := want[k] - len(keep[k])
		for i := 0; missing > 0; i++ {
			if used[k][i] {
				continue
			}
			if inFlight[SlotTag(nodeClass, k, i)] {
				missing-- // ordered, not listed yet
				continue
			}
			order = append(order, Slot{Key: k, Index: i})
			missing--
		}
	}
	return order
}

// Wants reports whether nc's pool holds servers of offer in zone paid by
// billing: a NodeClaim of that offering looks for one before ordering, and
// the garbage collector leaves such a pool server to the pool (defaultZone
// "": the zones nc's status resolved).
func Wants(nc *v1alpha1.ScalewayElasticMetalNodeClass, defaultZone, zone, offer string, billing catalog.BillingPeriod) bool {
	want, _ := Entries(nc, defaultZone, nil)
	return want[Key{Zone: zone, Offer: offer, Billing: billing}] > 0
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
