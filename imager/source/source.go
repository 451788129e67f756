package source

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	// Log, when set, receives one line per retry (never URLs with queries).
	Log func(format string, args ...any)
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
		o.Log = func(string, ...any) {}
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
		r.opts.Log("download attempt %d failed: %v", r.attempts, ae.err)
		r.last = ae
	}
}

func retryAfterOf(a *attemptError) time.Duration {
	if a == nil {
		return 0
	}
	return a.retryAfter
}

func (r *Reader) request() *attemptError {
	actx, acancel := context.WithCancel(r.ctx)
	req, err := http.NewRequestWithContext(actx, http.MethodGet, r.url, nil)
	if err != nil {
		acancel()
		return &attemptError{err: fmt.Errorf("%w: %v", ErrRejected, err), final: true}
	}
	resuming := r.offset > 0
	if resuming {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", r.offset))
		// If-Range makes a server whose object changed answer 200 with the
		// new object instead of splicing two versions.
		if r.etag != "" && !strings.HasPrefix(r.etag, "W/") {
			req.Header.Set("If-Range", r.etag)
		} else if r.lastMod != "" {
			req.Header.Set("If-Range", r.lastMod)
		}
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
	fail := func(ae *attemptError) *attemptError {
		stall.Stop()
		resp.Body.Close()
		acancel()
		return ae
	}
	etag, lastMod := resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
	switch {
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusPartialContent:
	case resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return fail(&attemptError{err: fmt.Errorf("HTTP %s", resp.Status), retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"))})
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && resuming:
		return fail(&attemptError{err: fmt.Errorf("%w: HTTP %s when resuming at byte %d", ErrChanged, resp.Status, r.offset), final: true})
	default:
		return fail(&attemptError{err: fmt.Errorf("%w: HTTP %s", ErrRejected, resp.Status), final: true})
	}
	if !resuming {
		r.etag, r.lastMod = etag, lastMod
		if resp.StatusCode == http.StatusOK && resp.ContentLength >= 0 {
			r.size = resp.ContentLength
		}
		r.setBody(resp.Body, stall, acancel)
		return nil
	}
	if (r.etag != "" && etag != r.etag) || (r.etag == "" && r.lastMod != "" && lastMod != r.lastMod) {
		return fail(&attemptError{err: fmt.Errorf("%w: validator was %q, now %q; not splicing two versions", ErrChanged, r.validator(), firstNonEmpty(etag, lastMod)), final: true})
	}
	if resp.StatusCode == http.StatusPartialContent {
		start, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || start != r.offset || (r.size >= 0 && total >= 0 && total != r.size) {
			return fail(&attemptError{err: fmt.Errorf("%w: server answered range %q for bytes=%d-", ErrChanged, resp.Header.Get("Content-Range"), r.offset), final: true})
		}
		r.setBody(resp.Body, stall, acancel)
		r.resumes++
		return nil
	}
	// 200 to a Range request with the same validators: the server ignores
	// ranges; skip what was already delivered.
	if r.size >= 0 && resp.ContentLength >= 0 && resp.ContentLength != r.size {
		return fail(&attemptError{err: fmt.Errorf("%w: length was %d, now %d", ErrChanged, r.size, resp.ContentLength), final: true})
	}
	if r.etag == "" && r.lastMod == "" {
		return fail(&attemptError{err: fmt.Errorf("%w: server supports neither ranges nor validators, cannot resume safely", ErrChanged), final: true})
	}
	r.setBody(resp.Body, stall, acancel)
	if _, err := io.CopyN(io.Discard, stallReader{r}, r.offset); err != nil {
		r.closeBody()
		return &attemptError{err: redactErr(err), stalled: r.stalled.Load()}
	}
	r.resumes++
	return nil
}

func (r *Reader) validator() string { return firstNonEmpty(r.etag, r.lastMod) }

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
	r.opts.Log("download interrupted at byte %d: %v; resuming", r.offset, why)
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
