package scaleway

import (
	"testing"
	"time"
)

// TestRetryDecision walks the retry policy of Client.call branch by branch,
// without a client, a server or a clock. draw always returns its largest
// value, so every wait is the top of its jitter range.
func TestRetryDecision(t *testing.T) {
	policy := RetryPolicy{MaxAttempts: 3, BaseBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, MaxRetryAfter: 4 * time.Second, ThrottleWait: 10 * time.Second}
	top := func(n int64) int64 { return n - 1 }
	read := retryRules{RetryPolicy: policy, idempotent: true, draw: top}
	write := retryRules{RetryPolicy: policy, idempotent: true, write: true, draw: top}
	order := retryRules{RetryPolicy: policy, draw: top}
	once := read
	once.MaxAttempts = 1
	const ms = time.Millisecond
	for _, tc := range []struct {
		name      string
		rules     retryRules
		budget    retryBudget
		outcome   outcome
		retry     bool
		wait      time.Duration
		ambiguous bool
		failures  int
		throttles int
		throttled time.Duration
	}{
		{name: "first 5xx of a read waits under the base", rules: read, outcome: outcome{class: ClassServerError}, retry: true, wait: 100*ms - 1, failures: 1},
		{name: "second 5xx doubles the cap", rules: read, budget: retryBudget{failures: 1}, outcome: outcome{class: ClassServerError}, retry: true, wait: 200*ms - 1, failures: 2},
		{name: "the cap stops at MaxBackoff", rules: retryRules{RetryPolicy: RetryPolicy{MaxAttempts: 20, BaseBackoff: 100 * ms, MaxBackoff: time.Second}, idempotent: true, draw: top}, budget: retryBudget{failures: 9}, outcome: outcome{class: ClassServerError}, retry: true, wait: time.Second - 1, failures: 10},
		{name: "MaxAttempts failures end the call", rules: read, budget: retryBudget{failures: 2}, outcome: outcome{class: ClassServerError}, failures: 3},
		{name: "MaxAttempts 1 never retries", rules: once, outcome: outcome{class: ClassTimeout}, failures: 1},
		{name: "a business error is not retried", rules: read, outcome: outcome{class: ClassInvalid}, failures: 1},
		{name: "the caller gave up", rules: read, outcome: outcome{class: ClassServerError, callerDone: true}, failures: 1},
		{name: "Retry-After is a floor plus jitter", rules: read, outcome: outcome{class: ClassServerError, retryAfter: 2 * time.Second}, retry: true, wait: 2*time.Second + 100*ms, failures: 1},
		{name: "Retry-After is capped", rules: read, outcome: outcome{class: ClassServerError, retryAfter: time.Minute}, retry: true, wait: 4*time.Second + 100*ms, failures: 1},
		{name: "a wait past the caller's deadline is not started", rules: read, outcome: outcome{class: ClassServerError, hasDeadline: true, untilDeadline: 50 * ms}, failures: 1},
		{name: "a wait within the caller's deadline is", rules: read, outcome: outcome{class: ClassServerError, hasDeadline: true, untilDeadline: 100 * ms}, retry: true, wait: 100*ms - 1, failures: 1},
		{name: "429s do not count against MaxAttempts", rules: read, budget: retryBudget{failures: 2, throttles: 7}, outcome: outcome{class: ClassThrottled}, retry: true, wait: time.Second - 1, failures: 2, throttles: 8, throttled: time.Second - 1},
		{name: "429 backoff is capped at ThrottleBackoffCap", rules: retryRules{RetryPolicy: RetryPolicy{MaxAttempts: 3, BaseBackoff: time.Second, MaxBackoff: time.Minute, ThrottleWait: time.Hour}, idempotent: true, draw: top}, budget: retryBudget{throttles: 9}, outcome: outcome{class: ClassThrottled}, retry: true, wait: ThrottleBackoffCap - 1, throttles: 10, throttled: ThrottleBackoffCap - 1},
		{name: "429s stop when the throttle budget is spent", rules: read, budget: retryBudget{throttles: 5, throttled: 9500 * ms}, outcome: outcome{class: ClassThrottled}, throttles: 6, throttled: 9500 * ms},
		{name: "a 429 within the budget is retried", rules: read, budget: retryBudget{throttles: 5, throttled: 9 * time.Second}, outcome: outcome{class: ClassThrottled}, retry: true, wait: time.Second - 1, throttles: 6, throttled: 10*time.Second - 1},
		{name: "a read that may have applied is not ambiguous", rules: read, outcome: outcome{class: ClassServerError, mayHaveApplied: true}, retry: true, wait: 100*ms - 1, failures: 1},
		{name: "a write that may have applied is retried, ambiguous", rules: write, outcome: outcome{class: ClassServerError, mayHaveApplied: true}, retry: true, wait: 100*ms - 1, ambiguous: true, failures: 1},
		{name: "an order that may have applied stops, ambiguous", rules: order, outcome: outcome{class: ClassServerError, mayHaveApplied: true}, ambiguous: true},
		{name: "an order refused by a 429 is retried", rules: order, outcome: outcome{class: ClassThrottled}, retry: true, wait: 100*ms - 1, throttles: 1, throttled: 100*ms - 1},
		{name: "ambiguity is kept once set", rules: write, budget: retryBudget{ambiguous: true, failures: 1}, outcome: outcome{class: ClassServerError}, retry: true, wait: 200*ms - 1, ambiguous: true, failures: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, retry, wait := tc.rules.decide(tc.budget, tc.outcome)
			if retry != tc.retry || wait != tc.wait {
				t.Errorf("decide = retry %v wait %v, want retry %v wait %v", retry, wait, tc.retry, tc.wait)
			}
			want := retryBudget{failures: tc.failures, throttles: tc.throttles, throttled: tc.throttled, ambiguous: tc.ambiguous}
			if b != want {
				t.Errorf("budget %+v, want %+v", b, want)
			}
		})
	}
}
