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
		rand:    rand.New(rand.NewPCG(uint64(o.clock.Now().UnixNano()), 0x5ca1e)),
		seen:    seenServers{maxAge: SeenMaxAge(cfg)},
	}
	// Each attempt carries its own context deadline (Config.RequestTimeout,
	// covering the rate-limit wait and every page). The client timeout is a
	// backstop for the few requests the SDK makes without a context (the
	// IAM API's metadata lookup), so nothing can hang forever; it is longer
	// than the attempt deadline so that the deadline always fires first.
	httpClient := &http.Client{Transport: &transport{base: o.transport, limiter: c.limiter, clock: o.clock}, Timeout: 2 * cfg.RequestTimeout}
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
// of a list costs one token) and tells the attempt's trace what it saw.
type transport struct {
	base    http.RoundTripper
	limiter *rate.Limiter
	clock   Clock
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.limiter.Wait(req.Context()); err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, &rateWaitError{err: err}
	}
	tr := traceOf(req.Context())
	if tr == nil {
		// A request made outside call (through SDK()): nobody to tell.
		return t.base.RoundTrip(req)
	}
	tr.sent()
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	tr.answered(resp.StatusCode)
	if resp.StatusCode < 400 {
		return resp, nil
	}
	// Keep the start of an error body: the SDK drops it when it cannot
	// decode it. The body is handed on unchanged.
	head := make([]byte, maxErrorBody)
	n, _ := io.ReadFull(resp.Body, head)
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head[:n]), resp.Body), resp.Body}
	tr.refused(resp.StatusCode, strings.TrimSpace(string(head[:n])))
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), t.clock.Now()); ok {
			tr.askedToWait(d)
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
//
// The loop only applies the policy: one attempt (try), its metrics and log
// line (countAttempt), the decision (retryRules.decide), the wait.
func (c *Client) call(ctx context.Context, spec callSpec, fn func(ctx context.Context) error) error {
	rules := c.retryRules(spec)
	log := c.callLogger(spec)
	var budget retryBudget
	for n := 1; ; n++ {
		a := c.try(ctx, fn)
		class := classOf(a.err)
		c.countAttempt(spec, log, n, a, class)
		if a.err == nil {
			return nil
		}
		var retry bool
		var wait time.Duration
		budget, retry, wait = rules.decide(budget, c.outcome(ctx, a, class))
		if !retry {
			return c.callError(spec, n, budget, class, a.err)
		}
		c.metrics.retries.WithLabelValues(spec.op, string(class)).Inc()
		log.Info("retrying scaleway api call", "result", class, "attempt", n, "wait", wait, "retryAfter", a.seen.retryAfter, "error", c.redact(a.err.Error()))
		select {
		case <-ctx.Done():
			err := fmt.Errorf("%w (last error: %v)", ctx.Err(), a.err)
			return c.callError(spec, n, budget, classify(err), err)
		case <-c.clock.After(wait):
		}
	}
}

// retryRules is the call's retry policy: the configured one, with the
// call's own attempt bound and kind.
func (c *Client) retryRules(spec callSpec) retryRules {
	r := retryRules{RetryPolicy: c.cfg.Retry, idempotent: spec.idempotent, write: spec.write, draw: c.draw}
	if spec.maxAttempts > 0 {
		r.MaxAttempts = spec.maxAttempts
	}
	return r
}

func (c *Client) callLogger(spec callSpec) logr.Logger {
	log := c.log.WithValues("op", spec.op)
	if spec.zone != "" {
		log = log.WithValues("zone", string(spec.zone))
	}
	if spec.resource != "" {
		log = log.WithValues("id", spec.resource)
	}
	return log
}

// attempt is one try of a call's fn: its error (normalised), how long it
// took, and what the transport saw of its requests.
type attempt struct {
	err     error
	elapsed time.Duration
	seen    answers
}

// try runs fn once under the per-attempt deadline (Config.RequestTimeout,
// covering the rate-limit wait and every page).
func (c *Client) try(ctx context.Context, fn func(ctx context.Context) error) attempt {
	actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	actx, tr := withTrace(actx)
	start := c.clock.Now()
	err := fn(actx)
	timedOut := actx.Err() != nil && ctx.Err() == nil
	cancel()
	a := attempt{elapsed: c.clock.Now().Sub(start), seen: tr.answers()}
	a.err = c.normalize(ctx, err, timedOut, a.seen)
	return a
}

// normalize turns what the SDK returned into the error the caller and the
// retry decision see: the attempt's own timeout as a TimeoutError, answers
// the SDK could not decode as UndecodableError or HTTPError, and the
// caller's context ending as that context's error.
func (c *Client) normalize(ctx context.Context, err error, timedOut bool, seen answers) error {
	if err == nil {
		return nil
	}
	if timedOut && (errors.Is(err, context.DeadlineExceeded) || isNetworkError(err)) {
		err = &TimeoutError{After: c.cfg.RequestTimeout}
	}
	if ctx.Err() == nil && !timedOut {
		err = undecoded(err, seen)
	}
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		// The caller gave up: report that, keeping the last API error.
		err = fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
	}
	return err
}

// undecoded names an answer the API gave in time but the SDK could not
// read: a success whose body is spoilt (the API acted, only its answer is
// lost), or an error answer the SDK could not decode (classified by its
// status).
func undecoded(err error, seen answers) error {
	if seen.answered >= 200 && seen.answered <= 299 {
		err = &UndecodableError{StatusCode: seen.answered, Err: err}
	}
	var resp *scw.ResponseError
	if seen.status >= 400 && !errors.As(err, &resp) && classify(err) == ClassOther {
		err = &HTTPError{StatusCode: seen.status, Body: seen.body, Err: err}
	}
	return err
}

func classOf(err error) Class {
	if err == nil {
		return ClassOK
	}
	return classify(err)
}

// countAttempt counts and logs one attempt.
func (c *Client) countAttempt(spec callSpec, log logr.Logger, n int, a attempt, class Class) {
	c.metrics.calls.WithLabelValues(spec.op, string(class)).Inc()
	c.metrics.duration.WithLabelValues(spec.op).Observe(a.elapsed.Seconds())
	kv := []any{"result", class, "attempt", n, "requests", a.seen.requests, "duration", a.elapsed}
	if a.err != nil {
		kv = append(kv, "error", c.redact(a.err.Error()))
	}
	log.V(1).Info("scaleway api call", kv...)
}

// outcome is what the retry decision reads of a failed attempt.
func (c *Client) outcome(ctx context.Context, a attempt, class Class) outcome {
	o := outcome{
		class:          class,
		mayHaveApplied: mayHaveApplied(a.err, a.seen.requests, a.seen.status),
		retryAfter:     a.seen.retryAfter,
		callerDone:     ctx.Err() != nil,
	}
	if dl, ok := ctx.Deadline(); ok {
		o.hasDeadline, o.untilDeadline = true, dl.Sub(c.clock.Now())
	}
	return o
}

func (c *Client) callError(spec callSpec, attempts int, b retryBudget, class Class, err error) error {
	return &Error{Op: spec.op, Zone: spec.zone, Resource: spec.resource, Attempts: attempts, Ambiguous: b.ambiguous, Class: class, Err: err, redact: c.redact}
}

// backoff is the wait before retrying the attempt-th failure (see
// retryRules.backoff).
func (c *Client) backoff(attempt int, retryAfter time.Duration) time.Duration {
	return c.retryRules(callSpec{}).backoff(attempt, retryAfter)
}

// draw is retryRules.draw for the client's calls: its seeded source, shared
// by concurrent calls.
func (c *Client) draw(n int64) int64 {
	c.randMu.Lock()
	defer c.randMu.Unlock()
	return c.rand.Int64N(n)
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
