package scaleway

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/scaleway/scaleway-sdk-go/scw"
	"github.com/scaleway/scaleway-sdk-go/validation"
)

// Environment variables read by ConfigFromEnv. They are the SDK's standard
// names so an operator's existing Scaleway setup works unchanged.
const (
	EnvAccessKey      = "SCW_ACCESS_KEY"
	EnvSecretKey      = "SCW_SECRET_KEY" // #nosec G101 -- a variable name, not a secret
	EnvProjectID      = "SCW_DEFAULT_PROJECT_ID"
	EnvOrganizationID = "SCW_DEFAULT_ORGANIZATION_ID"
	EnvDefaultZone    = "SCW_DEFAULT_ZONE"
	EnvAPIURL         = "SCW_API_URL"
	// Tuning knobs, all optional (Go durations / numbers).
	EnvRateLimit      = "KARPENTER_SCALEWAY_EM_API_RATE_LIMIT"      // requests per second
	EnvRateBurst      = "KARPENTER_SCALEWAY_EM_API_RATE_BURST"      // burst
	EnvMaxAttempts    = "KARPENTER_SCALEWAY_EM_API_MAX_ATTEMPTS"    // attempts per call incl. the first
	EnvRequestTimeout = "KARPENTER_SCALEWAY_EM_API_REQUEST_TIMEOUT" // per attempt
	EnvPollInterval   = "KARPENTER_SCALEWAY_EM_API_POLL_INTERVAL"   // batched polling interval
	EnvOrderSettle    = "KARPENTER_SCALEWAY_EM_ORDER_SETTLE"        // how long a lost order is looked for before ordering again
	EnvThrottleWait   = "KARPENTER_SCALEWAY_EM_API_THROTTLE_WAIT"   // per call, waiting out 429s
	EnvSettleWait     = "KARPENTER_SCALEWAY_EM_API_SETTLE_WAIT"     // for IPs and options the API is still settling
)

// DefaultAPIURL is Scaleway's public API endpoint.
const DefaultAPIURL = "https://api.scaleway.com"

// RateLimit bounds the request rate of the whole process towards the API.
// Scaleway throttles per organization; staying under it avoids 429 storms.
type RateLimit struct {
	// PerSecond is the sustained rate. 0 means DefaultRateLimit.
	PerSecond float64
	// Burst is how many requests may go out at once. 0 means DefaultRateBurst.
	Burst int
}

// RetryPolicy bounds retries of transient failures (5xx, 429, network
// errors, per-attempt timeouts). Business errors (4xx) are never retried.
type RetryPolicy struct {
	// MaxAttempts counts the first attempt: 1 disables retries. 0 means default.
	MaxAttempts int
	// BaseBackoff is the cap of the first backoff; it doubles per attempt
	// up to MaxBackoff. The actual wait is uniformly random in [0, cap)
	// ("full jitter") so that many controllers do not retry in lockstep.
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
	// MaxRetryAfter caps how long a server-sent Retry-After is honoured.
	MaxRetryAfter time.Duration
	// ThrottleWait bounds the time one call spends waiting out 429s, which
	// do not count against MaxAttempts (a 429 proves the request was not
	// applied). 0 means DefaultThrottleWait.
	ThrottleWait time.Duration
}

// Config configures a Client. Build it with ConfigFromEnv or by hand.
//
// Config's String/GoString never print SecretKey, so a Config may be logged.
type Config struct {
	AccessKey      string
	SecretKey      string
	ProjectID      string
	OrganizationID string
	// APIURL overrides the API endpoint (the simulator sets this).
	APIURL      string
	DefaultZone scw.Zone

	RateLimit RateLimit
	Retry     RetryPolicy
	// RequestTimeout bounds one HTTP attempt (all pages of a list count as one).
	RequestTimeout time.Duration
	// PollInterval is how often the Poller lists servers of a zone.
	PollInterval time.Duration
	// PageSize is the page size of list calls (0: 100).
	PageSize uint32
	// OrderSettle is how long after an order whose answer was lost (any
	// failure after sending but a 4xx refusal: a timeout, a 5xx, a reset, an
	// undecodable answer) CreateServer only looks for its server, never ordering
	// again: listings are eventually consistent and a late-committing POST
	// shows up only after a while.
	OrderSettle time.Duration
	// SettleWait bounds how long the provider waits for the API to finish
	// what it already reported done: the IPs of a server that is ready
	// without them, a Private Network option that is still enabling.
	SettleWait time.Duration
	// ReadLag bounds how far the API's reads (by ID as well as listings)
	// may trail its writes. Scaleway promises no consistency for reads, and
	// the API has no compare-and-set for tags, so a process that rewrites a
	// server's tags must first be sure its reads show every write of the
	// process that ran before it (a leader killed in a rollout): the first
	// read a write is based on (FreshServer) waits until ReadLag has passed
	// since it was first asked for; later ones do not wait. 0 (the default)
	// takes a read by ID as current, which the simulator models as the kind
	// side (scwsim.Options.StaleReadsByID off).
	ReadLag time.Duration
}

// Defaults applied by New for zero fields.
const (
	DefaultRateLimit      = 10.0
	DefaultRateBurst      = 20
	DefaultMaxAttempts    = 5
	DefaultBaseBackoff    = 500 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
	DefaultMaxRetryAfter  = 2 * time.Minute
	DefaultRequestTimeout = 30 * time.Second
	DefaultPollInterval   = 15 * time.Second
	DefaultOrderSettle    = 5 * time.Minute
	DefaultThrottleWait   = 2 * time.Minute
	DefaultSettleWait     = 10 * time.Minute
	DefaultZone           = scw.ZoneFrPar2
)

// WithDefaults returns c with every zero tuning field set to its default.
func (c Config) WithDefaults() Config {
	defaultTo(&c.APIURL, DefaultAPIURL)
	defaultTo(&c.DefaultZone, DefaultZone)
	defaultTo(&c.RateLimit.PerSecond, DefaultRateLimit)
	defaultTo(&c.RateLimit.Burst, DefaultRateBurst)
	defaultTo(&c.Retry.MaxAttempts, DefaultMaxAttempts)
	defaultTo(&c.Retry.BaseBackoff, DefaultBaseBackoff)
	defaultTo(&c.Retry.MaxBackoff, DefaultMaxBackoff)
	defaultTo(&c.Retry.MaxRetryAfter, DefaultMaxRetryAfter)
	defaultTo(&c.RequestTimeout, DefaultRequestTimeout)
	defaultTo(&c.PollInterval, DefaultPollInterval)
	defaultTo(&c.OrderSettle, DefaultOrderSettle)
	defaultTo(&c.Retry.ThrottleWait, DefaultThrottleWait)
	defaultTo(&c.SettleWait, DefaultSettleWait)
	return c
}

// defaultTo sets *v to d when *v is its zero value: one line per field
// keeps WithDefaults a plain list.
func defaultTo[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// Validate checks every field and names the first bad one. Errors never
// contain the secret key (the SDK's own validation would print it).
func (c Config) Validate() error {
	var errs []error
	errs = append(errs, c.credentialErrors()...)
	errs = append(errs, c.placeErrors()...)
	if err := c.apiURLError(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.tuningErrors()...)
	errs = append(errs, c.timingErrors()...)
	return errors.Join(errs...)
}

// credentialErrors checks the API key pair: both are required, and their
// shape is checked so that a pasted value of the wrong kind fails here, not
// as a 401 at the first call.
func (c Config) credentialErrors() []error {
	var errs []error
	if c.AccessKey == "" {
		errs = append(errs, fmt.Errorf("%s (AccessKey) is required", EnvAccessKey))
	} else if !validation.IsAccessKey(c.AccessKey) {
		errs = append(errs, fmt.Errorf("%s (AccessKey) must look like SCWXXXXXXXXXXXXXXXXX (SCW + 17 upper-case letters or digits)", EnvAccessKey))
	}
	if c.SecretKey == "" {
		errs = append(errs, fmt.Errorf("%s (SecretKey) is required", EnvSecretKey))
	} else if !uuidRE.MatchString(c.SecretKey) {
		errs = append(errs, fmt.Errorf("%s (SecretKey) must be a UUID (value not shown)", EnvSecretKey))
	}
	return errs
}

// placeErrors checks where servers and keys go: the project (required), the
// organization and the default zone.
func (c Config) placeErrors() []error {
	var errs []error
	if c.ProjectID == "" {
		errs = append(errs, fmt.Errorf("%s (ProjectID) is required: servers and SSH keys are created in it", EnvProjectID))
	} else if !uuidRE.MatchString(c.ProjectID) {
		errs = append(errs, fmt.Errorf("%s (ProjectID) %q is not a UUID", EnvProjectID, c.ProjectID))
	}
	if c.OrganizationID != "" && !uuidRE.MatchString(c.OrganizationID) {
		errs = append(errs, fmt.Errorf("%s (OrganizationID) %q is not a UUID", EnvOrganizationID, c.OrganizationID))
	}
	if c.DefaultZone != "" && !validation.IsZone(string(c.DefaultZone)) {
		errs = append(errs, fmt.Errorf("%s (DefaultZone) %q is not a zone like fr-par-2", EnvDefaultZone, c.DefaultZone))
	}
	return errs
}

// apiURLError checks an API URL override. It never prints credentials that
// were put in the URL by mistake.
func (c Config) apiURLError() error {
	if c.APIURL == "" {
		return nil
	}
	u, err := url.Parse(c.APIURL)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https"):
		return fmt.Errorf("%s (APIURL) %q must be an http(s) URL", EnvAPIURL, redactURL(c.APIURL))
	case u.User != nil:
		return fmt.Errorf("%s (APIURL) must not carry credentials", EnvAPIURL)
	case strings.HasSuffix(c.APIURL, "/"):
		return fmt.Errorf("%s (APIURL) %q must not end with a slash", EnvAPIURL, c.APIURL)
	}
	return nil
}

// tuningErrors checks the rate limit and the retry policy: nothing may be
// negative (zero takes the default), and the first backoff may not be longer
// than the cap.
func (c Config) tuningErrors() []error {
	var errs []error
	if c.RateLimit.PerSecond < 0 {
		errs = append(errs, errors.New("RateLimit.PerSecond must not be negative"))
	}
	if c.RateLimit.Burst < 0 {
		errs = append(errs, errors.New("RateLimit.Burst must not be negative"))
	}
	if c.Retry.MaxAttempts < 0 {
		errs = append(errs, errors.New("Retry.MaxAttempts must not be negative"))
	}
	if c.Retry.BaseBackoff < 0 || c.Retry.MaxBackoff < 0 || c.Retry.MaxRetryAfter < 0 || c.Retry.ThrottleWait < 0 {
		errs = append(errs, errors.New("retry backoffs must not be negative"))
	}
	if c.Retry.BaseBackoff > 0 && c.Retry.MaxBackoff > 0 && c.Retry.BaseBackoff > c.Retry.MaxBackoff {
		errs = append(errs, errors.New("Retry.BaseBackoff must not exceed Retry.MaxBackoff"))
	}
	return errs
}

// timingErrors checks the timeouts and waits: none may be negative (zero
// takes the default).
func (c Config) timingErrors() []error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"RequestTimeout", c.RequestTimeout},
		{"PollInterval", c.PollInterval},
		{"OrderSettle", c.OrderSettle},
		{"SettleWait", c.SettleWait},
		{"ReadLag", c.ReadLag},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", d.name))
		}
	}
	return errs
}

// redactURL hides userinfo in a URL that failed to parse cleanly.
func redactURL(s string) string {
	if i := strings.Index(s, "@"); i >= 0 {
		if j := strings.Index(s, "://"); j >= 0 && j < i {
			return s[:j+3] + "***" + s[i:]
		}
		return "***" + s[i:]
	}
	return s
}

// String prints the configuration without the secret key.
func (c Config) String() string {
	secret := "<unset>"
	if c.SecretKey != "" {
		secret = "<redacted>"
	}
	return fmt.Sprintf("scaleway.Config{AccessKey:%q SecretKey:%s ProjectID:%q OrganizationID:%q APIURL:%q DefaultZone:%q RateLimit:%+v Retry:%+v RequestTimeout:%s PollInterval:%s SettleWait:%s OrderSettle:%s}",
		c.AccessKey, secret, c.ProjectID, c.OrganizationID, c.APIURL, c.DefaultZone, c.RateLimit, c.Retry, c.RequestTimeout, c.PollInterval, c.SettleWait, c.OrderSettle)
}

// GoString keeps %#v from printing the secret key.
func (c Config) GoString() string { return c.String() }

// ConfigFromEnv reads the standard SCW_* variables (and the optional
// KARPENTER_SCALEWAY_EM_API_* tuning knobs) through getenv (os.Getenv),
// applies defaults and validates. Credentials come only from the environment
// (a Kubernetes Secret mounted as env), never from flags; tests pass their own
// getenv so that worlds in one process keep their credentials apart.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := Config{
		AccessKey:      strings.TrimSpace(getenv(EnvAccessKey)),
		SecretKey:      strings.TrimSpace(getenv(EnvSecretKey)),
		ProjectID:      strings.TrimSpace(getenv(EnvProjectID)),
		OrganizationID: strings.TrimSpace(getenv(EnvOrganizationID)),
		APIURL:         strings.TrimSpace(getenv(EnvAPIURL)),
		DefaultZone:    scw.Zone(strings.TrimSpace(getenv(EnvDefaultZone))),
	}
	if err := c.tuningFromEnv(getenv); err != nil {
		return Config{}, err
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// tuningFromEnv reads the optional tuning knobs. Each must be positive when
// set: zero is how a Config says "the default", so a variable set to zero
// would be a silent no-op.
func (c *Config) tuningFromEnv(getenv func(string) string) error {
	errs := []error{
		positiveFromEnv(getenv, EnvRateLimit, &c.RateLimit.PerSecond, func(v string) (float64, error) { return strconv.ParseFloat(v, 64) },
			"a positive number of requests per second"),
		positiveFromEnv(getenv, EnvRateBurst, &c.RateLimit.Burst, strconv.Atoi, "a positive integer"),
		positiveFromEnv(getenv, EnvMaxAttempts, &c.Retry.MaxAttempts, strconv.Atoi, "a positive integer"),
	}
	for _, d := range []struct {
		env string
		dst *time.Duration
	}{{EnvRequestTimeout, &c.RequestTimeout}, {EnvPollInterval, &c.PollInterval}, {EnvThrottleWait, &c.Retry.ThrottleWait},
		{EnvSettleWait, &c.SettleWait}, {EnvOrderSettle, &c.OrderSettle}} {
		errs = append(errs, positiveFromEnv(getenv, d.env, d.dst, time.ParseDuration, "a positive duration like 30s"))
	}
	return errors.Join(errs...)
}

// positiveFromEnv parses the variable env, when set, into dst with parse,
// and says what it must be when the value does not parse or is not positive.
func positiveFromEnv[T int | float64 | time.Duration](getenv func(string) string, env string, dst *T, parse func(string) (T, error), want string) error {
	v := getenv(env)
	if v == "" {
		return nil
	}
	x, err := parse(v)
	*dst = x
	if err != nil || x <= 0 {
		return fmt.Errorf("%s=%q must be %s", env, v, want)
	}
	return nil
}
