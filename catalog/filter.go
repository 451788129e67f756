package catalog

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
)

// BillingPeriod is how a server is paid for: by the hour, or by the month with a one-month fee.
type BillingPeriod string

const (
	BillingHourly  BillingPeriod = "hourly"
	BillingMonthly BillingPeriod = "monthly"
)

// BillingPeriods in their canonical order.
var BillingPeriods = []BillingPeriod{BillingHourly, BillingMonthly}

// Valid reports whether p is hourly or monthly.
func (p BillingPeriod) Valid() bool { return p == BillingHourly || p == BillingMonthly }

// HoursPerMonth is Scaleway's billing month (365 days * 24 h / 12).
const HoursPerMonth = 730

// DefaultMaxPods is the kubelet default a Talos node runs with.
const DefaultMaxPods = 110

// Filter selects and prices instance types for one NodeClass (and NodePool). The zero value means: every
// zone of the catalogue, hourly billing only, a one-month commitment, default kubelet overhead.
type Filter struct {
	// Zones the NodeClass allows; empty means every zone the catalogue knows.
	Zones []string
	// BillingPeriods allowed; empty means hourly only, so monthly servers (which carry a fee of one month) are
	// never ordered unless the NodeClass opts in. See BillingPeriodsFor to narrow by NodePool requirements.
	BillingPeriods []BillingPeriod
	// CommitmentMonths is how many months a monthly server is expected to live: its one-month fee is spread
	// over them in the hourly price Karpenter compares. 0 means 1.
	CommitmentMonths int
	// Kubelet settings of the NodeClass, as rendered into the node's machine config.
	Kubelet KubeletSettings
	// LocalDisks is the NodeClass's local-disk policy: where EPHEMERAL lives
	// (so ephemeral-storage) and the local-disk labels. "" is Unused.
	LocalDisks localdisks.Policy
	// Requirements, when set (a NodePool's), drop instance types whose requirements do not intersect them,
	// so Karpenter never sees offers the NodePool cannot use.
	Requirements scheduling.Requirements
}

// KubeletSettings are the kubelet knobs that change allocatable resources. Keys of the maps are resource names
// (cpu, memory, ephemeral-storage, pid) for the reserved ones and signals (memory.available,
// nodefs.available) for EvictionHard, exactly as in a KubeletConfiguration.
type KubeletSettings struct {
	KubeReserved   map[string]string
	SystemReserved map[string]string
	EvictionHard   map[string]string
	MaxPods        *int32
}

// MaxCommitmentMonths bounds Filter.CommitmentMonths: spreading a fee over more than three years hides it.
const MaxCommitmentMonths = 36

// normalized is a validated Filter with defaults applied, plus a key for the cache.
type normalized struct {
	zones      []string // sorted, unique; nil = all
	billing    []BillingPeriod
	commitment int
	maxPods    int64
	kubeRes    corev1.ResourceList
	sysRes     corev1.ResourceList
	evictHard  map[string]string
	reqs       scheduling.Requirements
	localDisks localdisks.Policy
	key        string
}

func (f Filter) normalize() (*normalized, error) {
	n := &normalized{maxPods: DefaultMaxPods}
	var err error
	if n.zones, err = normalizeZones(f.Zones); err != nil {
		return nil, err
	}
	if n.billing, err = normalizeBilling(f.BillingPeriods); err != nil {
		return nil, err
	}
	if n.commitment, err = normalizeCommitment(f.CommitmentMonths); err != nil {
		return nil, err
	}
	if err := n.readKubelet(f.Kubelet); err != nil {
		return nil, err
	}
	if len(f.Requirements) > 0 {
		n.reqs = f.Requirements
	}
	if n.localDisks, err = localdisks.Parse(string(f.LocalDisks)); err != nil {
		return nil, fmt.Errorf("filter: field localDisks: %w", err)
	}
	n.key = n.cacheKey()
	return n, nil
}

// normalizeZones checks the zone names and returns them sorted, each once.
func normalizeZones(zones []string) ([]string, error) {
	var out []string
	for _, z := range zones {
		if !zonePattern.MatchString(z) {
			return nil, fmt.Errorf("filter: field zones: %q is not a zone name (like fr-par-2)", z)
		}
		out = append(out, z)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// normalizeBilling checks the billing periods and returns them sorted, each
// once; none means hourly only.
func normalizeBilling(periods []BillingPeriod) ([]BillingPeriod, error) {
	var out []BillingPeriod
	for _, b := range periods {
		if !b.Valid() {
			return nil, fmt.Errorf("filter: field billingPeriods: %q is not hourly or monthly", b)
		}
		if !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		out = []BillingPeriod{BillingHourly}
	}
	slices.Sort(out)
	return out, nil
}

// normalizeCommitment checks the commitment in months; 0 means one.
func normalizeCommitment(months int) (int, error) {
	switch {
	case months == 0:
		return 1, nil
	case months < 0 || months > MaxCommitmentMonths:
		return 0, fmt.Errorf("filter: field commitmentMonths: %d is outside 1..%d", months, MaxCommitmentMonths)
	}
	return months, nil
}

// readKubelet checks and reads the kubelet settings that size a node:
// maxPods, the reservations and the hard eviction thresholds.
func (n *normalized) readKubelet(k KubeletSettings) error {
	if k.MaxPods != nil {
		if *k.MaxPods <= 0 {
			return fmt.Errorf("filter: field kubelet.maxPods: %d must be positive", *k.MaxPods)
		}
		n.maxPods = int64(*k.MaxPods)
	}
	var err error
	if n.kubeRes, err = parseReserved("kubelet.kubeReserved", k.KubeReserved); err != nil {
		return err
	}
	if n.sysRes, err = parseReserved("kubelet.systemReserved", k.SystemReserved); err != nil {
		return err
	}
	for signal, v := range k.EvictionHard {
		if _, _, err := parseThreshold(v); err != nil {
			return fmt.Errorf("filter: field kubelet.evictionHard[%s]: %w", signal, err)
		}
	}
	n.evictHard = k.EvictionHard
	return nil
}

func parseReserved(field string, m map[string]string) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for k, v := range m {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("filter: field %s[%s]: %q is not a quantity: %w", field, k, v, err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("filter: field %s[%s]: %q is negative", field, k, v)
		}
		out[corev1.ResourceName(k)] = q
	}
	return out, nil
}

// parseThreshold reads an eviction threshold: a percentage ("10%") or a quantity ("100Mi").
func parseThreshold(v string) (pct float64, q resource.Quantity, err error) {
	if s, ok := strings.CutSuffix(v, "%"); ok {
		pct, err = strconv.ParseFloat(s, 64)
		if err != nil || pct < 0 || pct > 100 {
			return 0, q, fmt.Errorf("%q is not a percentage between 0%% and 100%%", v)
		}
		return pct, q, nil
	}
	q, err = resource.ParseQuantity(v)
	if err != nil {
		return 0, q, fmt.Errorf("%q is neither a percentage nor a quantity", v)
	}
	if q.Sign() < 0 {
		return 0, q, fmt.Errorf("%q is negative", v)
	}
	return -1, q, nil
}

func (n *normalized) cacheKey() string {
	var b strings.Builder
	fmt.Fprintf(&b, "z=%s;b=%v;c=%d;p=%d;ld=%s", strings.Join(n.zones, ","), n.billing, n.commitment, n.maxPods, n.localDisks)
	for _, part := range []struct {
		name string
		m    map[string]string
	}{{"kr", resourceStrings(n.kubeRes)}, {"sr", resourceStrings(n.sysRes)}, {"eh", n.evictHard}} {
		b.WriteString(";" + part.name + "=")
		keys := make([]string, 0, len(part.m))
		for k := range part.m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b.WriteString(k + ":" + part.m[k] + ",")
		}
	}
	// Requirement.String abbreviates long value lists, so the full sorted values go in as well.
	for _, k := range slices.Sorted(maps.Keys(n.reqs)) {
		r := n.reqs.Get(k)
		fmt.Fprintf(&b, ";r=%s|%v", r.String(), r.Values())
	}
	return b.String()
}

func resourceStrings(rl corev1.ResourceList) map[string]string {
	m := make(map[string]string, len(rl))
	for k, v := range rl {
		m[string(k)] = v.String()
	}
	return m
}

// BillingPeriodsFor narrows what the NodeClass allows by what the NodePool (or NodeClaim) requires, and
// makes hourly the default: when the requirements say nothing about LabelBillingPeriod, the result is hourly
// alone if the NodeClass allows it, so a NodePool only gets monthly servers by asking for them. ok is false
// when nothing fits (the NodeClass forbids what the NodePool requires): the caller then offers no instance
// types (passing the empty list on as Filter.BillingPeriods would mean the hourly default).
func BillingPeriodsFor(nodeClassAllowed []BillingPeriod, reqs scheduling.Requirements) (periods []BillingPeriod, ok bool) {
	allowed := nodeClassAllowed
	if len(allowed) == 0 {
		allowed = []BillingPeriod{BillingHourly}
	}
	if reqs == nil || !reqs.Has(LabelBillingPeriod) {
		if slices.Contains(allowed, BillingHourly) {
			return []BillingPeriod{BillingHourly}, true
		}
		return slices.Clone(allowed), true
	}
	r := reqs.Get(LabelBillingPeriod)
	var out []BillingPeriod
	for _, p := range BillingPeriods {
		if slices.Contains(allowed, p) && r.Has(string(p)) {
			out = append(out, p)
		}
	}
	return out, len(out) > 0
}
