package scwsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
)

// replayed is one recorded exchange with the fields the replay needs.
type replayed struct {
	Source          string            `json:"source"`
	Scenario        string            `json:"scenario"`
	Method          string            `json:"method"`
	Path            string            `json:"path"`
	RequestBody     json.RawMessage   `json:"request_body"`
	Status          int               `json:"status"`
	Response        json.RawMessage   `json:"response"`
	ResponseHeaders map[string]string `json:"response_headers"`
}

func loadScenarios(t *testing.T) (map[string][]replayed, []string) {
	t.Helper()
	b, err := os.ReadFile("../../fixtures/scaleway/baremetal-api-recordings.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Exchanges []replayed `json:"exchanges"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	out := map[string][]replayed{}
	var order []string
	for _, ex := range rec.Exchanges {
		if ex.Scenario == "" {
			continue
		}
		if out[ex.Scenario] == nil {
			order = append(order, ex.Scenario)
		}
		out[ex.Scenario] = append(out[ex.Scenario], ex)
	}
	return out, order
}

// scenarioSetup says how the simulator must be configured for a recorded
// scenario, and what already exists before its first exchange.
type scenarioSetup struct {
	opts func(*Options)
	// readyServer: the scenario starts on a delivered, settled server.
	readyServer bool
	// continues: the scenario goes on with another's simulator and server.
	continues string
}

var scenarioSetups = map[string]scenarioSetup{
	"fr-par-1-offers":              {},
	"offer-id-shared-across-zones": {},
	"ips-before-ready": {opts: func(o *Options) {
		o.ReadyIPs, o.Delays.Order, o.Delays.Settle = ReadyIPsRecorded, 10*time.Millisecond, time.Hour
	}},
	"ready-without-ips": {opts: func(o *Options) {
		o.ReadyIPs, o.Delays.IPsAfterReady, o.Delays.Settle = ReadyIPsLate, time.Hour, time.Hour
	}},
	"attach-while-enabling": {readyServer: true, opts: func(o *Options) {
		o.Delays.OptionEnable, o.Delays.PrivateNetworkAttach = 50*time.Millisecond, time.Hour
		// The recording sees "detaching" once, then an empty list: long
		// enough to be read, short enough to end.
		o.Delays.PrivateNetworkDetach = time.Second
	}},
	"delete-disables-options": {continues: "attach-while-enabling"},
	"stop-start-keeps-ping":   {readyServer: true},
	"bare-429":                {},
	"refusal-503":             {},
}

// TestReplayRecordedScenarios sends each recorded scenario's requests to
// the simulator, in order, and checks every answer against the recording:
// status code, JSON key sets (servers, IPs, options, attachments, offers),
// enum values (statuses, boot type, ping, IP version and reverse status) and
// error messages. GET answers are polled until they match (the recording
// polled too); server states are held by stuck faults while a later
// exchange still expects them.
func TestReplayRecordedScenarios(t *testing.T) {
	scenarios, order := loadScenarios(t)
	for name := range scenarios {
		if _, ok := scenarioSetups[name]; !ok {
			t.Fatalf("recorded scenario %q has no setup here", name)
		}
	}
	known := recordedKeys(t)
	replays := map[string]*replay{}
	parent := t
	for _, name := range order {
		setup := scenarioSetups[name]
		t.Run(name, func(t *testing.T) {
			r := replays[setup.continues]
			if setup.continues == "" {
				// Built on the parent test: a continuing scenario needs it alive.
				r = newReplay(parent, setup, scenarios[name])
				replays[name] = r
			} else if r == nil {
				t.Fatalf("scenario %s continues %s, which did not run", name, setup.continues)
			}
			r.t, r.known = t, known
			for i, ex := range scenarios[name] {
				r.step(i, ex)
			}
		})
	}
}

type replay struct {
	t     *testing.T
	e     *env
	ids   map[string]string // recorded server ID -> simulated
	holds map[string]FaultID
	known map[string]map[string]bool // kind -> every key recorded for it
}

const replayTag = "replay"

var serverPathRE = regexp.MustCompile(`/servers/([0-9a-f-]{36})`)

func newReplay(t *testing.T, setup scenarioSetup, exs []replayed) *replay {
	t.Helper()
	r := &replay{t: t, e: newEnv(t, setup.opts), ids: map[string]string{}, holds: map[string]FaultID{}}
	if setup.readyServer {
		m := serverPathRE.FindStringSubmatch(exs[0].Path)
		if m == nil {
			t.Fatalf("scenario starts on a server, but its first path %s names none", exs[0].Path)
		}
		srv := r.e.create(t, offerB112, replayTag)
		r.e.waitFor(t, srv.ID, func(s *baremetal.Server) bool {
			return s.Status == baremetal.ServerStatusReady && s.PingStatus == baremetal.ServerPingStatusPingStatusUp && s.Domain != ""
		})
		r.ids[m[1]] = srv.ID
	}
	return r
}

// hold keeps replayed servers in exactly the given states ("" = none).
func (r *replay) hold(state string) {
	for s, id := range r.holds {
		if s != state {
			r.e.sim.RemoveFault(id)
			delete(r.holds, s)
		}
	}
	if _, ok := r.holds[state]; !ok && state != "" {
		r.holds[state] = r.e.sim.MustInject(Fault{Kind: FaultStuck, Tag: replayTag, State: state})
	}
}

func (r *replay) step(i int, ex replayed) {
	t := r.t
	t.Helper()
	what := fmt.Sprintf("exchange %d (%s %s, %s)", i, ex.Method, ex.Path, ex.Source)
	var want any
	if len(ex.Response) > 0 && string(ex.Response) != "null" {
		if err := json.Unmarshal(ex.Response, &want); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	wantMap, _ := want.(map[string]any)
	switch {
	case wantMap["offer_name"] != nil:
		r.hold(wantMap["status"].(string))
	case ex.Method == "GET" && ex.Status == http.StatusNotFound:
		r.hold("")
	}
	if ex.Scenario == "bare-429" {
		// Recorded from the gateway in front of another product: replay the
		// throttled answer on an Elastic Metal path.
		r.e.sim.MustInject(Fault{Kind: FaultRateLimit, Times: 1})
		ex.Path = "/baremetal/v1/zones/fr-par-2/servers"
	}
	path := r.mapIDs(ex.Path)
	body := r.requestBody(ex)
	deadline := time.Now().Add(20 * time.Second)
	for {
		status, header, got := r.send(ex.Method, path, body)
		problem := r.compare(ex, want, status, header, got)
		if problem == "" {
			if c, ok := got.(map[string]any); ok && ex.Method == "POST" && strings.HasSuffix(ex.Path, "/servers") && wantMap["id"] != nil {
				r.ids[wantMap["id"].(string)] = c["id"].(string)
			}
			return
		}
		if ex.Method != "GET" || time.Now().After(deadline) {
			gb, _ := json.Marshal(got)
			t.Fatalf("%s: %s\n got %d %.900s", what, problem, status, gb)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *replay) mapIDs(s string) string {
	for rec, sim := range r.ids {
		s = strings.ReplaceAll(s, rec, sim)
	}
	return s
}

// requestBody is the recorded body, or for an order recorded without one
// (the CLI's cassettes), the order its answer describes.
func (r *replay) requestBody(ex replayed) []byte {
	if ex.Method == "POST" && strings.HasSuffix(ex.Path, "/servers") {
		var req map[string]any
		if err := json.Unmarshal(ex.RequestBody, &req); err != nil || req == nil {
			var resp map[string]any
			_ = json.Unmarshal(ex.Response, &resp)
			req = map[string]any{"offer_id": resp["offer_id"], "name": resp["name"], "description": resp["description"],
				"project_id": resp["project_id"], "install": nil}
		}
		req["tags"] = []string{replayTag}
		b, _ := json.Marshal(req)
		return b
	}
	if len(ex.RequestBody) == 0 || string(ex.RequestBody) == "null" {
		return nil
	}
	return []byte(r.mapIDs(string(ex.RequestBody)))
}

func (r *replay) send(method, path string, body []byte) (int, http.Header, any) {
	r.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	resp := r.e.send(r.t, method, path, rd)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	var v any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &v); err != nil {
			return resp.StatusCode, resp.Header, string(b)
		}
	}
	return resp.StatusCode, resp.Header, v
}

// compare says how the simulator's answer differs from the recording ("" if not).
func (r *replay) compare(ex replayed, want any, status int, header http.Header, got any) string {
	if status != ex.Status {
		return fmt.Sprintf("status %d, recorded %d", status, ex.Status)
	}
	if want == nil {
		if got != nil {
			return "a body where the recording has none"
		}
		for _, h := range []string{"Content-Type", "Retry-After", "X-Envoy-Ratelimited"} {
			if header.Get(h) != ex.ResponseHeaders[h] && !(h == "Content-Type" && status == http.StatusNoContent) {
				return fmt.Sprintf("header %s %q, recorded %q", h, header.Get(h), ex.ResponseHeaders[h])
			}
		}
		return ""
	}
	if ex.Scenario == "fr-par-1-offers" {
		if !reflect.DeepEqual(unordered(got), unordered(want)) {
			return "offers differ from the recorded listing"
		}
		return ""
	}
	if ex.Scenario == "offer-id-shared-across-zones" && got.(map[string]any)["id"] != want.(map[string]any)["id"] {
		return "another offer ID than the one recorded in this zone"
	}
	return shapeDiff("", got, want, r.known)
}

// Enums: the values compared between recording and simulator.
var replayEnums = []string{"status", "boot_type", "ping_status", "version", "reverse_status", "subscription_period", "message", "name", "zone"}

// kindOf names what a JSON object is, for the keys newer recordings add.
func kindOf(m map[string]any) string {
	switch {
	case m["offer_name"] != nil:
		return "server"
	case m["quota_name"] != nil:
		return "offer"
	}
	return ""
}

// shapeDiff compares key sets and enum values of a JSON answer, recursing
// into the arrays the provider reads. known: every key recorded per kind
// (newer recordings have keys older ones lack, e.g. a server's protected).
func shapeDiff(at string, got, want any, known map[string]map[string]bool) string {
	g, gok := got.(map[string]any)
	w, wok := want.(map[string]any)
	if gok != wok {
		return fmt.Sprintf("%s: %T, recorded %T", at, got, want)
	}
	if !gok {
		return ""
	}
	for k := range w {
		if _, ok := g[k]; !ok {
			return fmt.Sprintf("%s: lacks recorded key %q", at, k)
		}
	}
	for k := range g {
		if _, ok := w[k]; !ok && !known[kindOf(w)][k] {
			return fmt.Sprintf("%s: key %q is in no recording", at, k)
		}
	}
	for _, k := range replayEnums {
		if wv, ok := w[k].(string); ok && (k != "name" || at != "") && g[k] != wv {
			return fmt.Sprintf("%s.%s = %v, recorded %q", at, k, g[k], wv)
		}
	}
	if wd, ok := w["domain"].(string); ok && (wd == "") != (g["domain"] == "") {
		return fmt.Sprintf("%s.domain %q, recorded %q", at, g["domain"], wd)
	}
	for _, k := range []string{"ips", "options", "server_private_networks"} {
		wa, ok := w[k].([]any)
		if !ok || kindOf(w) == "offer" {
			continue
		}
		ga, _ := g[k].([]any)
		if len(ga) != len(wa) {
			return fmt.Sprintf("%s.%s has %d entries, recorded %d", at, k, len(ga), len(wa))
		}
		byVersion := func(a []any) []any {
			a = slices.Clone(a)
			sort.SliceStable(a, func(i, j int) bool {
				return fmt.Sprint(a[i].(map[string]any)["version"]) < fmt.Sprint(a[j].(map[string]any)["version"])
			})
			return a
		}
		ga, wa = byVersion(ga), byVersion(wa)
		for i := range wa {
			if d := shapeDiff(fmt.Sprintf("%s.%s[%d]", at, k, i), ga[i], wa[i], nil); d != "" {
				return d
			}
		}
	}
	return ""
}

// recordedKeys is every key recorded for servers and offers, in any
// exchange of the file.
func recordedKeys(t *testing.T) map[string]map[string]bool {
	t.Helper()
	keys := map[string]map[string]bool{"server": {}, "offer": {}}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if kind := kindOf(x); kind != "" {
				for k := range x {
					keys[kind][k] = true
				}
			}
			for _, y := range x {
				walk(y)
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	rec := loadRecordings(t)
	for _, ex := range rec.Exchanges {
		var v any
		_ = json.Unmarshal(ex.Response, &v)
		walk(v)
	}
	return keys
}
