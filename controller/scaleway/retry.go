package scaleway

import "time"

// The retry policy of Client.call, kept apart from the loop that applies it
// so that every branch can be read in one place and tested with a table.

// retryRules is the retry policy of one call: the configured RetryPolicy
// (MaxAttempts already resolved for the call) and what kind of call it is.
type retryRules struct {
	RetryPolicy
	// idempotent and write are the callSpec fields of the same name.
	idempotent bool
	write      bool
	// draw returns a uniform random number in [0, n). It is the only source
	// of randomness in the decision, so tests pass a fixed one.
	draw func(n int64) int64
}

// retryBudget is what a call has spent so far. The loop carries it from one
// attempt to the next; decide returns the updated copy.
type retryBudget struct {
	// failures counts failed attempts other than 429s (bounded by MaxAttempts).
	failures int
	// throttles counts 429s, which are bounded by ThrottleWait instead.
	throttles int
	// throttled is the time waited on 429s so far.
	throttled time.Duration
	// ambiguous is set once an attempt that changes state may have been
	// applied (Error.Ambiguous).
	ambiguous bool
}

// outcome is what the retry decision needs to know of a failed attempt.
type outcome struct {
	class Class
	// mayHaveApplied is mayHaveApplied's answer for the attempt.
	mayHaveApplied bool
	// retryAfter is the server's Retry-After, 0 when it sent none.
	retryAfter time.Duration
	// callerDone is set when the caller's context has ended.
	callerDone bool
	// untilDeadline is the time left before the caller's deadline, when
	// hasDeadline is set: a wait that would end past it is not started.
	untilDeadline time.Duration
	hasDeadline   bool
}

// decide says whether to try again after a failed attempt, and how long to
// wait first. It is a pure function of the policy, the budget spent and the
// attempt's outcome (plus rules.draw for the jitter).
func (r retryRules) decide(b retryBudget, o outcome) (next retryBudget, retry bool, wait time.Duration) {
	b, stop := r.noteApplied(b, o)
	if stop {
		return b, false, 0
	}
	if o.class == ClassThrottled {
		b.throttles++
	} else {
		b.failures++
	}
	if o.callerDone || !isRetryableClass(o.class) || r.MaxAttempts <= 1 || b.failures >= r.MaxAttempts {
		return b, false, 0
	}
	if o.class == ClassThrottled {
		// 429s do not count against MaxAttempts: they prove nothing was
		// applied. They are ridden out until ThrottleWait is spent.
		wait = r.throttleBackoff(b.throttles, o.retryAfter)
		if b.throttled+wait > r.ThrottleWait {
			return b, false, 0
		}
		b.throttled += wait
	} else {
		wait = r.backoff(b.failures, o.retryAfter)
	}
	if o.hasDeadline && wait > o.untilDeadline {
		return b, false, 0
	}
	return b, true, wait
}

// noteApplied marks the budget ambiguous when an attempt of a call that
// changes state may have been applied. A call that is not idempotent then
// stops: repeating it blindly could apply it twice, so the caller reads
// state first.
func (r retryRules) noteApplied(b retryBudget, o outcome) (retryBudget, bool) {
	if !o.mayHaveApplied || (r.idempotent && !r.write) {
		return b, false
	}
	b.ambiguous = true
	return b, !r.idempotent
}

// backoff is "full jitter": uniform in [0, min(max, base*2^(attempt-1))).
// A server-sent Retry-After (capped at MaxRetryAfter) is a floor, plus a
// little jitter so a fleet of callers does not come back in lockstep.
func (r retryRules) backoff(attempt int, retryAfter time.Duration) time.Duration {
	return r.jitter(attempt, retryAfter, r.MaxBackoff)
}

// throttleBackoff is backoff for 429s, capped lower (ThrottleBackoffCap):
// Scaleway's 429s carry no Retry-After, and its limits refill within
// seconds, so long waits would only slow the ride through a storm.
func (r retryRules) throttleBackoff(n int, retryAfter time.Duration) time.Duration {
	return r.jitter(n, retryAfter, min(r.MaxBackoff, ThrottleBackoffCap))
}

// ThrottleBackoffCap caps the wait before retrying a 429 without Retry-After.
const ThrottleBackoffCap = 5 * time.Second

func (r retryRules) jitter(attempt int, retryAfter, maxWait time.Duration) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, r.MaxRetryAfter) + time.Duration(r.draw(int64(r.BaseBackoff)+1))
	}
	ceil := r.BaseBackoff
	for i := 1; i < attempt && ceil < maxWait; i++ {
		ceil *= 2
	}
	ceil = min(ceil, maxWait)
	if ceil <= 0 {
		return 0
	}
	return time.Duration(r.draw(int64(ceil)))
}
