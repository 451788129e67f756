package scwsim

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Sim is a simulated Scaleway API (baremetal v1 and v3, IAM SSH keys). All
// methods are safe for concurrent use.
type Sim struct {
	opts   Options
	ctx    context.Context
	cancel context.CancelFunc
	mux    *http.ServeMux

	mu        sync.Mutex
	zones     map[string]*zoneCatalog
	servers   map[string]*server // every server not yet gone
	gone      map[string]bool    // deleted servers: untyped 404
	history   map[string][]string
	changes   map[string][]Transition // history with times, and IPs listed
	order     int                     // creation counter, for created_at ordering
	ipSeq     int                     // loopback IPv4 allocator, never reused
	stock     map[string]int          // "zone/OFFER-NAME"
	quotas    map[string]int          // "project/OFFER-NAME" or "OFFER-NAME"
	keys      map[string]*sshKey
	keyOrder  int
	pns       map[string]*pnAttachment // v3 attachments by ID
	faults    []*faultEntry
	faultByID map[FaultID]*faultEntry
	faultSeq  int
	calls     []Call
	ledger    []LedgerEntry              // committed changes, for money invariants (ledger.go)
	versions  map[string]*serverVersions // past views of servers, for stale reads (stale.go)
	timers    map[*time.Timer]struct{}
	rng       *rand.Rand // jitter
	// rescuePasswords: every one handed out (RescuePasswords).
	rescuePasswords []string
	tokens          float64   // rate limit bucket
	tokensAt        time.Time // last refill
	closed          bool
	hostWG          sync.WaitGroup

	srv *http.Server
}

// Call is one request the simulator answered.
type Call struct {
	Method string
	Path   string
	Query  string // raw query string
	Status int    // 0 when a timeout fault held it until the client gave up
	At     time.Time
	// Duration: until the answer was written (or the client gave up).
	Duration time.Duration
	// Fault is the kind of request fault that answered it, if any.
	Fault FaultKind
	// ServerID: the server the call was about (created, read or acted on).
	ServerID string
	// Tags: the tags of a CreateServer request.
	Tags []string
}

// New builds a simulator. It panics when Options are invalid (see
// Options.Validate, which callers taking user input should call first).
func New(opts Options) *Sim {
	if err := opts.Validate(); err != nil {
		panic(err)
	}
	opts = opts.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sim{opts: opts, ctx: ctx, cancel: cancel, zones: map[string]*zoneCatalog{},
		servers: map[string]*server{}, gone: map[string]bool{}, history: map[string][]string{}, changes: map[string][]Transition{}, versions: map[string]*serverVersions{}, stock: map[string]int{}, quotas: map[string]int{},
		keys: map[string]*sshKey{}, pns: map[string]*pnAttachment{}, faultByID: map[FaultID]*faultEntry{},
		timers: map[*time.Timer]struct{}{}, rng: rand.New(rand.NewPCG(opts.Seed, opts.Seed))}
	for _, z := range opts.Zones {
		zc := zoneCatalogFor(z)
		s.zones[z] = zc
		s.seedStock(zc)
	}
	for k, n := range opts.Stock {
		zone, name, _ := splitKey(k, "zone", zoneRE)
		for _, z := range opts.Zones {
			if zone == "" || zone == z {
				s.stock[z+"/"+name] = n
			}
		}
	}
	for k, n := range opts.Quotas {
		s.quotas[k] = n
	}
	s.mux = s.routes()
	return s
}

// seedStock sets each offer's stock in the zone from what the recording
// saw: plenty when available, a few when low, none otherwise. An offer
// sold monthly and hourly shares one count, seeded by the hourly offer.
func (s *Sim) seedStock(zc *zoneCatalog) {
	for _, o := range zc.offers {
		key := zc.zone + "/" + o.Name
		if _, set := s.stock[key]; set && o.Period != "hourly" {
			continue // the hourly offer's recorded stock seeds the shared count
		}
		switch o.RecordedStock {
		case "available":
			s.stock[key] = s.opts.PlentyStock
		case "low":
			s.stock[key] = s.opts.LowStock
		default:
			s.stock[key] = 0
		}
	}
}

// Options returns the effective options (defaults filled in).
func (s *Sim) Options() Options {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts
}

// SetHost binds the Host that plays the machines, for worlds that build it
// after the simulator; later state edges call it. Nil unbinds.
func (s *Sim) SetHost(h Host) {
	if h == nil {
		h = noHost{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.Host = h
}

// throttled takes a rate-limit token; when none is left it returns how long
// until one is. Caller holds mu.
func (s *Sim) throttled(now time.Time) (time.Duration, bool) {
	if s.opts.RateLimit <= 0 {
		return 0, false
	}
	burst := float64(s.opts.RateBurst)
	if s.tokensAt.IsZero() {
		s.tokens = burst
	} else {
		s.tokens = min(burst, s.tokens+now.Sub(s.tokensAt).Seconds()*s.opts.RateLimit)
	}
	s.tokensAt = now
	if s.tokens >= 1 {
		s.tokens--
		return 0, false
	}
	return time.Duration((1 - s.tokens) / s.opts.RateLimit * float64(time.Second)), true
}

// SecretKey is the X-Auth-Token clients must send.
func (s *Sim) SecretKey() string { return s.opts.SecretKey }

// Handler serves the API (for httptest.NewServer or an embedding server).
func (s *Sim) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// Start listens on Options.Addr and serves in the background; it returns the
// base URL to give scw.WithAPIURL.
func (s *Sim) Start() (string, error) {
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return "", fmt.Errorf("scwsim: listen on %s: %w", s.opts.Addr, err)
	}
	s.mu.Lock()
	if s.srv != nil || s.closed {
		s.mu.Unlock()
		ln.Close()
		return "", errors.New("scwsim: Start called twice or after Close")
	}
	// HTTP/1.1 and HTTP/2 without TLS (prior knowledge): the real API is
	// reached over HTTP/2, whose failures (a reset stream) differ from
	// HTTP/1.1's; a client picks by its transport's Protocols.
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, Protocols: protocols}
	srv := s.srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), nil
}

// Close stops serving, cancels pending phases and hung requests, and waits
// for queued Host calls to finish.
func (s *Sim) Close() {
	s.cancel()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	srv := s.srv
	for t := range s.timers {
		t.Stop()
	}
	s.timers = nil
	for _, sv := range s.servers {
		sv.host.close()
	}
	s.mu.Unlock()
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(ctx)
		cancel()
		_ = srv.Close()
	}
	s.hostWG.Wait()
}

// statusRecorder captures what a handler answered, for the call record.
type statusRecorder struct {
	http.ResponseWriter
	status   int
	serverID string
	tags     []string
	// onStatus runs once, when the status is decided and before it reaches
	// the client: a client that has its answer always finds the call in Calls().
	onStatus func()
}

func (r *statusRecorder) decide(code int) {
	if r.status == 0 {
		r.status = code
		if r.onStatus != nil {
			r.onStatus()
		}
	}
}

func (r *statusRecorder) WriteHeader(code int) {
	r.decide(code)
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.decide(http.StatusOK)
	return r.ResponseWriter.Write(b)
}

func (s *Sim) serveHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &statusRecorder{ResponseWriter: w}
	call := Call{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, At: time.Now()}
	recorded := false
	record := func() {
		recorded = true
		call.Status, call.ServerID, call.Tags = rec.status, rec.serverID, rec.tags
		call.Duration = time.Since(call.At)
		s.mu.Lock()
		s.calls = append(s.calls, call)
		s.mu.Unlock()
	}
	rec.onStatus = record
	defer func() {
		if !recorded { // no answer at all (a dropped connection)
			record()
		}
	}()

	s.mu.Lock()
	closed := s.closed
	f := s.requestFault(r)
	wait, throttled := s.throttled(call.At)
	s.mu.Unlock()
	if closed { // an embedding server outlived Close
		writeErr(rec, errMessage(http.StatusServiceUnavailable, "simulator closed"))
		return
	}
	if f == nil && throttled {
		f = &Fault{Kind: FaultRateLimit, RetryAfter: wait}
	}
	if f != nil {
		call.Fault = f.Kind
		if s.applyRequestFault(rec, r, f) {
			return
		}
	}
	if f != nil && f.afterCommit() {
		// The API acts and answers into held; the fault decides what, if
		// anything, reaches the client. The call record keeps the real answer.
		held := httptest.NewRecorder()
		rec.ResponseWriter = held
		defer s.loseAnswer(w, r, f, held)
	}
	token := r.Header.Get("X-Auth-Token")
	switch {
	case token == "":
		writeErr(rec, errAuth("invalid_argument"))
		return
	case subtle.ConstantTimeCompare([]byte(token), []byte(s.opts.SecretKey)) != 1:
		writeErr(rec, errAuth("not_found"))
		return
	}
	s.mux.ServeHTTP(rec, r)
}

// handle adapts an API handler: it returns a body (200) or an error.
type apiFunc func(rec *statusRecorder, r *http.Request) (any, *apiError)

func (s *Sim) routes() *http.ServeMux {
	mux := http.NewServeMux()
	h := func(pattern string, fn apiFunc) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			rec := w.(*statusRecorder)
			if z := r.PathValue("zone"); z != "" {
				if _, ok := s.zones[z]; !ok {
					writeErr(rec, errGone())
					return
				}
			}
			body, err := fn(rec, r)
			if r.Method != http.MethodGet {
				s.mu.Lock()
				s.snapAll() // a write is a new version (stale.go)
				s.mu.Unlock()
			}
			switch {
			case err != nil:
				s.writeAPIError(rec, err)
			case body == nil:
				rec.WriteHeader(http.StatusNoContent)
			default:
				writeJSON(rec, http.StatusOK, body)
			}
		})
	}
	const v1 = "/baremetal/v1/zones/{zone}"
	h("GET "+v1+"/offers", s.listOffers)
	h("GET "+v1+"/offers/{id}", s.getOffer)
	h("GET "+v1+"/options", s.listOptions)
	h("GET "+v1+"/options/{id}", s.getOption)
	h("GET "+v1+"/os", s.listOS)
	h("GET "+v1+"/os/{id}", s.getOS)
	h("GET "+v1+"/servers", s.listServers)
	h("POST "+v1+"/servers", s.createServer)
	h("GET "+v1+"/servers/{id}", s.getServer)
	h("PATCH "+v1+"/servers/{id}", s.updateServer)
	h("DELETE "+v1+"/servers/{id}", s.deleteServer)
	h("POST "+v1+"/servers/{id}/reboot", s.rebootServer)
	h("POST "+v1+"/servers/{id}/start", s.startServer)
	h("POST "+v1+"/servers/{id}/stop", s.stopServer)
	h("POST "+v1+"/servers/{id}/options/{option}", s.addOption)
	h("DELETE "+v1+"/servers/{id}/options/{option}", s.deleteOption)
	const v3 = "/baremetal/v3/zones/{zone}"
	h("GET "+v3+"/server-private-networks", s.listPNs)
	h("POST "+v3+"/servers/{id}/private-networks", s.addPN)
	h("PUT "+v3+"/servers/{id}/private-networks", s.setPNs)
	h("DELETE "+v3+"/servers/{id}/private-networks/{pn}", s.deletePN)
	const iam = "/iam/v1alpha1/ssh-keys"
	h("GET "+iam, s.listKeys)
	h("POST "+iam, s.createKey)
	h("GET "+iam+"/{id}", s.getKey)
	h("PATCH "+iam+"/{id}", s.updateKey)
	h("DELETE "+iam+"/{id}", s.deleteKey)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { writeErr(w, errGone()) })
	return mux
}

// Calls returns a copy of the call record, oldest first.
func (s *Sim) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Call, len(s.calls))
	copy(out, s.calls)
	return out
}

// ResetCalls forgets the call record.
func (s *Sim) ResetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = nil
}

// CountCalls counts recorded calls with this method ("" = any) whose path
// matches the regular expression pathRE ("" = any).
func (s *Sim) CountCalls(method, pathRE string) (int, error) {
	var re *regexp.Regexp
	if pathRE != "" {
		var err error
		if re, err = regexp.Compile(pathRE); err != nil {
			return 0, fmt.Errorf("scwsim: CountCalls: %w", err)
		}
	}
	n := 0
	for _, c := range s.Calls() {
		if (method == "" || c.Method == method) && (re == nil || re.MatchString(c.Path)) {
			n++
		}
	}
	return n, nil
}

// CreatesByTag counts accepted CreateServer calls (status 200) by the value
// of the tag "key=value" they carried, e.g. CreatesByTag("karpenter.sh/nodeclaim")
// -> {"default-abcde": 1}. A count above 1 is a duplicate order.
func (s *Sim) CreatesByTag(key string) map[string]int {
	out := map[string]int{}
	for _, c := range s.Calls() {
		if c.Method != http.MethodPost || c.Status != http.StatusOK || !isServersPath(c.Path) {
			continue
		}
		for _, t := range c.Tags {
			if v, ok := strings.CutPrefix(t, key+"="); ok {
				out[v]++
			}
		}
	}
	return out
}

// CallsForServer returns the recorded calls about one server.
func (s *Sim) CallsForServer(id string) []Call {
	var out []Call
	for _, c := range s.Calls() {
		if c.ServerID == id {
			out = append(out, c)
		}
	}
	return out
}

var serversPathRE = regexp.MustCompile(`^/baremetal/v1/zones/[^/]+/servers$`)

func isServersPath(p string) bool { return serversPathRE.MatchString(p) }

// after runs fn under mu after the scaled delay d, unless the simulator
// closes first. Caller holds mu.
func (s *Sim) after(d time.Duration, fn func()) {
	if s.closed {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(s.delay(d), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			return
		}
		delete(s.timers, t)
		fn()
		s.snapAll() // a timed transition is a new version (stale.go)
	})
	s.timers[t] = struct{}{}
}

// delay scales d and applies the jitter. Caller holds mu.
func (s *Sim) delay(d time.Duration) time.Duration {
	d = s.opts.scaled(d)
	if s.opts.Jitter > 0 {
		d = time.Duration(float64(d) * (1 + s.opts.Jitter*(2*s.rng.Float64()-1)))
	}
	return d
}

func (s *Sim) logf(format string, args ...any) { s.opts.Logf("scwsim: "+format, args...) }

// writeGatewayTimeout is what a load balancer answers when the backend's
// answer did not reach it in time (an HTML page, not the API's JSON).
func writeGatewayTimeout(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(http.StatusGatewayTimeout)
	_, _ = w.Write([]byte("<html><body><h1>504 Gateway Time-out</h1></body></html>"))
}
