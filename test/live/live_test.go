package live

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// client is the provider's Client on the simulator, read-only as
// smoke-live builds it.
func client(t *testing.T, sim *scwsim.Sim, url string, readOnly bool) *scaleway.Client {
	t.Helper()
	tr := http.DefaultTransport
	if readOnly {
		tr = ReadOnly(tr)
	}
	c, err := scaleway.New(scaleway.Config{AccessKey: "SCWXXXXXXXXXXXXXXXXX", SecretKey: sim.SecretKey(),
		ProjectID: sim.Options().ProjectID, APIURL: url, DefaultZone: scw.ZoneFrPar2,
		Retry: scaleway.RetryPolicy{MaxAttempts: 1}}, scaleway.WithTransport(tr))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func startSim(t *testing.T, mutate func(*scwsim.Options)) (*scwsim.Sim, string) {
	t.Helper()
	o, err := scwsim.Profile(scwsim.ProfileTest)
	if err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(&o)
	}
	sim := scwsim.New(o)
	url, err := sim.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	return sim, url
}

func TestRunOnTheSimulatorReadsOnly(t *testing.T) {
	sim, url := startSim(t, func(o *scwsim.Options) { o.ReadyIPs = scwsim.ReadyIPsNever })
	// A server of the cluster, ready without IPs: worth a warning.
	writer := client(t, sim, url, false)
	tag := scaleway.Tag(scaleway.TagManagedBy, "c1")
	offer, _ := sim.OfferID("fr-par-2", "EM-B112X-SSD", "hourly")
	srv, _, err := writer.CreateServer(context.Background(), scaleway.CreateServerRequest{Zone: scw.ZoneFrPar2, OfferID: offer,
		Name: "n", Tags: []string{tag, "karpenter.sh/nodeclaim=n", scaleway.Tag(scaleway.TagPhase, "ordered")}, IdempotencyTag: "karpenter.sh/nodeclaim=n"})
	if err != nil {
		t.Fatal(err)
	}
	for s, _ := sim.Server(srv.ID); s.Status != string(baremetal.ServerStatusReady); s, _ = sim.Server(srv.ID) {
		time.Sleep(5 * time.Millisecond)
	}
	sim.ResetCalls()

	r := Run(context.Background(), client(t, sim, url, true), Options{Zones: []scw.Zone{scw.ZoneFrPar1, scw.ZoneFrPar2}, Cluster: "c1"})
	var out bytes.Buffer
	r.Print(&out)
	t.Log("\n" + out.String())
	if r.Failed() {
		t.Fatal("the simulator fails the smoke test")
	}
	if !strings.Contains(out.String(), "ready but lists no IPv4") || !strings.Contains(out.String(), "each with one ID in every zone") ||
		!strings.Contains(out.String(), "no SSH key named karpenter-scaleway-em-c1") {
		t.Fatalf("report misses expected findings:\n%s", out.String())
	}
	// The rescue key is in IAM only while an install needs a rescue boot:
	// its absence is no warning (it said "registers it when it starts").
	for _, f := range r.Findings {
		if strings.Contains(f.What, "no SSH key named") && f.Level != OK {
			t.Errorf("a missing rescue key is reported as %s, but it is the normal state: %s", f.Level, f.What)
		}
	}
	for _, c := range sim.Calls() {
		if c.Method != http.MethodGet {
			t.Fatalf("smoke-live sent %s %s", c.Method, c.Path)
		}
	}
}

func TestRunReportsWhatIsWrong(t *testing.T) {
	sim, url := startSim(t, nil)
	sim.MustInject(scwsim.Fault{Kind: scwsim.FaultStatus, Path: `/zones/fr-par-1/offers$`, Status: 403,
		Body: `{"message":"insufficient permissions","type":"permissions_denied","details":[{"action":"read","resource":"baremetal"}]}`})
	r := Run(context.Background(), client(t, sim, url, true), Options{Zones: []scw.Zone{scw.ZoneFrPar1, scw.ZoneFrPar2}})
	var out bytes.Buffer
	r.Print(&out)
	if !r.Failed() || !strings.Contains(out.String(), "FAIL  fr-par-1  listing monthly offers") {
		t.Fatalf("a refused listing must fail the run:\n%s", out.String())
	}
	if _, err := ReadOnly(http.DefaultTransport).RoundTrip(&http.Request{Method: http.MethodPost, URL: mustURL(t, url+"/x")}); err == nil {
		t.Fatal("ReadOnly let a POST through")
	}
}

func TestOfferProblems(t *testing.T) {
	good := func() *baremetal.Offer {
		return &baremetal.Offer{ID: "8779d2c1-cd10-4a34-a006-cb5b1fb5cbc7", Name: "EM-A116X-SSD", Stock: baremetal.OfferStockLow,
			SubscriptionPeriod: baremetal.OfferSubscriptionPeriodHourly, CPUs: []*baremetal.CPU{{}}, Memories: []*baremetal.Memory{{}},
			Disks: []*baremetal.Disk{{}}, PricePerHour: &scw.Money{}}
	}
	if p := offerProblem(good(), baremetal.OfferSubscriptionPeriodHourly); p != "" {
		t.Fatalf("good offer: %s", p)
	}
	for name, edit := range map[string]func(o *baremetal.Offer){
		"id":     func(o *baremetal.Offer) { o.ID = "EM-A116X-SSD" },
		"stock":  func(o *baremetal.Offer) { o.Stock = "plenty" },
		"cpus":   func(o *baremetal.Offer) { o.CPUs = nil },
		"price":  func(o *baremetal.Offer) { o.PricePerHour = nil },
		"period": func(o *baremetal.Offer) { o.SubscriptionPeriod = baremetal.OfferSubscriptionPeriodMonthly },
	} {
		o := good()
		edit(o)
		if offerProblem(o, baremetal.OfferSubscriptionPeriodHourly) == "" {
			t.Errorf("%s: no problem found", name)
		}
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// recordedServer is exchange 32 of the recordings: a real GET of a ready
// server (rescue_server null, boot_type normal).
func recordedServer(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile("../fixtures/scaleway/baremetal-api-recordings.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Exchanges []struct {
			Method, Path string
			Response     json.RawMessage
		}
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	x := rec.Exchanges[32]
	var body map[string]any
	if err := json.Unmarshal(x.Response, &body); err != nil || x.Method != http.MethodGet || body["status"] != "ready" {
		t.Fatalf("exchange 32 is %s %s (%v), want the GET of a ready server", x.Method, x.Path, err)
	}
	return body
}

// smoke-live tells which rescue login a server in rescue has, from the
// API's answer as the SDK reads it: the user and whether a password is
// given, never the password.
func TestRescueLoginIsReportedWithoutThePassword(t *testing.T) {
	const password = "Zq8vN3pLw0rdX7"
	for _, tc := range []struct {
		name   string
		rescue any
		want   []string
	}{
		{"key-only", map[string]string{"user": "rescue", "password": password}, []string{`user "rescue"`, "a password given", "key-only kind"}},
		{"per-server", map[string]string{"user": "em-k3x9q", "password": password}, []string{`user "em-k3x9q"`, "a password given", "per-server kind"}},
		{"per-server, no password", map[string]string{"user": "em-k3x9q", "password": ""}, []string{`user "em-k3x9q"`, "no password given"}},
		{"no rescue_server", nil, []string{"shows no rescue user", "RESCUE_SSH_USER"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := recordedServer(t)
			body["boot_type"], body["rescue_server"] = "rescue", tc.rescue
			raw, _ := json.Marshal(body)
			var s baremetal.Server
			if err := json.Unmarshal(raw, &s); err != nil {
				t.Fatal(err)
			}
			line, ok := RescueLogin(&s)
			if !ok {
				t.Fatal("a server in rescue is not reported")
			}
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("%q does not say %q", line, w)
				}
			}
			if strings.Contains(line, password) {
				t.Errorf("the password is printed: %s", line)
			}
		})
	}
	body := recordedServer(t)
	raw, _ := json.Marshal(body)
	var normal baremetal.Server
	if err := json.Unmarshal(raw, &normal); err != nil {
		t.Fatal(err)
	}
	if line, ok := RescueLogin(&normal); ok {
		t.Errorf("a server in normal boot is reported: %s", line)
	}
}

// On the simulator: a project's server in rescue (any server, not only the
// cluster's) shows in the run's report with its login kind, and the
// printed report does not hold the boot's password.
func TestRescueLoginOfAServerInRescueIsInTheRun(t *testing.T) {
	sim, url := startSim(t, func(o *scwsim.Options) { o.RescueUser = scwsim.RescueUserPerServer })
	writer := client(t, sim, url, false)
	offer, _ := sim.OfferID("fr-par-2", "EM-B112X-SSD", "hourly")
	srv, _, err := writer.CreateServer(context.Background(), scaleway.CreateServerRequest{Zone: scw.ZoneFrPar2, OfferID: offer, Name: "by-hand",
		Tags: []string{"by-hand=1"}, IdempotencyTag: "by-hand=1"})
	if err != nil {
		t.Fatal(err)
	}
	waitReady := func() {
		for s, _ := sim.Server(srv.ID); s.Status != string(baremetal.ServerStatusReady); s, _ = sim.Server(srv.ID) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitReady()
	if _, err := writer.RebootServer(context.Background(), scw.ZoneFrPar2, srv.ID, baremetal.ServerBootTypeRescue, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	waitReady()
	r := Run(context.Background(), client(t, sim, url, true), Options{Zones: []scw.Zone{scw.ZoneFrPar2}})
	var out bytes.Buffer
	r.Print(&out)
	t.Log("\n" + out.String())
	if !regexp.MustCompile(`server ` + srv.ID + ` runs rescue: user "em-[a-z0-9]{5}", a password given; the per-server kind`).MatchString(out.String()) {
		t.Errorf("the report does not tell the server's rescue login:\n%s", out.String())
	}
	for _, pw := range sim.RescuePasswords() {
		if strings.Contains(out.String(), pw) {
			t.Errorf("the report prints a rescue password")
		}
	}
}
