package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog/snapshot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
)

// Defaults of Options.
const (
	DefaultRefreshInterval = 5 * time.Minute
	DefaultRefreshJitter   = 0.2
	DefaultRefreshTimeout  = time.Minute
	DefaultOutOfStockTTL   = 3 * time.Minute
	DefaultQuotaTTL        = 30 * time.Minute
	// DefaultInstallFailedTTL hides an offering whose hardware failed an install (no disk matches, disk too small).
	DefaultInstallFailedTTL = time.Hour
)

// Options configure a Catalog. Every field is optional.
type Options struct {
	// Client is the Scaleway client live refreshes use. Without Client (and API) the catalogue serves the
	// embedded snapshot only and Refresh fails.
	Client *scw.Client
	// API replaces the baremetal API built from Client (tests, wrappers). *baremetal.API implements it.
	API snapshot.OfferLister
	// Zones to refresh; default every zone of the snapshot (snapshot.Zones).
	Zones []scw.Zone
	// Snapshot replaces the embedded snapshot (the bytes of a snapshot file).
	Snapshot []byte
	// Clock drives refresh timing and the unavailable cache's TTLs; default the real clock.
	Clock clock.WithTicker
	// RefreshInterval between refreshes in Start (default 5m), varied by ±RefreshJitter (a fraction, default
	// 0.2) so many controllers do not call the API in step. RefreshTimeout bounds one refresh (default 1m).
	RefreshInterval time.Duration
	RefreshJitter   float64
	RefreshTimeout  time.Duration
	// OutOfStockTTL (default 3m) and QuotaTTL (default 30m, also for refused orders) are how long
	// MarkUnavailable hides an offering.
	OutOfStockTTL time.Duration
	QuotaTTL      time.Duration
	// InstallFailedTTL (default 1h) is how long an offering whose hardware failed an install stays hidden.
	InstallFailedTTL time.Duration
	// Logger; default discards.
	Logger logr.Logger
	// Registerer for the karpenter_scaleway_em_catalog_* metrics; default a private registry.
	Registerer prometheus.Registerer
}

// UnavailableReason says why an offering was marked unavailable; it picks the TTL.
type UnavailableReason string

const (
	ReasonOutOfStock UnavailableReason = "out_of_stock"
	ReasonQuota      UnavailableReason = "quota"
	// ReasonRefused: the API refused the order for a reason of its own (an offer withdrawn from the zone, a
	// 503 with a message, a 4xx without a body): as lasting as a quota.
	ReasonRefused UnavailableReason = "refused"
	// ReasonInstallFailed: an install failed on this offering's hardware (no disk matches, disk too small):
	// hidden for InstallFailedTTL so that Karpenter picks another (package breaker).
	ReasonInstallFailed UnavailableReason = "install_failed"
)

type offerKey struct {
	zone    string
	name    string
	billing BillingPeriod
}

type unavailableEntry struct {
	reason UnavailableReason
	until  time.Time
}

// zoneState is one zone's offers; replaced whole on refresh, never modified.
type zoneState struct {
	origin string
	// refreshed: the data is this process's own listing of the zone (a
	// successful Refresh), not the snapshot it started from.
	refreshed   bool
	offers      map[BillingPeriod]map[string]*baremetal.Offer
	fingerprint [32]byte
}

type cacheEntry struct {
	gen uint64
	its []*cloudprovider.InstanceType
}

// maxCacheEntries bounds the per-filter cache: one entry per NodeClass/NodePool combination in use.
const maxCacheEntries = 128

// Catalog serves Elastic Metal offers as Karpenter instance types. It is safe for concurrent use.
type Catalog struct {
	opts    Options
	api     snapshot.OfferLister
	clock   clock.WithTicker
	log     logr.Logger
	metrics *metrics

	mu          sync.RWMutex
	gen         uint64 // bumped whenever anything instance types depend on changes
	zones       map[string]*zoneState
	specs       map[string]*spec
	names       []string
	unavailable map[offerKey]unavailableEntry
	nextExpiry  time.Time
	observed    map[string]corev1.ResourceList
	cache       map[string]*cacheEntry
	failing     map[string]string // zone -> its last refresh error, logged when it changes
}

// New builds a Catalog that answers from the snapshot until the first successful Refresh.
func New(opts Options) *Catalog {
	opts = opts.withDefaults()
	c := &Catalog{
		opts:        opts,
		api:         opts.API,
		clock:       opts.Clock,
		log:         opts.Logger.WithName("catalog"),
		metrics:     newMetrics(opts.Registerer),
		zones:       map[string]*zoneState{},
		unavailable: map[offerKey]unavailableEntry{},
		observed:    map[string]corev1.ResourceList{},
		cache:       map[string]*cacheEntry{},
		failing:     map[string]string{},
	}
	if c.api == nil && opts.Client != nil {
		c.api = baremetal.NewAPI(opts.Client)
	}
	snap, err := c.loadSnapshot()
	if err != nil {
		// The embedded snapshot is checked by tests, so this is a bad Options.Snapshot: say so, serve the
		// embedded one rather than nothing.
		c.log.Error(err, "offer snapshot unusable, using the embedded one")
		if snap, err = snapshot.Embedded(); err != nil {
			panic(fmt.Sprintf("embedded offer snapshot: %v", err))
		}
	}
	c.seed(snap)
	return c
}

// withDefaults fills the options left unset: a real clock, a discarding
// logger, a private registry, the snapshot's zones and the default
// durations.
func (opts Options) withDefaults() Options {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.Discard()
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	if len(opts.Zones) == 0 {
		opts.Zones = slices.Clone(snapshot.Zones)
	}
	return opts.withDefaultDurations()
}

// withDefaultDurations replaces unset or out-of-range refresh settings and
// TTLs by their defaults.
func (opts Options) withDefaultDurations() Options {
	if opts.RefreshInterval <= 0 {
		opts.RefreshInterval = DefaultRefreshInterval
	}
	if opts.RefreshJitter <= 0 || opts.RefreshJitter >= 1 {
		opts.RefreshJitter = DefaultRefreshJitter
	}
	if opts.RefreshTimeout <= 0 {
		opts.RefreshTimeout = DefaultRefreshTimeout
	}
	if opts.OutOfStockTTL <= 0 {
		opts.OutOfStockTTL = DefaultOutOfStockTTL
	}
	if opts.QuotaTTL <= 0 {
		opts.QuotaTTL = DefaultQuotaTTL
	}
	if opts.InstallFailedTTL <= 0 {
		opts.InstallFailedTTL = DefaultInstallFailedTTL
	}
	return opts
}

// seed loads the snapshot's offers as every zone's state and starts the
// unavailability series at zero.
func (c *Catalog) seed(snap *snapshot.Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for zone, zo := range snap.Zones {
		origin := snap.Metadata.Zones[zone].Origin
		c.zones[zone] = newZoneState(origin, zo.Hourly, zo.Monthly)
	}
	c.dataChangedLocked()
	// Series at zero from the start: a graph of hidden offerings and increase() over marks see the first one.
	c.updateUnavailableGaugeLocked()
	for _, r := range unavailableReasons {
		c.metrics.marks.WithLabelValues(string(r))
		c.metrics.expiries.WithLabelValues(string(r))
	}
}

func (c *Catalog) loadSnapshot() (*snapshot.Snapshot, error) {
	if c.opts.Snapshot != nil {
		return snapshot.Decode(c.opts.Snapshot)
	}
	return snapshot.Embedded()
}

func newZoneState(origin string, hourly, monthly []*baremetal.Offer) *zoneState {
	zs := &zoneState{origin: origin, offers: map[BillingPeriod]map[string]*baremetal.Offer{}}
	h := sha256.New()
	for _, p := range []struct {
		period BillingPeriod
		offers []*baremetal.Offer
	}{{BillingHourly, hourly}, {BillingMonthly, monthly}} {
		m := make(map[string]*baremetal.Offer, len(p.offers))
		for _, o := range p.offers {
			if o != nil && o.Name != "" {
				m[o.Name] = o
			}
		}
		zs.offers[p.period] = m
		for _, name := range slices.Sorted(maps.Keys(m)) {
			b, _ := json.Marshal(m[name])
			h.Write(b)
		}
	}
	copy(zs.fingerprint[:], h.Sum(nil))
	return zs
}

// dataChangedLocked recomputes what depends on the offers: specs, names, metrics, and the generation.
func (c *Catalog) dataChangedLocked() {
	specs := map[string]*spec{}
	// Canonical spec per name: hourly before monthly, zones in order, so a name means the same hardware
	// whatever zones a filter selects.
	for _, period := range BillingPeriods {
		for _, zone := range slices.Sorted(maps.Keys(c.zones)) {
			for name, o := range c.zones[zone].offers[period] {
				if _, ok := specs[name]; !ok {
					specs[name] = newSpec(o)
				}
			}
		}
	}
	c.specs = specs
	c.names = slices.Sorted(maps.Keys(specs))
	c.gen++
	c.metrics.offers.Reset()
	c.metrics.zoneOrigin.Reset()
	c.metrics.priceEstimate.Reset()
	for zone, zs := range c.zones {
		c.metrics.zoneOrigin.WithLabelValues(zone, zs.origin).Set(1)
		for period, offers := range zs.offers {
			for name, o := range offers {
				// As Karpenter compares it for a NodeClass with the default
				// monthlyCommitmentMonths (1).
				if price, ok := hourlyPrice(o, period, 1); ok {
					c.metrics.priceEstimate.WithLabelValues(name, karpv1.CapacityTypeOnDemand, zone, string(period)).Set(price)
				}
			}
			for _, stock := range baremetal.OfferStock("").Values() {
				c.metrics.offers.WithLabelValues(zone, string(period), string(stock)).Set(0)
			}
			for _, o := range offers {
				if o.Enable {
					c.metrics.offers.WithLabelValues(zone, string(period), string(o.Stock)).Inc()
				}
			}
		}
	}
}

// Start refreshes now and then every RefreshInterval (± jitter) until ctx is done. Failures are logged and
// counted; the previous data stays in use.
func (c *Catalog) Start(ctx context.Context) {
	if c.api == nil {
		c.log.Info("no Scaleway client: serving the offer snapshot only")
		<-ctx.Done()
		return
	}
	for {
		rctx, cancel := context.WithTimeout(ctx, c.opts.RefreshTimeout)
		_ = c.Refresh(rctx) // logged and counted inside
		cancel()
		t := c.clock.NewTimer(c.nextInterval())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

func (c *Catalog) nextInterval() time.Duration {
	j := c.opts.RefreshJitter * (2*rand.Float64() - 1)
	return time.Duration(float64(c.opts.RefreshInterval) * (1 + j))
}

// ErrNoAPI is returned by Refresh when the Catalog has neither Client nor API.
var ErrNoAPI = errors.New("catalog: no Scaleway client configured")

// Refresh lists every zone's offers (hourly and monthly, all pages). A zone that answers for both periods
// replaces its data; a zone that fails keeps what it had. The error joins every zone's failure.
func (c *Catalog) Refresh(ctx context.Context) error {
	if c.api == nil {
		return ErrNoAPI
	}
	start := c.clock.Now()
	results := c.listZones(ctx)
	errs, changed := c.apply(results)

	outcome := "success"
	if len(errs) > 0 {
		outcome = "error"
	}
	c.metrics.refreshSeconds.WithLabelValues(outcome).Observe(c.clock.Since(start).Seconds())
	if len(errs) == 0 {
		c.log.V(1).Info("offers refreshed", "zones", len(results), "changed", changed)
	}
	return errors.Join(errs...)
}

// zoneOffers is one zone's answer to a refresh: both periods' offers, or
// the error of the first list that failed.
type zoneOffers struct {
	zone            scw.Zone
	hourly, monthly []*baremetal.Offer
	err             error
}

// listZones lists every zone's offers for both periods, the zones at once.
func (c *Catalog) listZones(ctx context.Context) []zoneOffers {
	results := make([]zoneOffers, len(c.opts.Zones))
	var wg sync.WaitGroup
	for i, zone := range c.opts.Zones {
		wg.Go(func() {
			r := zoneOffers{zone: zone}
			r.hourly, r.err = c.list(ctx, zone, BillingHourly)
			if r.err == nil {
				r.monthly, r.err = c.list(ctx, zone, BillingMonthly)
			}
			results[i] = r
		})
	}
	wg.Wait()
	return results
}

// apply replaces the data of each zone that answered (when it differs) and
// keeps the others' data; it returns the failures and whether any zone
// changed.
func (c *Catalog) apply(results []zoneOffers) ([]error, bool) {
	var errs []error
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := false
	for _, r := range results {
		if r.err != nil {
			errs = append(errs, r.err)
			c.logFailure(string(r.zone), r.err)
			continue
		}
		if last, ok := c.failing[string(r.zone)]; ok {
			c.log.Info("offer refresh works again", "zone", r.zone, "lastError", last)
			delete(c.failing, string(r.zone))
		}
		c.metrics.lastSuccess.WithLabelValues(string(r.zone)).Set(float64(now.UnixNano()) / 1e9)
		zs := newZoneState(snapshot.OriginLive, r.hourly, r.monthly)
		zs.refreshed = true
		if old, ok := c.zones[string(r.zone)]; !ok || old.fingerprint != zs.fingerprint || old.origin != zs.origin || !old.refreshed {
			c.zones[string(r.zone)] = zs
			changed = true
		}
	}
	if changed {
		c.dataChangedLocked()
	}
	return errs, changed
}

// logFailure logs a zone's failed refresh as an error when the zone's error
// changed, and at debug level when it repeats: a zone that keeps failing the
// same way (one the account cannot use) is told once, not every refresh;
// refresh_total counts every one.
func (c *Catalog) logFailure(zone string, err error) {
	if c.failing[zone] == err.Error() {
		c.log.V(1).Info("offer refresh failed again, keeping previous data", "zone", zone, "error", err.Error())
		return
	}
	c.failing[zone] = err.Error()
	c.log.Error(err, "offer refresh failed, keeping previous data (logged again when the error changes)", "zone", zone)
}

func (c *Catalog) list(ctx context.Context, zone scw.Zone, period BillingPeriod) ([]*baremetal.Offer, error) {
	offers, err := snapshot.List(ctx, c.api, zone, baremetal.OfferSubscriptionPeriod(period))
	result := "success"
	if err != nil {
		result = "error"
	}
	c.metrics.refreshes.WithLabelValues(string(zone), string(period), result).Inc()
	return offers, err
}

// Offer returns the offer behind an offering (zone and name: an offer has the same ID in every zone that
// sells it, so the ID alone does not say which zone's offer it is): the controller orders with its ID. The
// offer is shared: do not modify it. Derived offers (see ZoneOrigin, snapshot.IsDerived) are never Available
// until a successful refresh of their zone.
func (c *Catalog) Offer(zone, offerName string, billing BillingPeriod) (*baremetal.Offer, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	zs, ok := c.zones[zone]
	if !ok {
		return nil, false
	}
	o, ok := zs.offers[billing][offerName]
	return o, ok
}

// ZoneOrigin says where a zone's current data comes from: "live", "recorded" or "derived" (see package
// snapshot); ok is false for a zone the catalogue does not know.
func (c *Catalog) ZoneOrigin(zone string) (origin string, ok bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	zs, ok := c.zones[zone]
	if !ok {
		return "", false
	}
	return zs.origin, true
}

// Refreshed reports whether zone's offers are this process's own listing of
// the zone (a successful Refresh), not the snapshot it started from: only
// then does an offer ID the zone does not list mean one Scaleway no longer
// sells (package billing derives what a server was bought as from it).
func (c *Catalog) Refreshed(zone string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	zs, ok := c.zones[zone]
	return ok && zs.refreshed
}

// ObserveCapacity records the capacity a registered node of offerName reports (node.status.capacity); later
// instance types of that offer use its cpu, memory, ephemeral-storage and nvidia.com/gpu instead of the
// estimates. localDisks is the node's local-disk policy (its localdisks.LabelPolicy label; "" for Unused):
// ephemeral-storage is measured per disk EPHEMERAL lives on, so a node with EPHEMERAL on its large data disk
// does not change the prediction for NodeClasses that keep it on the system disk. Zero or missing values are
// ignored.
func (c *Catalog) ObserveCapacity(offerName, localDisks string, capacity corev1.ResourceList) {
	if offerName == "" {
		return
	}
	policy, err := localdisks.Parse(localDisks)
	if err != nil {
		return // a label someone else wrote: no telling where EPHEMERAL is
	}
	kept, storage := corev1.ResourceList{}, corev1.ResourceList{}
	for _, k := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage, ResourceNvidiaGPU} {
		if q, ok := capacity[k]; ok && q.Sign() > 0 {
			if k == corev1.ResourceEphemeralStorage {
				storage[k] = q.DeepCopy()
			} else {
				kept[k] = q.DeepCopy()
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := false
	for key, rl := range map[string]corev1.ResourceList{offerName: kept, c.storageKeyLocked(offerName, policy): storage} {
		if len(rl) == 0 || sameResources(c.observed[key], rl) {
			continue
		}
		c.observed[key] = rl
		changed = true
	}
	if changed {
		c.gen++
		c.log.V(1).Info("measured capacity replaces the estimate", "offer", offerName, "localDisks", policy)
	}
}

// storageKeyLocked keys the measured ephemeral-storage of an offer by where EPHEMERAL lives under policy.
func (c *Catalog) storageKeyLocked(offerName string, policy localdisks.Policy) string {
	placement := "system"
	if sp := c.specs[offerName]; sp != nil {
		placement = sp.machine(policy).Layout.EphemeralPlacement()
	}
	return offerName + "#ephemeral-" + placement
}

// observedLocked is what nodes of offerName measured, for a NodeClass with policy.
func (c *Catalog) observedLocked(offerName string, policy localdisks.Policy) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, key := range []string{offerName, c.storageKeyLocked(offerName, policy)} {
		for k, q := range c.observed[key] {
			out[k] = q
		}
	}
	return out
}

func sameResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}
