package scwsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

// recordings are the real exchanges the simulator must match.
type recordings struct {
	Exchanges []struct {
		Method   string          `json:"method"`
		Path     string          `json:"path"`
		Status   int             `json:"status"`
		Response json.RawMessage `json:"response"`
	} `json:"exchanges"`
}

func loadRecordings(t *testing.T) recordings {
	t.Helper()
	b, err := os.ReadFile("../../fixtures/scaleway/baremetal-api-recordings.json")
	if err != nil {
		t.Fatalf("recordings: %v", err)
	}
	var r recordings
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// response decodes recorded exchange i (stored as a JSON string or object).
func (r recordings) response(t *testing.T, i int) (int, any) {
	t.Helper()
	raw := r.Exchanges[i].Response
	var s string
	if json.Unmarshal(raw, &s) == nil {
		raw = []byte(s)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("exchange %d: %v", i, err)
	}
	return r.Exchanges[i].Status, v
}

// send makes one request with the right token, for what the SDK does not
// show (headers, malformed bodies); the caller closes the body.
func (e *env) send(t *testing.T, method, path string, body io.Reader) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Auth-Token", e.sim.SecretKey())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// raw sends one request with the right token and decodes the JSON answer.
func (e *env) raw(t *testing.T, method, path string, body any) (int, any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	resp := e.send(t, method, path, rd)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s %s: content type %q", method, path, ct)
	}
	var v any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, v
}

func keys(v any) []string {
	m, _ := v.(map[string]any)
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sameKeys(t *testing.T, what string, got, want any) {
	t.Helper()
	if g, w := keys(got), keys(want); !slices.Equal(g, w) {
		t.Fatalf("%s keys:\n got  %v\n want %v", what, g, w)
	}
}

// unordered sorts the arrays the real API returns in varying order between
// recordings (an offer's incompatible_os_ids and options), so answers
// compare as sets there and exactly everywhere else.
func unordered(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			x[k] = unordered(val)
			arr, ok := x[k].([]any)
			if !ok || (k != "incompatible_os_ids" && k != "options") {
				continue
			}
			sort.Slice(arr, func(i, j int) bool {
				return fmt.Sprint(idOf(arr[i])) < fmt.Sprint(idOf(arr[j]))
			})
		}
	case []any:
		for i := range x {
			x[i] = unordered(x[i])
		}
	}
	return v
}

func idOf(v any) any {
	if m, ok := v.(map[string]any); ok {
		return m["id"]
	}
	return v
}

func TestCatalogueIsTheRecordedAnswer(t *testing.T) {
	rec := loadRecordings(t)
	e := newEnv(t, nil)
	for _, c := range []struct {
		exchange int
		path     string
	}{
		{0, "/baremetal/v1/zones/fr-par-2/offers?page=1&subscription_period=unknown_subscription_period"},
		{7, "/baremetal/v1/zones/fr-par-2/offers?page=1&subscription_period=hourly"},
		{1, "/baremetal/v1/zones/fr-par-2/os?page=1"},
		{21, "/baremetal/v1/zones/fr-par-1/options?page=1"},
		{22, "/baremetal/v1/zones/fr-par-1/options/931df052-d713-4674-8b58-96a63244c8e2"},
		{5, "/baremetal/v1/zones/fr-par-2/offers/ddb09834-8680-4339-b5e3-19ca5205fa1f"},
	} {
		if rec.Exchanges[c.exchange].Path != c.path {
			t.Fatalf("exchange %d is %s, not %s", c.exchange, rec.Exchanges[c.exchange].Path, c.path)
		}
		wantStatus, want := rec.response(t, c.exchange)
		status, got := e.raw(t, "GET", c.path, nil)
		if status != wantStatus || !reflect.DeepEqual(unordered(got), unordered(want)) {
			gb, _ := json.Marshal(got)
			t.Fatalf("GET %s differs from the recording (status %d/%d):\n%.600s", c.path, status, wantStatus, gb)
		}
	}
	// Monthly offers: identical but for the stock, which is shared per offer
	// name and seeded from the hourly offer.
	_, want := rec.response(t, 18)
	_, got := e.raw(t, "GET", "/baremetal/v1/zones/fr-par-2/offers?page=1&subscription_period=monthly", nil)
	strip := func(v any) any {
		for _, o := range v.(map[string]any)["offers"].([]any) {
			delete(o.(map[string]any), "stock")
		}
		return v
	}
	if !reflect.DeepEqual(unordered(strip(got)), unordered(strip(want))) {
		t.Fatal("monthly offers differ from the recording beyond the stock field")
	}
}

func TestServerJSONHasRecordedKeys(t *testing.T) {
	rec := loadRecordings(t)
	e := newEnv(t, nil)
	hold := e.sim.MustInject(Fault{Kind: FaultStuck, Tag: "shape", State: "delivering"})
	status, created := e.raw(t, "POST", "/baremetal/v1/zones/fr-par-2/servers", map[string]any{
		"offer_id": e.offerID(t, offerB112), "project_id": zeroID, "name": "shape", "description": "",
		"tags": []string{"shape"}, "install": nil, "option_ids": nil, "protected": false})
	if status != 200 {
		t.Fatalf("create: %d %v", status, created)
	}
	_, recCreated := rec.response(t, 3) // newest create answer (has protected, user_data)
	sameKeys(t, "create answer", created, recCreated)
	_, oldCreated := rec.response(t, 23) // install: null create answer
	for _, k := range keys(oldCreated) {
		if !slices.Contains(keys(created), k) {
			t.Fatalf("create answer lacks recorded key %q", k)
		}
	}
	c := created.(map[string]any)
	if c["install"] != nil || c["status"] != "delivering" || len(c["ips"].([]any)) != 0 || c["rescue_server"] != nil {
		t.Fatalf("create answer: %v", c)
	}
	id := c["id"].(string)

	_, delivering := e.raw(t, "POST", "/baremetal/v1/zones/fr-par-2/servers/"+id+"/reboot", map[string]any{"boot_type": "normal"})
	wantStatus, want := rec.response(t, 24)
	st, _ := e.raw(t, "GET", "/baremetal/v1/zones/fr-par-2/servers/"+id, nil)
	if wantStatus != 400 || !reflect.DeepEqual(delivering, want) || st != 200 {
		t.Fatalf("reboot while delivering: %v, want %v", delivering, want)
	}

	e.sim.RemoveFault(hold)
	e.waitStatus(t, id, "ready")
	_, got := e.raw(t, "GET", "/baremetal/v1/zones/fr-par-2/servers/"+id, nil)
	_, recReady := rec.response(t, 8) // ready, delivered: domain and reverse set
	sameKeys(t, "ready server", got, recReady)
	recIPs := recReady.(map[string]any)["ips"].([]any)
	for i, ip := range got.(map[string]any)["ips"].([]any) {
		sameKeys(t, "ip", ip, recIPs[i])
		if ip.(map[string]any)["version"] != recIPs[i].(map[string]any)["version"] {
			t.Fatalf("ip %d version %v", i, ip)
		}
	}

	_, list := e.raw(t, "GET", "/baremetal/v1/zones/fr-par-2/servers?name=shape&order_by=created_at_asc", nil)
	_, recList := rec.response(t, 27)
	sameKeys(t, "server list", list, recList)
	sameKeys(t, "listed server", list.(map[string]any)["servers"].([]any)[0], recList.(map[string]any)["servers"].([]any)[0])

	_, pns := e.raw(t, "GET", "/baremetal/v3/zones/fr-par-2/server-private-networks?order_by=created_at_asc&server_id="+id, nil)
	if _, recPNs := rec.response(t, 6); !reflect.DeepEqual(pns, recPNs) {
		t.Fatalf("v3 list: %v, want %v", pns, recPNs)
	}

	st, deleting := e.raw(t, "DELETE", "/baremetal/v1/zones/fr-par-2/servers/"+id, nil)
	if st != 200 || deleting.(map[string]any)["status"] != "deleting" {
		t.Fatalf("delete: %d %v", st, deleting)
	}
	e.waitGone(t, id)
	st, gone := e.raw(t, "GET", "/baremetal/v1/zones/fr-par-2/servers/"+id, nil)
	if wantStatus, want := rec.response(t, 17); st != wantStatus || !reflect.DeepEqual(gone, want) {
		t.Fatalf("after delete: %d %v, want %d %v", st, gone, wantStatus, want)
	}
}
