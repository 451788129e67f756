package scaleway

import (
	"context"
	"sync"
	"time"
)

// attemptTrace is how the transport tells one attempt of Client.call what
// happened to its HTTP requests: how many were sent, the status of the
// last answer, and the start of an error answer with its Retry-After. The
// SDK hands the transport nothing of the call but the request's context,
// so the trace travels there, in the way net/http/httptrace's ClientTrace
// does; withTrace and traceOf are its only two doors, and the loop reads it
// once, as an answers value, after the attempt ends.
//
// The SDK's errors drop response headers, and an error body it cannot
// decode loses the status too: that is why the loop needs the trace.
type attemptTrace struct {
	mu   sync.Mutex
	seen answers
}

// answers is what one attempt's requests met.
type answers struct {
	// requests counts the requests that got past the client-side rate
	// limiter (each page of a list is one).
	requests int
	// answered is the status of the last request's answer, 0 while it has
	// none (sent, or failed before an answer came).
	answered int
	// status and body are of the last error answer (body: its first
	// maxErrorBody bytes).
	status int
	body   string
	// retryAfter is the last Retry-After of a 429 or 503, 0 when none.
	retryAfter time.Duration
}

type traceKey struct{}

// withTrace returns a context carrying a new trace, and the trace.
func withTrace(ctx context.Context) (context.Context, *attemptTrace) {
	tr := &attemptTrace{}
	return context.WithValue(ctx, traceKey{}, tr), tr
}

// traceOf returns the trace ctx carries, nil when none.
func traceOf(ctx context.Context) *attemptTrace {
	tr, _ := ctx.Value(traceKey{}).(*attemptTrace)
	return tr
}

// sent notes a request leaving.
func (t *attemptTrace) sent() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seen.requests++
	t.seen.answered = 0
}

// answered notes the status of an answer.
func (t *attemptTrace) answered(status int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seen.answered = status
}

// refused notes an error answer and the start of its body.
func (t *attemptTrace) refused(status int, body string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seen.status, t.seen.body = status, body
}

// askedToWait notes an error answer's Retry-After.
func (t *attemptTrace) askedToWait(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seen.retryAfter = d
}

// answers returns what the trace saw so far.
func (t *attemptTrace) answers() answers {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.seen
}
