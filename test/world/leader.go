package world

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
)

// APICall is one Scaleway API call a controller process sent (RecordAPICalls).
type APICall struct {
	At     time.Time
	Method string
	Path   string
	// Status is the answer's HTTP status; 0 when none reached the process.
	Status int
	// Start is the process start (1 = first) that sent it.
	Start int
}

// Write reports whether the call asks the API to change something (any
// method but GET and HEAD).
func (a APICall) Write() bool { return a.Method != http.MethodGet && a.Method != http.MethodHead }

func (a APICall) String() string {
	return fmt.Sprintf("%s %s %s -> %d (start #%d)", a.At.UTC().Format("15:04:05.000"), a.Method, a.Path, a.Status, a.Start)
}

// apiRecorder is a reverse proxy in front of the simulator for one
// controller: the simulator cannot tell two processes apart (same key, same
// address), the proxy can.
type apiRecorder struct {
	url  string
	srv  *http.Server
	mu   sync.Mutex
	log  []APICall
	curr func() int
	hold func(APICall) bool
	held chan APICall
}

func newAPIRecorder(target string) (*apiRecorder, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &apiRecorder{url: "http://" + l.Addr().String()}
	proxy := httputil.NewSingleHostReverseProxy(u)
	// A connection the simulator drops (a lost-answer fault) is dropped
	// here too, instead of becoming a 502 the SDK would read as an answer.
	proxy.ErrorHandler = func(http.ResponseWriter, *http.Request, error) { panic(http.ErrAbortHandler) }
	r.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		call := APICall{At: time.Now(), Method: req.Method, Path: req.URL.Path, Start: r.start()}
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			call.Status = sw.status
			r.mu.Lock()
			r.log = append(r.log, call)
			r.mu.Unlock()
		}()
		r.mu.Lock()
		hold, held := r.hold, r.held
		r.mu.Unlock()
		if hold == nil || !hold(call) {
			proxy.ServeHTTP(sw, req)
			return
		}
		// The API acts on the request; its answer stays here until the
		// process gives up on it (it was killed, or its timeout ran out).
		answer := httptest.NewRecorder()
		proxy.ServeHTTP(answer, req)
		call.Status = answer.Code
		select {
		case held <- call:
		default:
		}
		<-req.Context().Done()
		panic(http.ErrAbortHandler)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(l) }()
	return r, nil
}

func (r *apiRecorder) start() int {
	r.mu.Lock()
	f := r.curr
	r.mu.Unlock()
	if f == nil {
		return 0
	}
	return f()
}

func (r *apiRecorder) calls() []APICall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]APICall(nil), r.log...)
}

func (r *apiRecorder) close() error { return r.srv.Close() }

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush lets streamed answers through.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// APICalls are the Scaleway API calls this controller sent, over all its
// starts, oldest first (nil without RecordAPICalls).
func (c *Controller) APICalls() []APICall {
	if c.proxy == nil {
		return nil
	}
	return c.proxy.calls()
}

// HoldAnswers makes the proxy (RecordAPICalls) pass each call for which
// hold is true to the API, then keep its answer from the process until
// the process gives up on it: the API acted, the process never learns it
// did (kill it meanwhile to lose the answer for good). Each held call is
// sent on the returned channel (buffered; calls beyond its room are held
// unannounced). nil stops holding new calls.
func (c *Controller) HoldAnswers(hold func(APICall) bool) <-chan APICall {
	if c.proxy == nil {
		panic("world: HoldAnswers needs ControllerOptions.RecordAPICalls")
	}
	ch := make(chan APICall, 16)
	c.proxy.mu.Lock()
	c.proxy.hold, c.proxy.held = hold, ch
	c.proxy.mu.Unlock()
	return ch
}

// Starts is how many times the process was started (1 after NewController).
func (c *Controller) Starts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.starts
}

// Leading reports whether the current process has acquired the leader
// election Lease, and when (the time of its log line "Successfully acquired
// lease"). A process without LeaderElection leads from its start.
func (c *Controller) Leading() (time.Time, bool) {
	c.mu.Lock()
	start, started, le := c.starts, c.started, c.opts.LeaderElection
	c.mu.Unlock()
	if !c.Running() {
		return time.Time{}, false
	}
	if !le {
		return started, true
	}
	f, err := os.Open(c.LogPath)
	if err != nil {
		return time.Time{}, false
	}
	defer f.Close()
	marker := fmt.Sprintf("=== world: start #%d ", start)
	current := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "=== world: start #") {
			current = strings.HasPrefix(line, marker)
			continue
		}
		if !current || !strings.Contains(line, "Successfully acquired lease") {
			continue
		}
		var rec struct {
			Time string `json:"time"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		// Karpenter's zap encoder: ISO 8601 with milliseconds.
		at, err := time.Parse("2006-01-02T15:04:05.000Z0700", rec.Time)
		if err != nil {
			continue
		}
		return at, true
	}
	return time.Time{}, false
}

// WaitLeading waits until the process leads and returns when it began.
func (c *Controller) WaitLeading(ctx context.Context, timeout time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if at, ok := c.Leading(); ok {
			return at, nil
		}
		if !c.Running() {
			return time.Time{}, fmt.Errorf("controller %s exited before leading: %w; log tail:\n%s", c.LogPath, c.ExitErr(), c.LogTail(40))
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("controller %s not leading: %w", c.LogPath, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// LeaseHolder is the holder identity of the leader election Lease ("" if
// none holds it or it does not exist).
func (w *World) LeaseHolder(ctx context.Context) (string, error) {
	var l coordinationv1.Lease
	err := w.Kube.Client.Get(ctx, types.NamespacedName{Namespace: w.SystemNamespace, Name: LeaseName}, &l)
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}
