package scaleway

import (
	"sort"
	"strings"
)

// Tag keys carried by every server the provider orders (DESIGN.md, "Tags on
// every server"). Scaleway tags are plain strings; we use "key=value".
const (
	TagManagedBy = "karpenter.sh/managed-by"
	// TagClusterID is the cluster's identity (package identity): two
	// clusters with one name never take each other's servers.
	TagClusterID = "karpenter-scaleway-em/cluster-id"
	// TagHandedOverBy marks a spare a deleted NodeClass (sparesOnDeletion:
	// Keep) handed over: no longer the cluster's, found by this tag.
	TagHandedOverBy = "karpenter-scaleway-em/handed-over-by"
	TagNodePool     = "karpenter.sh/nodepool"
	TagNodeClaim    = "karpenter.sh/nodeclaim"
	TagNodeClass    = "karpenter-scaleway-em/nodeclass"
	TagImage        = "karpenter-scaleway-em/image"
	TagPhase        = "karpenter-scaleway-em/phase"
	// TagWarmPool marks a spare of a NodeClass's warm pool (value "true");
	// TagWarmPoolSlot is its place in the pool, the idempotency tag of its
	// order (package warmpool). Both are removed when a NodeClaim takes it.
	TagWarmPool     = "karpenter-scaleway-em/warm-pool"
	TagWarmPoolSlot = "karpenter-scaleway-em/warm-pool-slot"
	// TagReservation names the reservation (package reservation) a
	// NodeClaim took its spare server from: its node is reserved capacity.
	TagReservation = "karpenter-scaleway-em/reservation"
	// TagBilling is what the server was bought as: "hourly" or "monthly"
	// (the order's subscription period), and TagPaidSince when its paid
	// period started (Unix seconds: the order). Both are written at order
	// and never change (package billing): the catalogue is no record of a
	// bought server, its offers are replaced, delisted or not yet loaded.
	TagBilling   = "karpenter-scaleway-em/billing"
	TagPaidSince = "karpenter-scaleway-em/paid-since"
)

// Tags is a parsed key=value tag set.
type Tags map[string]string

// Tag formats one "key=value" tag.
func Tag(key, value string) string { return key + "=" + value }

// FormatTags renders t as sorted "key=value" strings (stable, so equal sets
// compare equal and PATCH bodies do not churn).
func FormatTags(t Tags) []string {
	out := make([]string, 0, len(t))
	for k, v := range t {
		out = append(out, Tag(k, v))
	}
	sort.Strings(out)
	return out
}

// ParseTags reads "key=value" tags; the value is everything after the first
// "=". Tags without "=" (set by hand in the console) are returned as keys
// with an empty value; use SetTagIn to edit a list without disturbing them.
// When a key repeats, the first occurrence wins.
func ParseTags(tags []string) Tags {
	t := make(Tags, len(tags))
	for _, s := range tags {
		k, v, _ := strings.Cut(s, "=")
		if _, seen := t[k]; !seen {
			t[k] = v
		}
	}
	return t
}

// TagValue returns the value of key in a raw tag list.
func TagValue(tags []string, key string) (string, bool) {
	prefix := key + "="
	for _, s := range tags {
		if strings.HasPrefix(s, prefix) {
			return s[len(prefix):], true
		}
	}
	return "", false
}

// HasTags reports whether tags holds every one of want verbatim.
func HasTags(tags []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, s := range tags {
			if s == w {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// SetTagIn returns a copy of tags where every "key=..." entry is replaced by
// one "key=value" at the position of the first, and all other tags are kept
// in order. The bool reports whether the list changed.
func SetTagIn(tags []string, key, value string) ([]string, bool) {
	prefix := key + "="
	want := Tag(key, value)
	out := make([]string, 0, len(tags)+1)
	placed, changed := false, false
	for _, s := range tags {
		if !strings.HasPrefix(s, prefix) {
			out = append(out, s)
			continue
		}
		if placed {
			changed = true // drop duplicates
			continue
		}
		placed = true
		out = append(out, want)
		if s != want {
			changed = true
		}
	}
	if !placed {
		out = append(out, want)
		changed = true
	}
	return out, changed
}

// RemoveTagIn returns a copy of tags without any "key=..." entry.
func RemoveTagIn(tags []string, key string) ([]string, bool) {
	prefix := key + "="
	out := make([]string, 0, len(tags))
	for _, s := range tags {
		if !strings.HasPrefix(s, prefix) {
			out = append(out, s)
		}
	}
	return out, len(out) != len(tags)
}
