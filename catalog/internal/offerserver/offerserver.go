// Package offerserver is an HTTP server speaking the baremetal v1 ListOffers API from recorded or snapshot
// data, with fault injection, so catalogue tests drive the real Scaleway SDK end to end.
package offerserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog/snapshot"
)

// Server serves GET /baremetal/v1/zones/{zone}/offers?subscription_period=...&page=...&page_size=...
type Server struct {
	*httptest.Server

	mu     sync.Mutex
	offers map[string]map[string][]json.RawMessage // zone -> period -> offers

	// Fail, when set, is asked for every request; a non-zero status is answered with a Scaleway-shaped error.
	fail     atomic.Pointer[func(r *http.Request) int]
	Requests atomic.Int64
}

var offersPath = regexp.MustCompile(`^/baremetal/v1/zones/([a-z]{2}-[a-z]{3}-[0-9])/offers$`)

// New starts a server with no offers; Set fills zones.
func New() *Server {
	s := &Server{offers: map[string]map[string][]json.RawMessage{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	return s
}

// Set replaces one zone's offers for one period.
func (s *Server) Set(zone, period string, offers []*baremetal.Offer) {
	raw := make([]json.RawMessage, len(offers))
	for i, o := range offers {
		raw[i], _ = json.Marshal(o)
	}
	s.SetRaw(zone, period, raw)
}

// SetRaw replaces one zone's offers for one period with JSON objects served verbatim (recorded bytes).
func (s *Server) SetRaw(zone, period string, offers []json.RawMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.offers[zone] == nil {
		s.offers[zone] = map[string][]json.RawMessage{}
	}
	s.offers[zone][period] = offers
}

// FailWith makes every request for which f returns a non-zero status fail with it; nil clears it.
func (s *Server) FailWith(f func(r *http.Request) int) {
	if f == nil {
		s.fail.Store(nil)
		return
	}
	s.fail.Store(&f)
}

// Client is a real SDK client pointed at the server with dummy credentials.
func (s *Server) Client(opts ...scw.ClientOption) (*scw.Client, error) {
	base := []scw.ClientOption{
		scw.WithAPIURL(s.URL),
		scw.WithAuth("SCWXXXXXXXXXXXXXXXXX", "11111111-1111-1111-1111-111111111111"),
		scw.WithDefaultZone(scw.ZoneFrPar2),
		scw.WithHTTPClient(s.Server.Client()),
	}
	return scw.NewClient(append(base, opts...)...)
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	s.Requests.Add(1)
	if f := s.fail.Load(); f != nil {
		if code := (*f)(r); code != 0 {
			writeError(w, code)
			return
		}
	}
	m := offersPath.FindStringSubmatch(r.URL.Path)
	if r.Method != http.MethodGet || m == nil {
		writeError(w, http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	period := q.Get("subscription_period")
	if period == "" || period == "unknown_subscription_period" {
		period = "hourly" // what the real API lists without a filter
	}
	page, pageSize := 1, 50
	if v := q.Get("page"); v != "" {
		page, _ = strconv.Atoi(v)
	}
	if v := q.Get("page_size"); v != "" {
		pageSize, _ = strconv.Atoi(v)
	}
	if page < 1 || pageSize < 1 {
		writeError(w, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	zone, ok := s.offers[m[1]]
	all := zone[period]
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound)
		return
	}
	from := min((page-1)*pageSize, len(all))
	to := min(from+pageSize, len(all))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(struct {
		TotalCount int               `json:"total_count"`
		Offers     []json.RawMessage `json:"offers"`
	}{len(all), append([]json.RawMessage{}, all[from:to]...)})
}

// writeError answers like the Scaleway API does (JSON body with message and type).
func writeError(w http.ResponseWriter, code int) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	msg := map[int]string{
		http.StatusNotFound:            `{"message":"resource is not found","resource":"offer","type":"not_found"}`,
		http.StatusTooManyRequests:     `{"message":"quota exceeded","type":"too_many_requests"}`,
		http.StatusInternalServerError: `{"message":"internal error","type":"internal_error"}`,
		http.StatusServiceUnavailable:  `{"message":"service unavailable","type":"service_unavailable"}`,
	}[code]
	if msg == "" {
		msg = `{"message":"error","type":"invalid_request_error"}`
	}
	_, _ = w.Write([]byte(msg))
}

// LoadRecordings serves, verbatim, every recorded 200 ListOffers response for hourly or monthly offers.
// It returns how many zone/period listings it loaded.
func (s *Server) LoadRecordings(b []byte) (int, error) {
	var rec snapshot.Recordings
	if err := json.Unmarshal(b, &rec); err != nil {
		return 0, err
	}
	n := 0
	for _, ex := range rec.Exchanges {
		u, err := url.Parse(ex.Path)
		if err != nil || ex.Method != http.MethodGet || ex.Status != http.StatusOK {
			continue
		}
		m := offersPath.FindStringSubmatch(u.Path)
		period := u.Query().Get("subscription_period")
		if m == nil || (period != "hourly" && period != "monthly") {
			continue
		}
		var resp struct {
			Offers []json.RawMessage `json:"offers"`
		}
		if err := json.Unmarshal(ex.Response, &resp); err != nil {
			return n, err
		}
		s.SetRaw(m[1], period, resp.Offers)
		n++
	}
	return n, nil
}
