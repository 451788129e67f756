package source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Sentinel errors; every error Open or Read returns wraps one of them (or
// context.Canceled when the caller's context ended).
var (
	// ErrUnreachable: no response after all retries (DNS, refused, reset, 5xx...).
	ErrUnreachable = errors.New("source unreachable")
	// ErrRejected: a final answer such as 403, 404 or 410; retrying will not help.
	ErrRejected = errors.New("source rejected the request")
	// ErrChanged: the object changed (ETag/Last-Modified) between two attempts.
	ErrChanged = errors.New("source changed during download")
	// ErrStalled: no byte arrived for Options.StallTimeout, on every attempt.
	ErrStalled = errors.New("source stalled")
	// ErrTimeout: Options.Timeout elapsed.
	ErrTimeout = errors.New("download timed out")
)

// Options tune the download. Zero values take the defaults below.
type Options struct {
	ConnectTimeout time.Duration // TCP connect + TLS handshake, per attempt (default 15s)
	HeaderTimeout  time.Duration // request sent -> response headers (default 30s)
	StallTimeout   time.Duration // longest gap between two received bytes (default 30s)
	Timeout        time.Duration // whole download, all attempts (default none)
	MaxAttempts    int           // requests in total, first one included (default 8)
	BackoffMin     time.Duration // first retry delay, doubled each time (default 500ms)
	BackoffMax     time.Duration // cap of the retry delay (default 15s)
	// Client overrides the HTTP client (its Timeout must be 0: the body is long).
	Client *http.Client
	// Log receives one Info record per retry (never URLs with queries);
	// nil discards them.
	Log *slog.Logger
}

func (o *Options) fill() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.ConnectTimeout, 15*time.Second)
	def(&o.HeaderTimeout, 30*time.Second)
	def(&o.StallTimeout, 30*time.Second)
	def(&o.BackoffMin, 500*time.Millisecond)
	def(&o.BackoffMax, 15*time.Second)
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 8
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

// Reader is the body of the image, resumed across broken connections.
type Reader struct {
	ctx    context.Context
	cancel context.CancelFunc
	url    string
	opts   Options
	client *http.Client

	file *os.File // file:// and plain paths

	body      io.ReadCloser
	attemptCx context.CancelFunc
	stall     *time.Timer
	stalled   atomic.Bool
	mu        sync.Mutex // offset, resumes (read by progress reporters)
	readMu    sync.Mutex // held by Read, so Close never pulls the body from under it

	size     int64 // total length, -1 when unknown
	etag     string
	lastMod  string
	offset   int64 // bytes delivered so far
	resumes  int
	attempts int
	last     *attemptError // why the previous attempt failed
	bodyAt   int64         // offset when the current body started
	err      error
}

// Open starts the download of rawURL (http, https, file:// or a local path)
// and returns once the response headers of the first attempt arrived, so a
// 404 or an unreachable host fails here.
func Open(ctx context.Context, rawURL string, opts Options) (*Reader, error) {
	opts.fill()
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: invalid URL: %v", ErrRejected, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	if opts.Timeout > 0 {
		cctx, cancel = context.WithTimeoutCause(ctx, opts.Timeout, ErrTimeout)
	}
	r := &Reader{ctx: cctx, cancel: cancel, url: rawURL, opts: opts, size: -1}
	switch u.Scheme {
	case "", "file":
		p := u.Path
		if u.Scheme == "" {
			p = rawURL
		}
		f, err := os.Open(p)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("%w: %v", ErrRejected, err)
		}
		r.file = f
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			r.size = st.Size()
		}
		return r, nil
	case "http", "https":
	default:
		cancel()
		return nil, fmt.Errorf("%w: unsupported URL scheme %q (want http, https or file)", ErrRejected, u.Scheme)
	}
	r.client = opts.Client
	if r.client == nil {
		d := &net.Dialer{Timeout: opts.ConnectTimeout, KeepAlive: 30 * time.Second}
		r.client = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           d.DialContext,
			TLSHandshakeTimeout:   opts.ConnectTimeout,
			ResponseHeaderTimeout: opts.HeaderTimeout,
			// Compressed images must arrive byte for byte: no transparent gzip.
			DisableCompression: true,
			ForceAttemptHTTP2:  true,
		}}
	}
	if err := r.connect(); err != nil {
		cancel()
		return nil, err
	}
	return r, nil
}

// Size is the total length announced by the server, -1 when unknown.
func (r *Reader) Size() int64 { return r.size }

// Offset is the number of bytes delivered by Read so far.
func (r *Reader) Offset() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.offset
}

// Resumes is the number of times the download was resumed after a failure.
func (r *Reader) Resumes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resumes
}

// ETag is the validator of the object (empty when the server sends none).
func (r *Reader) ETag() string { return r.etag }

// RedactURL drops the query and user info, which carry credentials in
// presigned URLs, so a URL can go into logs and reports.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid URL)"
	}
	u.RawQuery, u.ForceQuery, u.User, u.Fragment = "", false, nil, ""
	return u.String()
}

func (r *Reader) backoff(attempt int, retryAfter time.Duration) error {
	d := r.opts.BackoffMin << (attempt - 1)
	if d > r.opts.BackoffMax || d <= 0 {
		d = r.opts.BackoffMax
	}
	if retryAfter > d {
		d = min(retryAfter, r.opts.BackoffMax)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-r.ctx.Done():
		return r.ctxErr()
	}
}

func (r *Reader) ctxErr() error {
	if c := context.Cause(r.ctx); errors.Is(c, ErrTimeout) {
		return fmt.Errorf("%w after %v (%d bytes received)", ErrTimeout, r.opts.Timeout, r.offset)
	}
	return r.ctx.Err()
}

// retryable says whether an attempt's failure may go away; final failures
// are returned wrapped in their sentinel.
type attemptError struct {
	err        error
	final      bool
	retryAfter time.Duration
	stalled    bool
}

// connect issues requests until one gives a usable body, or retries run out.
func (r *Reader) connect() error {
	for {
		last := r.last
		if r.attempts >= r.opts.MaxAttempts && last != nil {
			if last.stalled {
				return fmt.Errorf("%w: no data for %v, %d attempts: %v", ErrStalled, r.opts.StallTimeout, r.attempts, last.err)
			}
			return fmt.Errorf("%w: %d attempts: %v", ErrUnreachable, r.attempts, last.err)
		}
		if r.attempts > 0 {
			if err := r.backoff(r.attempts, retryAfterOf(last)); err != nil {
				return err
			}
		}
		r.attempts++
		ae := r.request()
		if ae == nil {
			r.bodyAt = r.offset
			return nil
		}
		if r.ctx.Err() != nil {
			return r.ctxErr()
		}
		if ae.final {
			return ae.err
		}
		r.opts.Log.Info("download attempt failed", "attempt", r.attempts, "error", ae.err)
		r.last = ae
	}
}

func retryAfterOf(a *attemptError) time.Duration {
	if a == nil {
		return 0
	}
	return a.retryAfter
}

// request makes one attempt: it sends the GET (ranged when resuming), reads
// what the answer says about the object, and either keeps the body for Read
// or says why the attempt failed. The decisions are the pure functions below
// it (statusVerdict, resumeVerdict); request only applies them.
func (r *Reader) request() *attemptError {
	actx, acancel := context.WithCancel(r.ctx)
	req, err := r.newRequest(actx)
	if err != nil {
		acancel()
		return &attemptError{err: fmt.Errorf("%w: %v", ErrRejected, err), final: true}
	}
	// Stall timer covers the wait for headers as well as the body.
	r.stalled.Store(false)
	stall := time.AfterFunc(r.opts.StallTimeout, func() { r.stalled.Store(true); acancel() })
	resp, err := r.client.Do(req)
	if err != nil {
		stall.Stop()
		acancel()
		return &attemptError{err: redactErr(err), stalled: r.stalled.Load()}
	}
	a := answerOf(resp)
	resuming := r.offset > 0
	ae := statusVerdict(a, resuming, r.offset)
	discard := false
	if ae == nil && resuming {
		discard, ae = resumeVerdict(r.known(), a, r.offset)
	}
	if ae != nil {
		stall.Stop()
		resp.Body.Close()
		acancel()
		return ae
	}
	r.setBody(resp.Body, stall, acancel)
	if !resuming {
		r.etag, r.lastMod = a.etag, a.lastMod
		if a.status == http.StatusOK && a.length >= 0 {
			r.size = a.length
		}
		return nil
	}
	// 200 to a Range request with the same validators: the server ignores
	// ranges; skip what was already delivered.
	if discard {
		if _, err := io.CopyN(io.Discard, stallReader{r}, r.offset); err != nil {
			r.closeBody()
			return &attemptError{err: redactErr(err), stalled: r.stalled.Load()}
		}
	}
	r.resumes++
	return nil
}

// newRequest builds one attempt's GET, asking for the rest of the object
// when some of it was already delivered.
func (r *Reader) newRequest(ctx context.Context) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	if err != nil || r.offset == 0 {
		return req, err
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-", r.offset))
	// If-Range makes a server whose object changed answer 200 with the
	// new object instead of splicing two versions.
	if r.etag != "" && !strings.HasPrefix(r.etag, "W/") {
		req.Header.Set("If-Range", r.etag)
	} else if r.lastMod != "" {
		req.Header.Set("If-Range", r.lastMod)
	}
	return req, nil
}

// answer is what a response's status line and headers say, read before its
// body, so that the verdicts on it are plain functions of values.
type answer struct {
	status        int
	statusText    string // "404 Not Found", for messages
	etag, lastMod string
	length        int64 // Content-Length, -1 when unknown
	contentRange  string
	retryAfter    time.Duration
}

func answerOf(resp *http.Response) answer {
	return answer{
		status:       resp.StatusCode,
		statusText:   resp.Status,
		etag:         resp.Header.Get("ETag"),
		lastMod:      resp.Header.Get("Last-Modified"),
		length:       resp.ContentLength,
		contentRange: resp.Header.Get("Content-Range"),
		retryAfter:   parseRetryAfter(resp.Header.Get("Retry-After")),
	}
}

// statusVerdict says what an answer's status means for the attempt: nil when
// the body may be read, a retried error for statuses that may go away
// (408, 429, 5xx), and a final one for the rest.
func statusVerdict(a answer, resuming bool, offset int64) *attemptError {
	switch {
	case a.status == http.StatusOK || a.status == http.StatusPartialContent:
		return nil
	case a.status == http.StatusRequestTimeout || a.status == http.StatusTooManyRequests || a.status >= 500:
		return &attemptError{err: fmt.Errorf("HTTP %s", a.statusText), retryAfter: a.retryAfter}
	case a.status == http.StatusRequestedRangeNotSatisfiable && resuming:
		return &attemptError{err: fmt.Errorf("%w: HTTP %s when resuming at byte %d", ErrChanged, a.statusText, offset), final: true}
	default:
		return &attemptError{err: fmt.Errorf("%w: HTTP %s", ErrRejected, a.statusText), final: true}
	}
}

// known is what the first answer said about the object, to check that a
// resumed answer is about the same object.
type known struct {
	etag, lastMod string
	size          int64 // -1 when unknown
}

func (r *Reader) known() known { return known{etag: r.etag, lastMod: r.lastMod, size: r.size} }

// resumeVerdict decides whether a successful answer to a resumed request
// continues the object at offset. A 206 must start at offset; a 200 (a server
// that ignores ranges) is the whole object again, and discard says to skip
// the bytes already delivered. Any sign of another object is final: two
// versions are never spliced.
func resumeVerdict(k known, a answer, offset int64) (discard bool, ae *attemptError) {
	if k.changedBy(a) {
		return false, &attemptError{err: fmt.Errorf("%w: validator was %q, now %q; not splicing two versions", ErrChanged, firstNonEmpty(k.etag, k.lastMod), firstNonEmpty(a.etag, a.lastMod)), final: true}
	}
	if a.status == http.StatusPartialContent {
		if !k.rangeContinues(a.contentRange, offset) {
			return false, &attemptError{err: fmt.Errorf("%w: server answered range %q for bytes=%d-", ErrChanged, a.contentRange, offset), final: true}
		}
		return false, nil
	}
	if k.size >= 0 && a.length >= 0 && a.length != k.size {
		return false, &attemptError{err: fmt.Errorf("%w: length was %d, now %d", ErrChanged, k.size, a.length), final: true}
	}
	if k.etag == "" && k.lastMod == "" {
		return false, &attemptError{err: fmt.Errorf("%w: server supports neither ranges nor validators, cannot resume safely", ErrChanged), final: true}
	}
	return true, nil
}

// changedBy says whether an answer's validators show another object: the
// ETag when the first answer had one, else Last-Modified.
func (k known) changedBy(a answer) bool {
	if k.etag != "" {
		return a.etag != k.etag
	}
	return k.lastMod != "" && a.lastMod != k.lastMod
}

// rangeContinues says whether a Content-Range starts at offset and, when
// both sizes are known, describes an object of the same size.
func (k known) rangeContinues(contentRange string, offset int64) bool {
	start, total, ok := parseContentRange(contentRange)
	if !ok || start != offset {
		return false
	}
	return k.size < 0 || total < 0 || total == k.size
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (r *Reader) setBody(b io.ReadCloser, stall *time.Timer, cancel context.CancelFunc) {
	r.body, r.stall, r.attemptCx = b, stall, cancel
}

func (r *Reader) closeBody() {
	if r.body != nil {
		r.stall.Stop()
		r.body.Close()
		r.attemptCx()
		r.body = nil
	}
}

// stallReader reads the current body, re-arming the stall timer on progress.
type stallReader struct{ r *Reader }

func (s stallReader) Read(p []byte) (int, error) {
	n, err := s.r.body.Read(p)
	if n > 0 {
		s.r.stall.Reset(s.r.opts.StallTimeout)
	}
	return n, err
}

// Read delivers the next bytes of the object, resuming transparently.
func (r *Reader) Read(p []byte) (int, error) {
	r.readMu.Lock()
	defer r.readMu.Unlock()
	if r.err != nil {
		return 0, r.err
	}
	if r.file != nil {
		n, err := r.file.Read(p)
		r.advance(n)
		return n, err
	}
	for {
		if r.body == nil {
			if err := r.connect(); err != nil {
				r.err = err
				return 0, err
			}
		}
		n, err := stallReader{r}.Read(p)
		r.advance(n)
		if err == nil {
			return n, nil
		}
		if end := r.ended(err); end != nil {
			r.closeBody()
			r.err = end
			return n, end
		}
		r.interrupted(err)
		if n > 0 {
			return n, nil
		}
	}
}

// advance counts n bytes read.
func (r *Reader) advance(n int) {
	r.mu.Lock()
	r.offset += int64(n)
	r.mu.Unlock()
}

// ended is the error that ends the download for good after the body failed
// with err: io.EOF once every byte came (or the size is unknown), the
// context's end; nil when the download should resume.
func (r *Reader) ended(err error) error {
	complete := r.size >= 0 && r.offset == r.size
	if errors.Is(err, io.EOF) && (complete || r.size < 0) {
		return io.EOF
	}
	if r.ctx.Err() != nil {
		return r.ctxErr()
	}
	return nil
}

// interrupted notes a broken or short body and drops it: the next connect
// resumes from r.offset.
func (r *Reader) interrupted(err error) {
	why := redactErr(err)
	if r.stalled.Load() {
		why = fmt.Errorf("no data for %v", r.opts.StallTimeout)
	}
	r.opts.Log.Info("download interrupted; resuming", "byte", r.offset, "error", why)
	r.last = &attemptError{err: why, stalled: r.stalled.Load()}
	r.closeBody()
	if r.offset > r.bodyAt {
		// Progress since the last connect: a fresh set of attempts, so a
		// long download survives many separate interruptions.
		r.attempts = 0
	}
}

// Close ends the download. It may be called while another goroutine is in
// Read: the cancellation makes that Read return.
func (r *Reader) Close() error {
	r.cancel()
	if r.readMu.TryLock() {
		r.closeBody()
		r.readMu.Unlock()
	}
	if r.file != nil {
		r.file.Close()
	}
	return nil
}

func parseRetryAfter(v string) time.Duration {
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return time.Until(t)
	}
	return 0
}

// parseContentRange reads "bytes START-END/TOTAL" (TOTAL may be *).
func parseContentRange(v string) (start, total int64, ok bool) {
	v, found := strings.CutPrefix(v, "bytes ")
	if !found {
		return 0, 0, false
	}
	rng, tot, found := strings.Cut(v, "/")
	if !found {
		return 0, 0, false
	}
	s, _, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, false
	}
	start, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	total = -1
	if tot != "*" {
		if total, err = strconv.ParseInt(tot, 10, 64); err != nil {
			return 0, 0, false
		}
	}
	return start, total, true
}

// redactErr strips URLs (which may be presigned) out of net/http errors.
func redactErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s %s: %w", ue.Op, RedactURL(ue.URL), ue.Err)
	}
	return err
}

// ReadAt reads len(p) bytes at off with a separate ranged request (the file
// directly for local sources), without disturbing the main download. It is
// for small probes, such as the index at the end of an .xz file.
func (r *Reader) ReadAt(p []byte, off int64) (int, error) {
	if r.file != nil {
		return r.file.ReadAt(p, off)
	}
	if len(p) == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.HeaderTimeout+r.opts.StallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+int64(len(p))-1))
	if r.etag != "" {
		req.Header.Set("If-Match", r.etag)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, redactErr(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		return 0, fmt.Errorf("ranged read: HTTP %s", resp.Status)
	}
	if start, _, ok := parseContentRange(resp.Header.Get("Content-Range")); !ok || start != off {
		return 0, fmt.Errorf("ranged read: unexpected Content-Range %q", resp.Header.Get("Content-Range"))
	}
	return io.ReadFull(resp.Body, p)
}
