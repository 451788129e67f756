package scwsim

import (
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"time"
)

// FaultKind says what an injected fault does.
type FaultKind string

const (
	// FaultStatus answers matching requests with Status (default 500) and
	// Body (default {"message":"<status text>"}, application/json).
	FaultStatus FaultKind = "status"
	// FaultRateLimit answers 429 as Options.RateLimited says: bare (no
	// body, no Retry-After: the default, as recorded) or JSON with a
	// Retry-After header (RetryAfter, default 1s, rounded up to whole seconds).
	FaultRateLimit FaultKind = "rate_limit"
	// FaultTimeout never answers: the request hangs until the client gives
	// up (or the simulator closes).
	FaultTimeout FaultKind = "timeout"
	// FaultDelay answers normally after Delay.
	FaultDelay FaultKind = "delay"
	// FaultAnswerLost lets the API act on the request (a POST creates its
	// server) and then loses the answer: the client gets a 504 from the
	// gateway, as when a load balancer times out on a request the backend
	// committed. The call record keeps what the API really answered.
	FaultAnswerLost FaultKind = "answer_lost"
	// FaultResetAfterCommit lets the API act on the request and then resets
	// the connection instead of answering: over HTTP/2 the stream is reset
	// (RST_STREAM, as a proxy that gives up on its backend does), over
	// HTTP/1.1 the TCP connection (RST). The client cannot tell whether the
	// request was applied.
	FaultResetAfterCommit FaultKind = "reset_after_commit"
	// FaultTimeoutAfterCommit lets the API act on the request and then holds
	// the answer until the client gives up (its request timeout), so the
	// answer never arrives in time.
	FaultTimeoutAfterCommit FaultKind = "timeout_after_commit"
	// FaultUndecodableAfterCommit lets the API act on the request and
	// answers its real 2xx status (a 204 becomes a 200, to carry a body)
	// with a body the SDK cannot decode: Body (default: the API's real
	// answer cut in half, so the JSON never closes) under ContentType
	// (default application/json). A real answer that is not a 2xx goes
	// through unchanged: only a success is garbled.
	FaultUndecodableAfterCommit FaultKind = "undecodable_after_commit"
	// FaultStuck keeps matching servers in State (e.g. "delivering",
	// "stopping") until the fault is removed; then they carry on.
	FaultStuck FaultKind = "stuck"
	// FaultServerError sends matching servers to status "error" when they
	// would leave State ("" = at their next transition); each server once,
	// so a reboot recovers it.
	FaultServerError FaultKind = "server_error"
)

// AfterCommitKinds are the request faults that let the API act and then
// lose its answer, one per shape a real network loses it in: a gateway's
// 504, a reset connection or stream, no answer before the client's timeout,
// and a 2xx body the client cannot decode.
var AfterCommitKinds = []FaultKind{FaultAnswerLost, FaultResetAfterCommit, FaultTimeoutAfterCommit, FaultUndecodableAfterCommit}

// Fault is one injected misbehaviour. Request faults (status, rate_limit,
// timeout, delay) match on Method and Path; server faults (stuck,
// server_error) match on ServerID, Tag and State.
type Fault struct {
	Kind FaultKind

	// Method matches the HTTP method ("" = any).
	Method string
	// Path is a regular expression searched in the URL path ("" = any),
	// e.g. `/servers$` or `/reboot$`.
	Path string
	// Status, Body, ContentType: the answer of a FaultStatus; Body and
	// ContentType also shape a FaultUndecodableAfterCommit's answer.
	Status      int
	Body        string
	ContentType string
	// RetryAfter: the Retry-After of a FaultRateLimit (RateLimitedJSON only).
	RetryAfter time.Duration
	// Delay: the extra latency of a FaultDelay.
	Delay time.Duration

	// ServerID selects one server ("" = any).
	ServerID string
	// Tag selects servers carrying this exact tag, e.g.
	// "karpenter.sh/nodeclaim=default-abcde" ("" = any).
	Tag string
	// State: the server state a stuck server stays in, or that an erroring
	// server fails from.
	State string

	// Times: how many requests (request faults) or servers (server faults)
	// the fault hits; 0 = all until removed.
	Times int
}

// FaultID names an injected fault.
type FaultID int

type faultEntry struct {
	id        FaultID
	f         Fault
	re        *regexp.Regexp
	remaining int // -1: unlimited
	hits      int
	servers   map[string]bool // servers a server fault has taken
}

func (f Fault) isServerFault() bool { return f.Kind == FaultStuck || f.Kind == FaultServerError }

// afterCommit: the request reaches the API, which acts on it; only its
// answer is lost or spoilt.
func (f Fault) afterCommit() bool { return slices.Contains(AfterCommitKinds, f.Kind) }

var serverStates = []string{"delivering", "ready", "stopping", "stopped", "starting", "error", "deleting",
	"locked", "out_of_stock", "ordered", "resetting", "migrating"}

func (f Fault) validate() error {
	if err := f.validateKind(); err != nil {
		return err
	}
	if err := f.validateCounts(); err != nil {
		return err
	}
	return f.validateSelector()
}

// validateKind checks the fields a fault's kind requires.
func (f Fault) validateKind() error {
	switch f.Kind {
	case FaultStatus:
		if f.Status != 0 && (f.Status < 400 || f.Status > 599) {
			return fmt.Errorf("scwsim: Fault.Status: %d is not a 4xx or 5xx status", f.Status)
		}
	case FaultRateLimit, FaultTimeout, FaultServerError:
	case FaultDelay:
		if f.Delay <= 0 {
			return fmt.Errorf("scwsim: Fault.Delay: must be positive for a %s fault", f.Kind)
		}
	case FaultStuck:
		if f.State == "" {
			return fmt.Errorf("scwsim: Fault.State: required for a %s fault (e.g. delivering)", f.Kind)
		}
	default:
		if !f.afterCommit() {
			return fmt.Errorf("scwsim: Fault.Kind: unknown kind %q", f.Kind)
		}
	}
	return nil
}

// validateCounts checks the fields every kind shares.
func (f Fault) validateCounts() error {
	if f.State != "" && !slices.Contains(serverStates, f.State) {
		return fmt.Errorf("scwsim: Fault.State: %q is not a server status", f.State)
	}
	if f.Times < 0 {
		return fmt.Errorf("scwsim: Fault.Times: %d is negative", f.Times)
	}
	if f.RetryAfter < 0 {
		return fmt.Errorf("scwsim: Fault.RetryAfter: %v is negative", f.RetryAfter)
	}
	return nil
}

// validateSelector checks that a fault selects what its kind acts on: a
// server fault picks servers, a request fault picks requests.
func (f Fault) validateSelector() error {
	if f.isServerFault() && (f.Method != "" || f.Path != "") {
		return fmt.Errorf("scwsim: Fault.Method/Path: a %s fault selects servers (ServerID, Tag, State), not requests", f.Kind)
	}
	if !f.isServerFault() && (f.ServerID != "" || f.Tag != "" || f.State != "") {
		return fmt.Errorf("scwsim: Fault.ServerID/Tag/State: a %s fault selects requests (Method, Path), not servers", f.Kind)
	}
	return nil
}

// Inject adds a fault; it applies from the next request or transition.
func (s *Sim) Inject(f Fault) (FaultID, error) {
	if err := f.validate(); err != nil {
		return 0, err
	}
	e := &faultEntry{f: f, remaining: f.Times, servers: map[string]bool{}}
	if f.Times == 0 {
		e.remaining = -1
	}
	if f.Path != "" {
		re, err := regexp.Compile(f.Path)
		if err != nil {
			return 0, fmt.Errorf("scwsim: Fault.Path: %w", err)
		}
		e.re = re
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faultSeq++
	e.id = FaultID(s.faultSeq)
	s.faults = append(s.faults, e)
	s.faultByID[e.id] = e
	return e.id, nil
}

// MustInject is Inject for tests: it panics on an invalid fault.
func (s *Sim) MustInject(f Fault) FaultID {
	id, err := s.Inject(f)
	if err != nil {
		panic(err)
	}
	return id
}

// RemoveFault removes a fault; servers it kept stuck carry on.
func (s *Sim) RemoveFault(id FaultID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = slices.DeleteFunc(s.faults, func(e *faultEntry) bool { return e.id == id })
	s.resumeStuck()
}

// ClearFaults removes every fault.
func (s *Sim) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
	s.resumeStuck()
}

// FaultHits says how many requests or servers a fault has hit so far.
func (s *Sim) FaultHits(id FaultID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.faultByID[id]; e != nil {
		return e.hits
	}
	return 0
}

// requestFault takes the first request fault matching r, if any. Caller holds mu.
func (s *Sim) requestFault(r *http.Request) *Fault {
	for _, e := range s.faults {
		if e.f.isServerFault() || e.remaining == 0 {
			continue
		}
		if e.f.Method != "" && e.f.Method != r.Method {
			continue
		}
		if e.re != nil && !e.re.MatchString(r.URL.Path) {
			continue
		}
		e.hits++
		if e.remaining > 0 {
			e.remaining--
		}
		f := e.f
		return &f
	}
	return nil
}

// serverFault reports whether a server fault of kind applies to sv leaving
// state. A stuck fault keeps the servers it took until removed; an error
// fault takes each server once. Caller holds mu.
func (s *Sim) serverFault(sv *server, kind FaultKind, state string) bool {
	for _, e := range s.faults {
		if !e.selects(sv, kind, state) {
			continue
		}
		if e.servers[sv.id] {
			// A stuck server stays stuck; an erroring fault breaks a server
			// once, so a reboot can recover it.
			if kind == FaultStuck {
				return true
			}
			continue
		}
		if e.remaining == 0 {
			continue
		}
		e.servers[sv.id] = true
		e.hits++
		if e.remaining > 0 {
			e.remaining--
		}
		return true
	}
	return false
}

// selects reports whether the fault's kind and selector (ServerID, Tag,
// State) match sv leaving state; how many times it may still fire is the
// caller's question.
func (e *faultEntry) selects(sv *server, kind FaultKind, state string) bool {
	if e.f.Kind != kind {
		return false
	}
	if e.f.ServerID != "" && e.f.ServerID != sv.id {
		return false
	}
	if e.f.Tag != "" && !slices.Contains(sv.tags, e.f.Tag) {
		return false
	}
	return e.f.State == "" || e.f.State == state
}

func (s *Sim) applyRequestFault(w http.ResponseWriter, r *http.Request, f *Fault) (handled bool) {
	switch f.Kind {
	case FaultStatus:
		writeStatusFault(w, f)
		return true
	case FaultRateLimit:
		ra := f.RetryAfter
		if ra == 0 {
			ra = time.Second
		}
		secs := int((ra + time.Second - 1) / time.Second)
		s.writeThrottled(w, fmt.Sprint(secs))
		return true
	case FaultTimeout:
		select {
		case <-r.Context().Done():
		case <-s.ctx.Done():
		}
		// Drop the connection: returning would send an empty 200.
		panic(http.ErrAbortHandler)
	case FaultDelay:
		s.holdRequest(r, f.Delay)
	}
	return false
}

// writeStatusFault answers with the fault's status (500 when unset) and its
// body, or the API's JSON message for that status when the fault gives none.
func writeStatusFault(w http.ResponseWriter, f *Fault) {
	status := f.Status
	if status == 0 {
		status = http.StatusInternalServerError
	}
	body, ct := f.Body, f.ContentType
	if body == "" {
		body = string(mustRaw(map[string]string{"message": http.StatusText(status)}))
		if ct == "" {
			ct = "application/json"
		}
	}
	if ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// holdRequest holds the request for d, then lets it through; a client that gives
// up, or the simulator stopping, drops the connection instead.
func (s *Sim) holdRequest(r *http.Request, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		panic(http.ErrAbortHandler)
	case <-s.ctx.Done():
		panic(http.ErrAbortHandler)
	}
}

// loseAnswer gives the client, on w, what an after-commit fault makes of
// the API's answer held in held. It may end the handler with
// http.ErrAbortHandler (the server then drops the stream or connection).
func (s *Sim) loseAnswer(w http.ResponseWriter, r *http.Request, f *Fault, held *httptest.ResponseRecorder) {
	switch f.Kind {
	case FaultAnswerLost:
		writeGatewayTimeout(w)
	case FaultResetAfterCommit:
		resetConnection(w, r)
	case FaultTimeoutAfterCommit:
		select {
		case <-r.Context().Done():
		case <-s.ctx.Done():
		}
		// Drop the connection: returning would send an empty 200.
		panic(http.ErrAbortHandler)
	case FaultUndecodableAfterCommit:
		status := held.Code
		if status < 200 || status > 299 {
			maps.Copy(w.Header(), held.Header())
			w.WriteHeader(status)
			_, _ = w.Write(held.Body.Bytes())
			return
		}
		if status == http.StatusNoContent {
			status = http.StatusOK
		}
		body := []byte(f.Body)
		if f.Body == "" {
			real := held.Body.Bytes()
			body = real[:len(real)/2]
		}
		ct := f.ContentType
		if ct == "" {
			ct = "application/json"
		}
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}
}

// resetConnection ends the exchange without an answer, as abruptly as the
// protocol allows: an HTTP/2 stream is reset (the handler's abort sends
// RST_STREAM); an HTTP/1.1 connection is taken over and closed with no
// linger, which sends a TCP RST. A writer that cannot be taken over (an
// embedding server's wrapper) gets the abort, a plain close.
func resetConnection(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor >= 2 {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
