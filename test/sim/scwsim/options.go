package scwsim

import (
	"cmp"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Delays are the durations of the simulated server phases, before Options.Scale.
type Delays struct {
	// Order: "ordered" before "delivering" (0: the create answer already says
	// delivering, as recorded for install: null).
	Order time.Duration
	// Delivery: "delivering" -> "ready" (Scaleway: 4-5 minutes).
	Delivery time.Duration
	// Install: install status to_install -> installing -> completed, only when
	// CreateServer carries an install (the provider sends install: null).
	Install time.Duration
	// RebootStop, RebootStart: a reboot is "stopping" for RebootStop, then
	// "starting" for RebootStart, then "ready" (Scaleway: 2-3 minutes in all).
	RebootStop  time.Duration
	RebootStart time.Duration
	// Stop: "stopping" -> "stopped".
	Stop time.Duration
	// Start: "starting" -> "ready".
	Start time.Duration
	// Delete: "deleting" -> gone (404).
	Delete time.Duration
	// OptionEnable: a server option "option_status_enabling" -> "option_status_enable".
	OptionEnable time.Duration
	// PrivateNetworkAttach, PrivateNetworkDetach: v3 attachment "attaching" ->
	// "attached" and "detaching" -> gone.
	PrivateNetworkAttach time.Duration
	PrivateNetworkDetach time.Duration
	// IPsAfterReady: how long a delivery that reached "ready" without IPs
	// (Options.ReadyIPs) waits for them. No recording shows it: a guess.
	IPsAfterReady time.Duration
	// Settle: after a delivery's "ready", how long the reverse DNS stays
	// unset (reverse_status "unknown", domain "") and ping_status
	// "ping_status_unknown", as recorded, before they turn active and up.
	Settle time.Duration
	// KexecBoot: from em-imager's kexec jump in rescue to the Talos it
	// loaded running (its kernel, initramfs and Talos's own start): a
	// Talos boot alone, without the firmware's POST, option ROMs and PXE
	// that RebootStop and RebootStart hold. The API sees nothing of it.
	KexecBoot time.Duration
}

// StockoutMode says how the simulator answers an order when the stock of the
// offer in that zone is empty.
type StockoutMode string

const (
	// StockoutError refuses the order with a typed out_of_stock error
	// (decoded by the SDK as *scw.OutOfStockError). The default.
	StockoutError StockoutMode = "error"
	// StockoutServer accepts the order and leaves the server in status
	// "out_of_stock" until stock is added (SetStock), then it is delivered.
	StockoutServer StockoutMode = "server"
)

// Options configure a simulator. The zero value is usable: every field has a
// safe default (see Defaults and the profiles in Profile).
type Options struct {
	// SecretKey is the value every request must carry in X-Auth-Token.
	// Empty: a fixed test key (DefaultSecretKey).
	SecretKey string
	// Addr is where Start listens (default 127.0.0.1:0).
	Addr string
	// Zones served (default fr-par-1, fr-par-2, nl-ams-1). fr-par-2 and
	// fr-par-1 serve their recorded offers; other zones a subset of fr-par-2's
	// (see zoneOffers). An offer has the same ID in every zone.
	Zones []string
	// OrganizationID and ProjectID: the account behind the key. ProjectID is
	// used when CreateServer/CreateSSHKey name none. Default: the zeroed IDs
	// of the recordings.
	OrganizationID string
	ProjectID      string
	// AllowedProjects, when set, are the only projects the key may act in;
	// others get a typed permissions_denied (403).
	AllowedProjects []string

	// Delays of the server phases, multiplied by Scale (0 means 1).
	Delays Delays
	Scale  float64
	// Jitter spreads each delay uniformly by +/- this fraction (0..1), as
	// real deliveries vary; Seed makes it repeatable (0: fixed seed 1).
	Jitter float64
	Seed   uint64

	// Stock: initial number of machines per zone and offer name, keyed
	// "zone/OFFER-NAME" (e.g. "fr-par-2/EM-B112X-SSD") or just "OFFER-NAME"
	// for every zone. Offers not named get their recorded stock field:
	// available -> PlentyStock, low -> LowStock, empty -> 0.
	Stock map[string]int
	// PlentyStock and LowStock seed offers recorded as available / low
	// (defaults 1000 and 10). LowStockThreshold: the offer's stock field
	// says "low" at or below it (default 10), "empty" at 0.
	PlentyStock       int
	LowStock          int
	LowStockThreshold int
	// Stockout: how an order is answered when stock is 0 (default StockoutError).
	Stockout StockoutMode

	// Quotas: maximum servers per project and offer name, keyed
	// "project-id/OFFER-NAME" or "OFFER-NAME" for every project. Unset: no limit.
	Quotas map[string]int

	// PrivateNetworkIDs, when set, are the only private networks that exist;
	// attaching another gives a typed not_found. Unset: any UUID exists.
	PrivateNetworkIDs []string

	// NICs per server (default 2): MACs are derived from the server ID.
	NICs int

	// DefaultPageSize (default 50) and MaxPageSize (default 100) of list calls.
	DefaultPageSize int
	MaxPageSize     int

	// ListLag, when positive, hides a new server from ListServers for this
	// long after its creation (scaled like Delays): listings are eventually
	// consistent, while GetServer by ID sees it at once.
	ListLag time.Duration

	// StaleLag, when positive, makes ListServers serve every server as it
	// was this long ago (scaled like Delays): a tag edit, a status change or
	// a deletion shows in listings only after it, a deleted server is still
	// listed (as it was) for that long, and a new server is hidden for that
	// long. Scaleway promises no consistency for its reads, so this is the
	// unkind side of what it may do (stale.go). Writes act on the server as
	// it is and answer with what they committed. Default 0: listings are
	// current (ListLag aside), as the tests written before it assume.
	StaleLag time.Duration
	// StaleReadsByID makes GetServer serve the same past versions as
	// StaleLag's listings (nothing promises a read by ID is current
	// either), except that a server ordered within the lag reads as its
	// first version rather than not found. Without StaleLag it does nothing.
	StaleReadsByID bool

	// RateLimit, when positive, is the sustained requests per second the
	// key may make (all paths together); beyond RateBurst, requests get 429
	// as a throttled Scaleway key does (shaped by RateLimited).
	RateLimit float64
	RateBurst int

	// Host plays the machines (rescue SSH, Talos API). Nil: no machines
	// (SetHost can bind one later).
	Host Host

	// Logf, when set, receives one line per state change and host call
	// (never the X-Auth-Token).
	Logf func(format string, args ...any)

	// Where the real API varies or is unrecorded (variants.go); the zero
	// values are the most realistic choices.

	// ReadyIPs: whether a delivery lists its IPs at "ready" (default
	// ReadyIPsRecorded: some reach "ready" with ips: []).
	ReadyIPs ReadyIPsMode
	// PrivateNetworkAttach: when attaching a private network is accepted
	// (default AttachWhileEnabling).
	PrivateNetworkAttach AttachMode
	// RateLimited: how throttled requests are answered (default
	// RateLimitedBare: 429 with no body and no Retry-After).
	RateLimited RateLimitedAnswer
	// Unrecorded: the shape of the answers no recording shows (default
	// UnrecordedTyped, the SDK's typed errors).
	Unrecorded UnrecordedShape
	// RescueUser: the user rescue boots show in rescue_server (default
	// RescueUserShared, "rescue").
	RescueUser RescueUserMode

	// Kexec says, per offer, whether the rescue kernel lets em-imager
	// kexec into the written image, keyed "OFFER-NAME" or "*" (every offer
	// not named). The value is the refusal (KexecDisabled, KexecLockdown,
	// KexecSecureBoot, KexecUnsupported, or an errno name such as EBUSY,
	// ENOSYS, EPERM, EKEYREJECTED or ENOEXEC that kexec_file_load fails
	// with); "" or KexecAccepted accepts. Offers not named accept: no
	// recording says what Scaleway's rescue kernels allow.
	Kexec map[string]string
}

// Options.Kexec values besides errno names.
const (
	KexecAccepted    = "accepted"
	KexecDisabled    = "disabled"    // kernel.kexec_load_disabled = 1
	KexecLockdown    = "lockdown"    // lockdown integrity
	KexecSecureBoot  = "secure-boot" // the firmware booted with SecureBoot on
	KexecUnsupported = "unsupported" // a rescue kernel without kexec
)

// KexecFor is the kexec refusal of the rescue hosts of offerName ("":
// accepted), as Options.Kexec says.
func (o Options) KexecFor(offerName string) string {
	v, ok := o.Kexec[offerName]
	if !ok {
		v = o.Kexec["*"]
	}
	if v == KexecAccepted {
		return ""
	}
	return v
}

var errnoNameRE = regexp.MustCompile(`^E[A-Z0-9]+$`)

func validKexec(v string) bool {
	switch v {
	case "", KexecAccepted, KexecDisabled, KexecLockdown, KexecSecureBoot, KexecUnsupported:
		return true
	}
	return errnoNameRE.MatchString(v)
}

// DefaultSecretKey is the key used when Options.SecretKey is empty.
const DefaultSecretKey = "11111111-1111-4111-8111-111111111111"

// zeroID is the organization/project ID of the recordings.
const zeroID = "00000000-0000-0000-0000-000000000000"

// Profile names accepted by Profile.
const (
	ProfileTest      = "test"      // tens of milliseconds per phase
	ProfileFast      = "fast"      // a few seconds per phase: an interactive demo
	ProfileRealistic = "realistic" // minutes, like Scaleway (delivery 4-5 min, reboot 2-3 min)
)

// Profiles lists the profile names, for flag help.
func Profiles() []string { return []string{ProfileTest, ProfileFast, ProfileRealistic} }

// Profile returns Options with the delays of a named profile and defaults
// everywhere else.
func Profile(name string) (Options, error) {
	var d Delays
	switch name {
	case ProfileTest:
		d = Delays{Order: 0, Delivery: 40 * time.Millisecond, Install: 30 * time.Millisecond,
			RebootStop: 15 * time.Millisecond, RebootStart: 15 * time.Millisecond,
			Stop: 20 * time.Millisecond, Start: 20 * time.Millisecond, Delete: 20 * time.Millisecond,
			OptionEnable: 10 * time.Millisecond, PrivateNetworkAttach: 15 * time.Millisecond,
			PrivateNetworkDetach: 10 * time.Millisecond, IPsAfterReady: 60 * time.Millisecond, Settle: 30 * time.Millisecond,
			KexecBoot: 10 * time.Millisecond}
	case ProfileFast:
		d = Delays{Order: 0, Delivery: 3 * time.Second, Install: 2 * time.Second,
			RebootStop: 1 * time.Second, RebootStart: 1500 * time.Millisecond,
			Stop: 1 * time.Second, Start: 1500 * time.Millisecond, Delete: 1 * time.Second,
			OptionEnable: 1 * time.Second, PrivateNetworkAttach: 1 * time.Second,
			PrivateNetworkDetach: 500 * time.Millisecond, IPsAfterReady: 3 * time.Second, Settle: 2 * time.Second,
			KexecBoot: 500 * time.Millisecond}
	case ProfileRealistic:
		d = Delays{Order: 10 * time.Second, Delivery: 4*time.Minute + 30*time.Second, Install: 8 * time.Minute,
			RebootStop: 45 * time.Second, RebootStart: 1*time.Minute + 45*time.Second,
			Stop: 45 * time.Second, Start: 1*time.Minute + 45*time.Second, Delete: 30 * time.Second,
			OptionEnable: 20 * time.Second, PrivateNetworkAttach: 30 * time.Second,
			PrivateNetworkDetach: 20 * time.Second, IPsAfterReady: 2 * time.Minute, Settle: 1 * time.Minute,
			KexecBoot: 20 * time.Second}
	default:
		return Options{}, fmt.Errorf("scwsim: unknown profile %q (want one of %s)", name, strings.Join(Profiles(), ", "))
	}
	o := Options{Delays: d}
	if name == ProfileRealistic {
		o.Jitter = 0.1
	}
	return o.withDefaults(), nil
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

var zoneRE = regexp.MustCompile(`^[a-z]{2}-[a-z]{3}-[0-9]$`)

// Validate reports the first invalid field, naming it and the reason.
func (o Options) Validate() error {
	// One check per group of fields, in the order the fields were always
	// checked, so the first error named stays the same.
	for _, check := range []func() error{
		o.validateZones, o.validateTiming, o.validateIDs,
		func() error { return validateOfferCounts("Stock", o.Stock, "zone", zoneRE) },
		func() error { return validateOfferCounts("Quotas", o.Quotas, "project", uuidRE) },
		o.validateStockout, o.validateCounts, o.validateLags, o.validateKexec, o.validatePageSizes,
		o.validateVariants,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (o Options) validateZones() error {
	for _, z := range o.Zones {
		if !zoneRE.MatchString(z) {
			return fmt.Errorf("scwsim: Options.Zones: %q is not a zone like fr-par-2", z)
		}
	}
	return nil
}

// validateTiming checks the fields that stretch the simulated time.
func (o Options) validateTiming() error {
	if o.Jitter < 0 || o.Jitter >= 1 {
		return fmt.Errorf("scwsim: Options.Jitter: %v is not in [0, 1)", o.Jitter)
	}
	if o.Scale < 0 {
		return fmt.Errorf("scwsim: Options.Scale: %v is negative", o.Scale)
	}
	for name, d := range o.Delays.byName() {
		if d < 0 {
			return fmt.Errorf("scwsim: Options.Delays.%s: %v is negative", name, d)
		}
	}
	return nil
}

// validateIDs checks that every organisation, project and private network
// id is a UUID, as Scaleway's are.
func (o Options) validateIDs() error {
	for _, id := range []struct{ field, v string }{{"OrganizationID", o.OrganizationID}, {"ProjectID", o.ProjectID}} {
		if id.v != "" && !uuidRE.MatchString(id.v) {
			return fmt.Errorf("scwsim: Options.%s: %q is not a UUID", id.field, id.v)
		}
	}
	for _, list := range []struct {
		field string
		ids   []string
	}{{"AllowedProjects", o.AllowedProjects}, {"PrivateNetworkIDs", o.PrivateNetworkIDs}} {
		for _, p := range list.ids {
			if !uuidRE.MatchString(p) {
				return fmt.Errorf("scwsim: Options.%s: %q is not a UUID", list.field, p)
			}
		}
	}
	return nil
}

// validateOfferCounts checks a map of counts keyed by an offer name, with
// an optional "<scope>/" prefix that re matches (Stock by zone, Quotas by
// project).
func validateOfferCounts(field string, counts map[string]int, scope string, re *regexp.Regexp) error {
	for k, n := range counts {
		if n < 0 {
			return fmt.Errorf("scwsim: Options.%s[%q]: %d is negative", field, k, n)
		}
		_, name, err := splitKey(k, scope, re)
		if err != nil {
			return fmt.Errorf("scwsim: Options.%s[%q]: %w", field, k, err)
		}
		if !knownOfferName(name) {
			return fmt.Errorf("scwsim: Options.%s[%q]: no offer named %q in the catalogue", field, k, name)
		}
	}
	return nil
}

func (o Options) validateStockout() error {
	switch o.Stockout {
	case "", StockoutError, StockoutServer:
		return nil
	}
	return fmt.Errorf("scwsim: Options.Stockout: %q is not %q or %q", o.Stockout, StockoutError, StockoutServer)
}

// validateCounts checks the plain counts: none may be negative.
func (o Options) validateCounts() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"PlentyStock", o.PlentyStock}, {"LowStock", o.LowStock}, {"LowStockThreshold", o.LowStockThreshold},
		{"NICs", o.NICs}, {"DefaultPageSize", o.DefaultPageSize}, {"MaxPageSize", o.MaxPageSize}} {
		if f.v < 0 {
			return fmt.Errorf("scwsim: Options.%s: %d is negative", f.name, f.v)
		}
	}
	return nil
}

// validateLags checks the listing lags and the rate limit.
func (o Options) validateLags() error {
	if o.ListLag < 0 {
		return fmt.Errorf("scwsim: Options.ListLag: %v is negative", o.ListLag)
	}
	if o.StaleLag < 0 {
		return fmt.Errorf("scwsim: Options.StaleLag: %v is negative", o.StaleLag)
	}
	if o.RateLimit < 0 || o.RateBurst < 0 {
		return fmt.Errorf("scwsim: Options.RateLimit/RateBurst: %v/%d is negative", o.RateLimit, o.RateBurst)
	}
	return nil
}

func (o Options) validateKexec() error {
	for k, v := range o.Kexec {
		if k != "*" && !knownOfferName(k) {
			return fmt.Errorf("scwsim: Options.Kexec[%q]: no offer named %q in the catalogue", k, k)
		}
		if !validKexec(v) {
			return fmt.Errorf("scwsim: Options.Kexec[%q]: %q is not %s, %s, %s, %s, %s or an errno name", k, v,
				KexecAccepted, KexecDisabled, KexecLockdown, KexecSecureBoot, KexecUnsupported)
		}
	}
	return nil
}

func (o Options) validatePageSizes() error {
	if o.DefaultPageSize > 0 && o.MaxPageSize > 0 && o.DefaultPageSize > o.MaxPageSize {
		return fmt.Errorf("scwsim: Options.DefaultPageSize: %d is above MaxPageSize %d", o.DefaultPageSize, o.MaxPageSize)
	}
	return nil
}

// splitKey splits "prefix/NAME" or "NAME"; prefix must match re.
func splitKey(k, what string, re *regexp.Regexp) (prefix, name string, err error) {
	i := strings.LastIndex(k, "/")
	if i < 0 {
		return "", k, nil
	}
	prefix, name = k[:i], k[i+1:]
	if !re.MatchString(prefix) {
		return "", "", fmt.Errorf("%q is not a %s", prefix, what)
	}
	return prefix, name, nil
}

func (d Delays) byName() map[string]time.Duration {
	return map[string]time.Duration{"Order": d.Order, "Delivery": d.Delivery, "Install": d.Install,
		"RebootStop": d.RebootStop, "RebootStart": d.RebootStart, "Stop": d.Stop, "Start": d.Start,
		"Delete": d.Delete, "OptionEnable": d.OptionEnable, "PrivateNetworkAttach": d.PrivateNetworkAttach,
		"PrivateNetworkDetach": d.PrivateNetworkDetach, "IPsAfterReady": d.IPsAfterReady, "Settle": d.Settle,
		"KexecBoot": d.KexecBoot}
}

func (o Options) withDefaults() Options {
	o.SecretKey = cmp.Or(o.SecretKey, DefaultSecretKey)
	o.Addr = cmp.Or(o.Addr, "127.0.0.1:0")
	if len(o.Zones) == 0 {
		o.Zones = []string{"fr-par-1", "fr-par-2", "nl-ams-1"}
	}
	o.Zones = append([]string(nil), o.Zones...)
	sort.Strings(o.Zones)
	o.OrganizationID = cmp.Or(o.OrganizationID, zeroID)
	o.ProjectID = cmp.Or(o.ProjectID, zeroID)
	o.Scale = cmp.Or(o.Scale, 1)
	o.Seed = cmp.Or(o.Seed, 1)
	o.PlentyStock = cmp.Or(o.PlentyStock, 1000)
	o.LowStock = cmp.Or(o.LowStock, 10)
	o.LowStockThreshold = cmp.Or(o.LowStockThreshold, 10)
	o.Stockout = cmp.Or(o.Stockout, StockoutError)
	o.NICs = cmp.Or(o.NICs, 2)
	o.DefaultPageSize = cmp.Or(o.DefaultPageSize, 50)
	o.MaxPageSize = cmp.Or(o.MaxPageSize, 100)
	if o.RateLimit > 0 && o.RateBurst == 0 {
		o.RateBurst = max(1, int(o.RateLimit))
	}
	if o.Host == nil {
		o.Host = noHost{}
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return o.variantDefaults()
}

// scaled applies Options.Scale to a delay.
func (o Options) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * o.Scale)
}
