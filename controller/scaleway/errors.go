package scaleway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/scaleway/scaleway-sdk-go/scw"
)

// Class is the kind of an API call's outcome. It is the `result` label of
// karpenter_scaleway_em_api_calls_total, and what callers branch on.
type Class string

// Classes of outcomes. The first ten are the metric results named in the
// design; unauthorized, invalid, network and canceled are finer splits that
// an operator needs to tell a broken credential from a broken request.
const (
	ClassOK           Class = "ok"
	ClassNotFound     Class = "not_found"
	ClassOutOfStock   Class = "out_of_stock"
	ClassQuota        Class = "quota"
	ClassTransient    Class = "transient"
	ClassThrottled    Class = "throttled"
	ClassServerError  Class = "server_error"
	ClassTimeout      Class = "timeout"
	ClassPermission   Class = "permission"
	ClassOther        Class = "other"
	ClassUnauthorized Class = "unauthorized"
	ClassInvalid      Class = "invalid"
	ClassNetwork      Class = "network"
	ClassCanceled     Class = "canceled"
	// ClassRefused: the API refused the request itself but answered with a
	// 5xx, as recorded: 503 {"message":"cloud-init is not supported on this
	// offer"}. Retrying cannot help; a client that retries every 5xx loops.
	ClassRefused Class = "refused"
)

// Error is what every Client method returns on failure. It wraps the SDK's
// error (so errors.As to *scw.ResponseError etc. works) and says which
// operation failed, after how many attempts.
type Error struct {
	Op       string
	Zone     scw.Zone
	Resource string // server/key/... ID when known
	Attempts int
	// Ambiguous is set when an attempt of a call that changes state was
	// sent and failed without an answer that refuses it (see
	// mayHaveApplied): a timeout, a 5xx, a reset connection or stream, a
	// GOAWAY, a success whose body could not be decoded, the caller giving
	// up. The API may have applied it.
	Ambiguous bool
	Class     Class
	Err       error
	redact    func(string) string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("scaleway ")
	b.WriteString(e.Op)
	if e.Zone != "" {
		b.WriteString(" in ")
		b.WriteString(string(e.Zone))
	}
	if e.Resource != "" {
		b.WriteString(" ")
		b.WriteString(e.Resource)
	}
	b.WriteString(": ")
	msg := "<nil>"
	if e.Err != nil {
		msg = e.Err.Error()
	}
	if e.redact != nil {
		msg = e.redact(msg)
	}
	b.WriteString(msg)
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (after %d attempts)", e.Attempts)
	}
	if e.Ambiguous {
		b.WriteString(" (an earlier attempt may have been applied)")
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// TimeoutError is one attempt that ran past Config.RequestTimeout while the
// caller's context was still live.
type TimeoutError struct {
	After time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("request timed out after %s", e.After)
}

// Timeout lets net.Error-style checks see it.
func (e *TimeoutError) Timeout() bool { return true }

// HTTPError is an error answer the SDK could not decode (a body that is not
// the JSON its Content-Type claims, e.g. a proxy's HTML page): the status and
// the start of the body, so it is classified by status like any other.
type HTTPError struct {
	StatusCode int
	Body       string // at most maxErrorBody bytes
	Err        error  // the SDK's decoding error
}

func (e *HTTPError) Error() string {
	msg := fmt.Sprintf("http error %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

func (e *HTTPError) Unwrap() error { return e.Err }

// UndecodableError is a success answer (2xx) whose body the SDK could not
// read or decode (not JSON, cut short): the API acted, but what it answered
// is unknown. It is classified server_error, so a read is retried; for a
// call that changes state it is ambiguous.
type UndecodableError struct {
	StatusCode int
	Err        error
}

func (e *UndecodableError) Error() string {
	return fmt.Sprintf("undecodable answer to a request that succeeded (http %d): %v", e.StatusCode, e.Err)
}

func (e *UndecodableError) Unwrap() error { return e.Err }

// maxErrorBody bounds how much of an error answer's body is kept.
const maxErrorBody = 512

// rateWaitError is returned when the client-side rate limiter cannot grant a
// token before the attempt's deadline.
type rateWaitError struct{ err error }

func (e *rateWaitError) Error() string { return "client-side rate limit: " + e.err.Error() }
func (e *rateWaitError) Unwrap() error { return e.err }

// Classify tells what kind of failure err is. It understands the SDK's typed
// errors, the untyped JSON errors the Elastic Metal API really returns (e.g.
// 404 {"message":"Not Found"} after a delete, 400 {"message":"Server is not
// delivered"}), network errors and timeouts.
func Classify(err error) Class {
	if err == nil {
		return ClassOK
	}
	var e *Error
	if errors.As(err, &e) && e.Class != "" {
		return e.Class
	}
	return classify(err)
}

func classify(err error) Class {
	for _, step := range []func(error) (Class, bool){classifyOwn, classifySDK, classifyAnswer, classifyTransport} {
		if c, ok := step(err); ok {
			return c
		}
	}
	return ClassOther
}

// classifyOwn reads the errors this package makes itself; they come first
// because they may wrap an SDK error whose class would mislead.
func classifyOwn(err error) (Class, bool) {
	var (
		undec    *UndecodableError
		state    *ServerStateError
		timeout  *TimeoutError
		rateWait *rateWaitError
	)
	switch {
	case errors.As(err, &undec):
		return ClassServerError, true
	case errors.As(err, &state):
		if state.Status == "out_of_stock" {
			return ClassOutOfStock, true
		}
		return ClassOther, true
	case errors.As(err, &timeout), errors.As(err, &rateWait):
		return ClassTimeout, true
	}
	return ClassOther, false
}

// classifySDK reads the SDK's typed errors, then NoAddressError, which is
// transient like a server in a transient state.
func classifySDK(err error) (Class, bool) {
	var (
		notFound   *scw.ResourceNotFoundError
		outOfStock *scw.OutOfStockError
		quota      *scw.QuotasExceededError
		transient  *scw.TransientStateError
		locked     *scw.ResourceLockedError
		perm       *scw.PermissionsDeniedError
		invalid    *scw.InvalidArgumentsError
		authV      scw.DeniedAuthenticationError
		authP      *scw.DeniedAuthenticationError
		preV       scw.PreconditionFailedError
		preP       *scw.PreconditionFailedError
		expV       scw.ResourceExpiredError
		expP       *scw.ResourceExpiredError
		noAddr     *NoAddressError
	)
	switch {
	case errors.As(err, &notFound):
		return ClassNotFound, true
	case errors.As(err, &outOfStock):
		return ClassOutOfStock, true
	case errors.As(err, &quota):
		return ClassQuota, true
	case errors.As(err, &transient), errors.As(err, &locked):
		return ClassTransient, true
	case errors.As(err, &perm):
		return ClassPermission, true
	case errors.As(err, &authV), errors.As(err, &authP):
		return ClassUnauthorized, true
	case errors.As(err, &invalid), errors.As(err, &preV), errors.As(err, &preP):
		return ClassInvalid, true
	case errors.As(err, &expV), errors.As(err, &expP):
		return ClassNotFound, true
	case errors.As(err, &noAddr):
		return ClassTransient, true
	}
	return ClassOther, false
}

// classifyAnswer reads an HTTP answer no typed error describes by its
// status and words.
func classifyAnswer(err error) (Class, bool) {
	var (
		resp    *scw.ResponseError
		httpErr *HTTPError
	)
	switch {
	case errors.As(err, &resp):
		return classifyResponse(resp.StatusCode, responseText(resp)), true
	case errors.As(err, &httpErr):
		return classifyResponse(httpErr.StatusCode, httpErr.Body), true
	}
	return ClassOther, false
}

// classifyTransport reads what is left when no answer came: the context's
// end, a timeout, a broken connection.
func classifyTransport(err error) (Class, bool) {
	switch {
	case errors.Is(err, context.Canceled):
		return ClassCanceled, true
	case errors.Is(err, context.DeadlineExceeded):
		return ClassTimeout, true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ClassTimeout, true
	}
	if isNetworkError(err) {
		return ClassNetwork, true
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		// Any other failure of the HTTP exchange itself: an HTTP/2 stream
		// reset (RST_STREAM) or GOAWAY, a connection broken mid-answer. Its
		// types are net/http's own; all it proves is that no answer came.
		return ClassNetwork, true
	}
	return ClassOther, false
}

// responseText is what an untyped error answer says: its JSON message, or
// for a body that is not JSON (the SDK then sets Message to the status line)
// the body itself.
func responseText(r *scw.ResponseError) string {
	if r.Message != r.Status || len(r.RawBody) == 0 {
		return r.Message
	}
	body := strings.TrimSpace(string(r.RawBody))
	if len(body) > maxErrorBody {
		body = body[:maxErrorBody]
	}
	return body
}

// classifyResponse handles answers the SDK could not type: the EM API
// answers many failures with only {"message": "..."}, and gateways with no
// body at all, so the status decides, refined by the message's words.
func classifyResponse(code int, text string) Class {
	msg := strings.ToLower(text)
	if c, ok := classifyWords(msg); ok {
		return c
	}
	return classifyStatus(code, msg)
}

// classifyWords reads the classes whose words decide whatever the status:
// stock and quota answers come with several statuses.
func classifyWords(msg string) (Class, bool) {
	switch {
	case strings.Contains(msg, "out of stock"), strings.Contains(msg, "out_of_stock"), strings.Contains(msg, "no stock"), strings.Contains(msg, "not enough stock"):
		return ClassOutOfStock, true
	case strings.Contains(msg, "quota"):
		return ClassQuota, true
	}
	return ClassOther, false
}

// classifyStatus decides by the HTTP status, the message refining a 503 and
// the 4xx answers.
func classifyStatus(code int, msg string) Class {
	switch {
	case code == http.StatusNotFound, code == http.StatusGone:
		return ClassNotFound
	case code == http.StatusUnauthorized:
		return ClassUnauthorized
	case code == http.StatusForbidden:
		return ClassPermission
	case code == http.StatusTooManyRequests:
		return ClassThrottled
	case code == http.StatusRequestTimeout, code == http.StatusGatewayTimeout:
		return ClassTimeout
	case code == http.StatusServiceUnavailable && refusal(code, msg):
		return ClassRefused
	case code >= 500:
		return ClassServerError
	case code == http.StatusConflict, code == http.StatusLocked:
		return ClassTransient
	case code >= 400:
		return classifyClientError(msg)
	}
	return ClassOther
}

// classifyClientError tells a 4xx that refuses the request from one that
// says the server is not ready for it yet.
func classifyClientError(msg string) Class {
	// "Server is not delivered", "server is busy", "... transient state":
	// the request is fine, the server is not in a state to accept it yet.
	for _, s := range []string{"not delivered", "transient", "busy", "in progress", "not ready", "is locked"} {
		if strings.Contains(msg, s) {
			return ClassTransient
		}
	}
	return ClassInvalid
}

// outageWords mark a 503 as the service being down rather than the request
// being refused.
var outageWords = []string{"unavailable", "upstream", "timeout", "timed out", "try again", "retry", "maintenance",
	"overload", "temporar", "connect", "reset", "no healthy", "internal", "gateway", "busy", "capacity", "later",
	"<html", "<!doctype"}

// refusal reports whether a 503's message refuses the request itself. The
// recorded refusal ("cloud-init is not supported on this offer") is a
// specific sentence; an outage says nothing (empty body, the status line) or
// says it is unavailable. A wrong call either way stays bounded: a refusal
// taken for an outage is retried MaxAttempts times, an outage taken for a
// refusal fails the call at once with the API's own words.
func refusal(code int, msg string) bool {
	msg = strings.TrimSpace(msg)
	status := strings.ToLower(http.StatusText(code))
	if msg == "" || msg == status || msg == strings.ToLower(fmt.Sprintf("%d %s", code, http.StatusText(code))) {
		return false
	}
	for _, w := range outageWords {
		if strings.Contains(msg, w) {
			return false
		}
	}
	return true
}

func isNetworkError(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &op) || errors.As(err, &dns) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// IsNotFound reports whether the resource does not exist (typed ResourceNotFound, or the
// untyped 404 {"message":"Not Found"} the API returns once a server is gone).
func IsNotFound(err error) bool { return Classify(err) == ClassNotFound }

// IsOutOfStock reports whether the offer cannot be delivered now; try another offering.
func IsOutOfStock(err error) bool { return Classify(err) == ClassOutOfStock }

// IsQuotaExceeded reports whether the organization's quota forbids another server.
func IsQuotaExceeded(err error) bool { return Classify(err) == ClassQuota }

// IsTransientState reports whether the resource is busy (being delivered, rebooted,
// locked); the same request may succeed once its state settles.
func IsTransientState(err error) bool { return Classify(err) == ClassTransient }

// IsPermissionDenied reports whether the credentials are valid but lack a permission.
func IsPermissionDenied(err error) bool { return Classify(err) == ClassPermission }

// IsUnauthorized reports whether the credentials are missing, wrong or expired.
func IsUnauthorized(err error) bool { return Classify(err) == ClassUnauthorized }

// IsRefused reports whether the API refused the request itself (a 503 with a specific
// message); retrying the same request cannot succeed.
func IsRefused(err error) bool { return Classify(err) == ClassRefused }

// IsOrderRefused reports whether a definite refusal of an order that is neither out of
// stock nor quota, and that retrying the same order cannot fix: a refusal
// answered 503, a 4xx the API does not type (e.g. a 412 without a body, as
// an unrecorded out-of-stock answer could be), or the offer unknown in the
// zone (offers come and go). Credentials and permission errors, throttling,
// 5xx outages and transient states are not refusals of the order.
func IsOrderRefused(err error) bool {
	switch Classify(err) {
	case ClassRefused, ClassInvalid, ClassNotFound:
		return true
	}
	return false
}

// IsPrecondition reports whether the API answered 412 (typed precondition_failed, or any
// untyped 412 that is not out of stock): the resource is not in the state
// the request needs, e.g. a private network attached before the server's
// Private Network option is enabled.
func IsPrecondition(err error) bool {
	var preV scw.PreconditionFailedError
	var preP *scw.PreconditionFailedError
	if errors.As(err, &preV) || errors.As(err, &preP) {
		return true
	}
	if Classify(err) == ClassOutOfStock {
		return false
	}
	return statusOf(err) == http.StatusPreconditionFailed
}

// statusOf is the HTTP status of an error answer, 0 for other failures.
func statusOf(err error) int {
	var resp *scw.ResponseError
	var httpErr *HTTPError
	switch {
	case errors.As(err, &resp):
		return resp.StatusCode
	case errors.As(err, &httpErr):
		return httpErr.StatusCode
	}
	return 0
}

// IsRetryable reports whether the failure is transport-level or server-side (5xx, 429,
// timeouts, network) and the same request may succeed later. Business errors
// (4xx) are not retryable.
func IsRetryable(err error) bool { return isRetryableClass(Classify(err)) }

// IsAmbiguous reports whether a non-idempotent call failed after an attempt that may have
// been applied by the API; reconcile by reading state before acting again.
func IsAmbiguous(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Ambiguous
}

func isRetryableClass(c Class) bool {
	switch c {
	case ClassThrottled, ClassServerError, ClassTimeout, ClassNetwork:
		return true
	}
	return false
}

// mayHaveApplied reports whether a failed attempt of a call that changes
// state may have been applied by the API. Only two kinds of failure prove
// it was not: nothing was sent (requests is the attempt's HTTP requests
// that got past the client-side rate limiter; notSent), or the API answered
// with a refusal, a 4xx other than 429 (not sent) and 408 (a timeout).
// Everything else after the request left is ambiguous, whatever its class:
// a 5xx (also a 503 whose words refuse), a timeout, a reset connection, an
// HTTP/2 RST_STREAM or GOAWAY, a success whose body could not be decoded,
// the caller's context ending while the request was out.
func mayHaveApplied(err error, requests, status int) bool {
	if err == nil || requests == 0 || notSent(err) {
		return false
	}
	if status >= 400 && status <= 499 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests {
		return false
	}
	return true
}

// notSent reports whether a failure proves the API never acted on the
// request: it was throttled (429), the client-side rate limit gave no token
// in time, or the connection was refused before anything was sent.
func notSent(err error) bool {
	var rw *rateWaitError
	if errors.As(err, &rw) {
		return true
	}
	var r *scw.ResponseError
	if errors.As(err, &r) && r.StatusCode == http.StatusTooManyRequests {
		return true
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return false
}
