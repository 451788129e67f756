package scaleway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	baremetalv3 "github.com/scaleway/scaleway-sdk-go/api/baremetal/v3"
	iam "github.com/scaleway/scaleway-sdk-go/api/iam/v1alpha1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"golang.org/x/time/rate"
)

// Clock is the time source used for backoff waits and poll intervals.
// k8s.io/utils/clock.Clock satisfies it.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Option customises New.
type Option func(*options)

type options struct {
	log       logr.Logger
	reg       prometheus.Registerer
	clock     Clock
	transport http.RoundTripper
}

// WithLogger sets the logger. Every API call is logged at V(1); retries and
// ambiguous failures at V(0).
func WithLogger(l logr.Logger) Option { return func(o *options) { o.log = l } }

// WithRegisterer registers the metrics with reg (controller-runtime's
// metrics.Registry in the controller). Without it a private registry is used.
func WithRegisterer(reg prometheus.Registerer) Option { return func(o *options) { o.reg = reg } }

// WithClock replaces the wall clock (tests).
func WithClock(c Clock) Option { return func(o *options) { o.clock = c } }

// WithTransport sets the base HTTP transport under the client's rate limiter
// (tests inject faults with it). Default: a clone of http.DefaultTransport.
func WithTransport(rt http.RoundTripper) Option { return func(o *options) { o.transport = rt } }

// Client is the Scaleway API layer: every call is rate-limited, retried when
// safe, classified, logged and counted. It is safe for concurrent use.
type Client struct {
	cfg     Config
	sdk     *scw.Client
	bm      *baremetal.API
	pn      *baremetalv3.PrivateNetworkAPI
	iam     *iam.API
	limiter *rate.Limiter
	log     logr.Logger
	metrics *metrics
	clock   Clock

	randMu sync.Mutex
	rand   *rand.Rand

	tagLocks keyedMutex
	seen     seenServers
	// readFloor: when reads become trustworthy as the base of a write
	// (Config.ReadLag after the first FreshServer); set once.
	readFloorOnce sync.Once
	readFloor     time.Time
	createLocks   keyedMutex
	orders        pendingOrders
	iamMu         sync.Mutex
}

// New builds a Client from cfg (zero tuning fields take their defaults).
func New(cfg Config, opts ...Option) (*Client, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("scaleway client configuration: %w", err)
	}
	o := options{log: logr.Discard(), clock: realClock{}}
	for _, opt := range opts {
		opt(&o)
	}
	if o.reg == nil {
		o.reg = prometheus.NewRegistry()
	}
	if o.transport == nil {
		o.transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	m, err := newMetrics(o.reg)
	if err != nil {
		return nil, fmt.Errorf("scaleway client metrics: %w", err)
	}
	c := &Client{
		cfg:     cfg,
		limiter: rate.NewLimiter(rate.Limit(cfg.RateLimit.PerSecond), cfg.RateLimit.Burst),
		log:     o.log.WithName("scaleway"),
		metrics: m,
		clock:   o.clock,
		rand:    rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x5ca1e)),
		seen:    seenServers{maxAge: seenMaxAge(cfg)},
	}
	// Each attempt carries its own context deadline (Config.RequestTimeout,
	// covering the rate-limit wait and every page). The client timeout is a
	// backstop for the few requests the SDK makes without a context (the
	// IAM API's metadata lookup), so nothing can hang forever; it is longer
	// than the attempt deadline so that the deadline always fires first.
	httpClient := &http.Client{Transport: &transport{base: o.transport, limiter: c.limiter}, Timeout: 2 * cfg.RequestTimeout}
	sdkOpts := []scw.ClientOption{
		scw.WithHTTPClient(httpClient),
		scw.WithAPIURL(cfg.APIURL),
		scw.WithAuth(cfg.AccessKey, cfg.SecretKey),
		scw.WithDefaultProjectID(cfg.ProjectID),
		scw.WithDefaultZone(cfg.DefaultZone),
		scw.WithUserAgent("karpenter-scaleway-em"),
	}
	if cfg.OrganizationID != "" {
		sdkOpts = append(sdkOpts, scw.WithDefaultOrganizationID(cfg.OrganizationID))
	}
	sdk, err := scw.NewClient(sdkOpts...)
	if err != nil {
		// Validate ran first, so this is unexpected; never echo the SDK's
		// message, which quotes the secret key on some validation failures.
		return nil, fmt.Errorf("scaleway client: %s", c.redact(err.Error()))
	}
	c.sdk = sdk
	c.bm = baremetal.NewAPI(sdk)
	c.pn = baremetalv3.NewPrivateNetworkAPI(sdk)
	c.iam = iam.NewAPI(sdk)
	return c, nil
}

// Config returns the effective configuration (defaults applied).
func (c *Client) Config() Config { return c.cfg }

// SDK returns the underlying scw.Client for APIs this package does not wrap.
// Calls made through it bypass retries and metrics but share the rate limiter.
func (c *Client) SDK() *scw.Client { return c.sdk }

func (c *Client) redact(s string) string {
	if c.cfg.SecretKey != "" {
		s = strings.ReplaceAll(s, c.cfg.SecretKey, "<redacted>")
	}
	return s
}

func (c *Client) zone(z scw.Zone) scw.Zone {
	if z == "" {
		return c.cfg.DefaultZone
	}
	return z
}

// transport applies the shared rate limit to every HTTP request (each page
// of a list costs one token) and records Retry-After for the retry loop.
type transport struct {
	base    http.RoundTripper
	limiter *rate.Limiter
}

type attemptKey struct{}

// attemptState carries what the transport learns about one attempt back to
// the retry loop (the SDK's ResponseError drops response headers, and an
// error body it cannot decode loses the status too).
type attemptState struct {
	mu         sync.Mutex
	retryAfter time.Duration
	requests   int
	status     int    // of the last error answer
	body       string // its first maxErrorBody bytes
	// answered is the status of the last request's answer, 0 while it
	// has none (sent, or failed before an answer came).
	answered int
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.limiter.Wait(req.Context()); err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, &rateWaitError{err: err}
	}
	st, _ := req.Context().Value(attemptKey{}).(*attemptState)
	if st != nil {
		st.mu.Lock()
		st.requests++
		st.answered = 0
		st.mu.Unlock()
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil || st == nil {
		return resp, err
	}
	st.mu.Lock()
	st.answered = resp.StatusCode
	st.mu.Unlock()
	if resp.StatusCode < 400 {
		return resp, err
	}
	// Keep the start of an error body: the SDK drops it when it cannot
	// decode it. The body is handed on unchanged.
	head := make([]byte, maxErrorBody)
	n, _ := io.ReadFull(resp.Body, head)
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head[:n]), resp.Body), resp.Body}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.status, st.body = resp.StatusCode, strings.TrimSpace(string(head[:n]))
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			st.retryAfter = d
		}
	}
	return resp, nil
}

// parseRetryAfter reads delay-seconds or an HTTP-date (RFC 9110 10.2.3).
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		d := t.Sub(now)
		if d < 0 {
			d = 0
		}
		return d, true
	}
	return 0, false
}

// callSpec describes one logical operation for the retry loop.
type callSpec struct {
	op       string
	zone     scw.Zone
	resource string
	// idempotent calls are retried on every retryable failure. Others only
	// when the failure proves the request was not applied (429, refused
	// connection, nothing sent); any other failure ends the loop, ambiguous
	// unless the API refused the request (mayHaveApplied), so that the caller
	// reconciles.
	idempotent bool
	// write: an idempotent call that changes state (a tag update, a
	// delete). It is retried like a read, but its final error says whether
	// an attempt may have been applied (Error.Ambiguous).
	write bool
	// maxAttempts overrides Config.Retry.MaxAttempts when > 0.
	maxAttempts int
}

// call runs fn with rate limiting, per-attempt timeout, retries with full
// jitter (honouring Retry-After), logging and metrics. Throttled attempts
// (429) do not count against MaxAttempts: they prove nothing was applied,
// and are retried until Retry.ThrottleWait of waiting is spent, so a storm
// of bare 429s is ridden out rather than failing every call in it.
func (c *Client) call(ctx context.Context, spec callSpec, fn func(ctx context.Context) error) error {
	maxAttempts := c.cfg.Retry.MaxAttempts
	if spec.maxAttempts > 0 {
		maxAttempts = spec.maxAttempts
	}
	log := c.log.WithValues("op", spec.op)
	if spec.zone != "" {
		log = log.WithValues("zone", string(spec.zone))
	}
	if spec.resource != "" {
		log = log.WithValues("id", spec.resource)
	}
	ambiguous := false
	failures, throttles := 0, 0
	var throttled time.Duration // waited on 429s so far
	for attempt := 1; ; attempt++ {
		st := &attemptState{}
		actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		actx = context.WithValue(actx, attemptKey{}, st)
		start := time.Now()
		err := fn(actx)
		timedOut := actx.Err() != nil && ctx.Err() == nil
		cancel()
		elapsed := time.Since(start)
		st.mu.Lock()
		retryAfter, requests, status, body, answered := st.retryAfter, st.requests, st.status, st.body, st.answered
		st.mu.Unlock()
		if err != nil && timedOut && (errors.Is(err, context.DeadlineExceeded) || isNetworkError(err)) {
			err = &TimeoutError{After: c.cfg.RequestTimeout}
		}
		if err != nil && answered >= 200 && answered <= 299 && ctx.Err() == nil && !timedOut {
			// A success whose body the SDK could not read or decode: the
			// API acted, only its answer is spoilt.
			err = &UndecodableError{StatusCode: answered, Err: err}
		}
		var resp *scw.ResponseError
		if err != nil && status >= 400 && ctx.Err() == nil && !timedOut && !errors.As(err, &resp) && classify(err) == ClassOther {
			// The SDK could not decode the error answer: classify it by status.
			err = &HTTPError{StatusCode: status, Body: body, Err: err}
		}
		if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			// The caller gave up: report that, keeping the last API error.
			err = fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		}
		class := classify(err)
		if err == nil {
			class = ClassOK
		}
		c.metrics.calls.WithLabelValues(spec.op, string(class)).Inc()
		c.metrics.duration.WithLabelValues(spec.op).Observe(elapsed.Seconds())
		if err == nil {
			log.V(1).Info("scaleway api call", "result", class, "attempt", attempt, "requests", requests, "duration", elapsed)
			return nil
		}
		log.V(1).Info("scaleway api call", "result", class, "attempt", attempt, "requests", requests, "duration", elapsed, "error", c.redact(err.Error()))
		wrap := func() error {
			return &Error{Op: spec.op, Zone: spec.zone, Resource: spec.resource, Attempts: attempt, Ambiguous: ambiguous, Class: class, Err: err, redact: c.redact}
		}
		if (!spec.idempotent || spec.write) && mayHaveApplied(err, requests, status) {
			ambiguous = true
			if !spec.idempotent {
				// Do not repeat it blindly: the caller reads state first.
				return wrap()
			}
		}
		if class == ClassThrottled {
			throttles++
		} else {
			failures++
		}
		if ctx.Err() != nil || !isRetryableClass(class) || maxAttempts <= 1 || failures >= maxAttempts {
			return wrap()
		}
		var wait time.Duration
		if class == ClassThrottled {
			wait = c.throttleBackoff(throttles, retryAfter)
			if throttled+wait > c.cfg.Retry.ThrottleWait {
				return wrap()
			}
			throttled += wait
		} else {
			wait = c.backoff(failures, retryAfter)
		}
		if dl, ok := ctx.Deadline(); ok && c.clock.Now().Add(wait).After(dl) {
			return wrap()
		}
		c.metrics.retries.WithLabelValues(spec.op, string(class)).Inc()
		log.Info("retrying scaleway api call", "result", class, "attempt", attempt, "wait", wait, "retryAfter", retryAfter, "error", c.redact(err.Error()))
		select {
		case <-ctx.Done():
			err = fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
			class = classify(err)
			return wrap()
		case <-c.clock.After(wait):
		}
	}
}

// backoff is "full jitter": uniform in [0, min(max, base*2^(attempt-1))).
// A server-sent Retry-After (capped at MaxRetryAfter) is a floor, plus a
// little jitter so a fleet of callers does not come back in lockstep.
func (c *Client) backoff(attempt int, retryAfter time.Duration) time.Duration {
	return c.jitter(attempt, retryAfter, c.cfg.Retry.MaxBackoff)
}

// throttleBackoff is backoff for 429s, capped lower (ThrottleBackoffCap):
// Scaleway's 429s carry no Retry-After, and its limits refill within
// seconds, so long waits would only slow the ride through a storm.
func (c *Client) throttleBackoff(n int, retryAfter time.Duration) time.Duration {
	return c.jitter(n, retryAfter, min(c.cfg.Retry.MaxBackoff, ThrottleBackoffCap))
}

// ThrottleBackoffCap caps the wait before retrying a 429 without Retry-After.
const ThrottleBackoffCap = 5 * time.Second

func (c *Client) jitter(attempt int, retryAfter, maxWait time.Duration) time.Duration {
	ceil := c.cfg.Retry.BaseBackoff
	for i := 1; i < attempt && ceil < maxWait; i++ {
		ceil *= 2
	}
	if ceil > maxWait {
		ceil = maxWait
	}
	c.randMu.Lock()
	defer c.randMu.Unlock()
	if retryAfter > 0 {
		if retryAfter > c.cfg.Retry.MaxRetryAfter {
			retryAfter = c.cfg.Retry.MaxRetryAfter
		}
		return retryAfter + time.Duration(c.rand.Int64N(int64(c.cfg.Retry.BaseBackoff)+1))
	}
	if ceil <= 0 {
		return 0
	}
	return time.Duration(c.rand.Int64N(int64(ceil)))
}

// keyedMutex serialises read-modify-write of one server's tags in-process.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

func (k *keyedMutex) lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedEntry{}
	}
	e := k.locks[key]
	if e == nil {
		e = &keyedEntry{}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
