package scwsim

import (
	"fmt"
	"net/http"
)

// Behaviours where the real API varies between recordings, or where no
// public recording shows it at all. Each is one named switch in Options; the
// zero value is the most realistic choice (what the recordings show most, or
// the least kind plausible answer), so that a test must opt out of reality,
// never into it.

// ReadyIPsMode says whether a delivered server lists its public IPs when it
// turns "ready".
type ReadyIPsMode string

const (
	// ReadyIPsRecorded (default): as recorded. An order seen "ordered" lists
	// its IPs from the next read on (10 of the 14 recorded orders that went
	// through "ordered" did so while still ordered); an order answered
	// "delivering" lists none while delivering, and ReadyWithoutIPsRate of
	// them (2 of the 11 recorded orders without install) reach "ready" with
	// ips: [] and domain "", the IPs appearing Delays.IPsAfterReady later.
	// The draw uses the seeded generator (Options.Seed).
	ReadyIPsRecorded ReadyIPsMode = "recorded"
	// ReadyIPsAtReady: every delivery lists its IPs exactly at "ready".
	ReadyIPsAtReady ReadyIPsMode = "at-ready"
	// ReadyIPsLate: every delivery reaches "ready" with ips: [] (IPs listed
	// while ordered are hidden again), and the IPs appear
	// Delays.IPsAfterReady later.
	ReadyIPsLate ReadyIPsMode = "late"
	// ReadyIPsNever: IPs are never listed (a broken delivery).
	ReadyIPsNever ReadyIPsMode = "never"
)

// ReadyWithoutIPsRate is the recorded share of deliveries that reach
// "ready" without IPs under ReadyIPsRecorded: 2 of 11.
const ReadyWithoutIPsRate = 2.0 / 11.0

// AttachMode says when the v3 API accepts attaching a private network.
type AttachMode string

const (
	// AttachWhileEnabling (default): as recorded, attaching is accepted as
	// soon as the Private Network option was added, while it is still
	// "option_status_enabling".
	AttachWhileEnabling AttachMode = "while-enabling"
	// AttachOnceEnabled: attaching answers 412 precondition_failed until the
	// option is "option_status_enable" (not recorded: a stricter API).
	AttachOnceEnabled AttachMode = "once-enabled"
)

// RateLimitedAnswer says how a throttled request (Options.RateLimit or a
// FaultRateLimit) is answered.
type RateLimitedAnswer string

const (
	// RateLimitedBare (default): as recorded from Scaleway's API gateway: 429
	// with no body, no Content-Type and no Retry-After, only the header
	// X-Envoy-Ratelimited: true.
	RateLimitedBare RateLimitedAnswer = "bare"
	// RateLimitedJSON: 429 with {"message":...,"type":"too_many_requests"}
	// and a Retry-After header (Fault.RetryAfter, or until a token is free).
	RateLimitedJSON RateLimitedAnswer = "json"
)

// UnrecordedShape says how the answers that no public recording shows are
// shaped: the out_of_stock and quotas_exceeded refusals of an order, the
// precondition_failed of a private network attach and the transient_state
// of an action on a busy server. Each is a guess; a provider must degrade
// to a clear retry-then-fail under every shape, never loop or leak.
type UnrecordedShape string

const (
	// UnrecordedTyped (default): the SDK's typed errors (scw/errors.go) with
	// the status codes Scaleway documents for them: out_of_stock 412,
	// quotas_exceeded 403, precondition_failed 412, transient_state 409. A
	// rescue reboot behaves like a normal one.
	UnrecordedTyped UnrecordedShape = "typed"
	// UnrecordedMessage: the same status with only {"message": "..."}, the
	// shape most recorded Elastic Metal refusals have.
	UnrecordedMessage UnrecordedShape = "message"
	// UnrecordedEmpty: the same status, no body and no Content-Type.
	UnrecordedEmpty UnrecordedShape = "empty"
	// UnrecordedText: the same status with a text/plain message.
	UnrecordedText UnrecordedShape = "text"
)

// RescueUserMode is the user a rescue boot shows in rescue_server.user (and
// lets in over SSH). No recording shows a server in rescue (every recorded
// rescue_server is null) and public accounts differ by zone; the password
// is new at each rescue boot either way.
type RescueUserMode string

const (
	// RescueUserShared (default): "rescue" on every server, the user the
	// "use rescue mode" documentation logs in as with a key.
	RescueUserShared RescueUserMode = "shared"
	// RescueUserPerServer: a user of the server's own, em-XXXXX (five
	// lowercase letters and digits), as a public provisioning script for
	// Elastic Metal reports in some zones; its sudo wants the password.
	RescueUserPerServer RescueUserMode = "per-server"
)

// Under every shape but UnrecordedTyped, a reboot also shows late: its
// answer and the reads for Delays.RebootStop keep the status "ready" (with
// the new boot_type) instead of "stopping", then "starting" follows. How
// fast the API shows a reboot it accepted is another unrecorded guess.

func (o Options) validateVariants() error {
	for _, v := range []struct {
		field, value string
		allowed      []string
	}{
		{"ReadyIPs", string(o.ReadyIPs), []string{"", string(ReadyIPsRecorded), string(ReadyIPsAtReady), string(ReadyIPsLate), string(ReadyIPsNever)}},
		{"PrivateNetworkAttach", string(o.PrivateNetworkAttach), []string{"", string(AttachWhileEnabling), string(AttachOnceEnabled)}},
		{"RateLimited", string(o.RateLimited), []string{"", string(RateLimitedBare), string(RateLimitedJSON)}},
		{"Unrecorded", string(o.Unrecorded), []string{"", string(UnrecordedTyped), string(UnrecordedMessage), string(UnrecordedEmpty), string(UnrecordedText)}},
		{"RescueUser", string(o.RescueUser), []string{"", string(RescueUserShared), string(RescueUserPerServer)}},
	} {
		ok := false
		for _, a := range v.allowed {
			ok = ok || v.value == a
		}
		if !ok {
			return fmt.Errorf("scwsim: Options.%s: %q is not one of %q", v.field, v.value, v.allowed[1:])
		}
	}
	return nil
}

func (o Options) variantDefaults() Options {
	if o.ReadyIPs == "" {
		o.ReadyIPs = ReadyIPsRecorded
	}
	if o.PrivateNetworkAttach == "" {
		o.PrivateNetworkAttach = AttachWhileEnabling
	}
	if o.RateLimited == "" {
		o.RateLimited = RateLimitedBare
	}
	if o.Unrecorded == "" {
		o.Unrecorded = UnrecordedTyped
	}
	if o.RescueUser == "" {
		o.RescueUser = RescueUserShared
	}
	return o
}

// writeThrottled answers a throttled request. retryAfter is used by the
// JSON shape only.
func (s *Sim) writeThrottled(w http.ResponseWriter, retryAfter string) {
	if s.opts.RateLimited == RateLimitedBare {
		w.Header().Set("X-Envoy-Ratelimited", "true")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	w.Header().Set("Retry-After", retryAfter)
	writeJSON(w, http.StatusTooManyRequests, map[string]string{"message": "rate limit exceeded, retry later",
		"type": "too_many_requests"})
}

// writeAPIError writes e, reshaped by Options.Unrecorded when no recording
// shows its real shape.
func (s *Sim) writeAPIError(w http.ResponseWriter, e *apiError) {
	if !e.unrecorded || s.opts.Unrecorded == UnrecordedTyped {
		writeErr(w, e)
		return
	}
	msg := ""
	switch b := e.body.(type) {
	case map[string]string:
		msg = b["message"]
	case map[string]any:
		msg, _ = b["message"].(string)
	}
	switch s.opts.Unrecorded {
	case UnrecordedMessage:
		writeJSON(w, e.status, map[string]string{"message": msg})
	case UnrecordedEmpty:
		w.WriteHeader(e.status)
	case UnrecordedText:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(e.status)
		_, _ = w.Write([]byte(msg + "\n"))
	}
}
