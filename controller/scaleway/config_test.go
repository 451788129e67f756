package scaleway

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// envOf is a getenv that sees only kv.
func envOf(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestConfigFromEnv(t *testing.T) {
	c, err := ConfigFromEnv(envOf(map[string]string{
		EnvAccessKey: testAccessKey, EnvSecretKey: testSecretKey, EnvProjectID: testProject,
		EnvDefaultZone: "nl-ams-1", EnvAPIURL: "http://127.0.0.1:8080", EnvPollInterval: "3s", EnvRateLimit: "2.5",
		EnvThrottleWait: "45s", EnvSettleWait: "3m",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.AccessKey != testAccessKey || c.SecretKey != testSecretKey || c.ProjectID != testProject ||
		c.DefaultZone != "nl-ams-1" || c.APIURL != "http://127.0.0.1:8080" || c.PollInterval != 3*time.Second ||
		c.RateLimit.PerSecond != 2.5 || c.Retry.ThrottleWait != 45*time.Second || c.SettleWait != 3*time.Minute {
		t.Fatalf("config %v", c)
	}
	if c.Retry.MaxAttempts != DefaultMaxAttempts || c.RequestTimeout != DefaultRequestTimeout || c.RateLimit.Burst != DefaultRateBurst {
		t.Fatalf("defaults not applied: %v", c)
	}

	c, err = ConfigFromEnv(envOf(map[string]string{EnvAccessKey: testAccessKey, EnvSecretKey: testSecretKey, EnvProjectID: testProject}))
	if err != nil {
		t.Fatal(err)
	}
	if c.APIURL != DefaultAPIURL || c.DefaultZone != DefaultZone || c.Retry.ThrottleWait != DefaultThrottleWait || c.SettleWait != DefaultSettleWait {
		t.Fatalf("defaults: %v", c)
	}
}

func TestConfigErrorsNameTheFieldAndHideTheSecret(t *testing.T) {
	const secret = "not-a-uuid-but-very-secret-value-42"
	cases := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{EnvSecretKey: testSecretKey, EnvProjectID: testProject}, EnvAccessKey},
		{map[string]string{EnvAccessKey: "scw-lower", EnvSecretKey: testSecretKey, EnvProjectID: testProject}, EnvAccessKey},
		{map[string]string{EnvAccessKey: testAccessKey, EnvProjectID: testProject}, EnvSecretKey},
		{map[string]string{EnvAccessKey: testAccessKey, EnvSecretKey: secret, EnvProjectID: testProject}, EnvSecretKey},
		{map[string]string{EnvAccessKey: testAccessKey, EnvSecretKey: testSecretKey}, EnvProjectID},
		{map[string]string{EnvAccessKey: testAccessKey, EnvSecretKey: testSecretKey, EnvProjectID: "proj"}, EnvProjectID},
		{map[string]string{EnvAccessKey: testAccessKey, EnvSecretKey: testSecretKey, EnvProjectID: testProject, EnvDefaultZone: "mars-1"}, EnvDefaultZone},
		{map[string]string{EnvAccessKey: testAccessKey, EnvSecretKey: testSecretKey, EnvProjectID: testProject, EnvOrganizationID: "org"}, EnvOrganizationID},
		{map[string]string{EnvAccessKey: testAccessKey, EnvSecretKey: testSecretKey, EnvProjectID: testProject, EnvAPIURL: "ftp://x"}, EnvAPIURL},
		{map[string]string{EnvAccessKey: testAccessKey, EnvSecretKey: testSecretKey, EnvProjectID: testProject, EnvAPIURL: "http://u:" + secret + "@host"}, EnvAPIURL},
		{map[string]string{EnvAccessKey: testAccessKey, EnvSecretKey: testSecretKey, EnvProjectID: testProject, EnvAPIURL: "http://host/"}, EnvAPIURL},
		{map[string]string{EnvAccessKey: testAccessKey, EnvSecretKey: testSecretKey, EnvProjectID: testProject, EnvPollInterval: "soon"}, EnvPollInterval},
		{map[string]string{EnvAccessKey: testAccessKey, EnvSecretKey: testSecretKey, EnvProjectID: testProject, EnvRequestTimeout: "-1s"}, EnvRequestTimeout},
		{map[string]string{EnvAccessKey: testAccessKey, EnvSecretKey: testSecretKey, EnvProjectID: testProject, EnvMaxAttempts: "0"}, EnvMaxAttempts},
		{map[string]string{EnvAccessKey: testAccessKey, EnvSecretKey: testSecretKey, EnvProjectID: testProject, EnvRateLimit: "x"}, EnvRateLimit},
		{map[string]string{EnvAccessKey: testAccessKey, EnvSecretKey: testSecretKey, EnvProjectID: testProject, EnvRateBurst: "-2"}, EnvRateBurst},
	}
	for _, tc := range cases {
		_, err := ConfigFromEnv(envOf(tc.env))
		if err == nil {
			t.Fatalf("%v: accepted", tc.env)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%v: error does not name %s: %v", tc.env, tc.want, err)
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), testSecretKey) {
			t.Fatalf("secret in error: %v", err)
		}
	}
	// New validates too, before the SDK (whose own message quotes the key).
	_, err := New(Config{AccessKey: testAccessKey, SecretKey: secret, ProjectID: testProject})
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "SecretKey") {
		t.Fatalf("New: %v", err)
	}
	cfg := testConfig("http://127.0.0.1:1")
	cfg.Retry.BaseBackoff, cfg.Retry.MaxBackoff = time.Minute, time.Second
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "BaseBackoff") {
		t.Fatalf("backoffs: %v", err)
	}
}

func TestConfigNeverPrintsSecret(t *testing.T) {
	c := testConfig("http://127.0.0.1:1")
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s", c, c, c, c), c.String()} {
		if strings.Contains(s, testSecretKey) {
			t.Fatalf("secret printed: %s", s)
		}
		if !strings.Contains(s, testAccessKey) || !strings.Contains(s, "<redacted>") {
			t.Fatalf("unexpected rendering: %s", s)
		}
	}
}

// TestSecretNeverInLogsOrErrors drives failing and succeeding calls at full
// verbosity, against a server that even echoes the auth header back in its
// error bodies, and checks neither logs nor errors carry the secret.
func TestSecretNeverInLogsOrErrors(t *testing.T) {
	s := newScripted(t,
		reply{status: 500, body: `{"message":"token ` + testSecretKey + ` rejected"}`},
		reply{status: 401, body: `{"message":"bad token ` + testSecretKey + `"}`},
		reply{status: 200, body: okServer})
	env := newTestClient(t, testConfig(s.srv.URL))
	env.client.log.Info("config", "config", env.client.Config())
	var errs []error
	// 500 (retried) then 401: the call fails unauthorized.
	_, err := env.client.GetServer(context.Background(), "", serverID)
	errs = append(errs, err)
	if err == nil || !IsUnauthorized(err) {
		t.Fatalf("want unauthorized, got %v", err)
	}
	if !strings.Contains(err.Error(), "bad token <redacted>") {
		t.Fatalf("error not redacted as expected: %v", err)
	}
	if _, err := env.client.GetServer(context.Background(), "", serverID); err != nil {
		t.Fatal(err)
	}
	for _, e := range errs {
		if e != nil && strings.Contains(e.Error(), testSecretKey) {
			t.Fatalf("secret in error: %v", e)
		}
	}
	logs := env.logs.String()
	if strings.Contains(logs, testSecretKey) {
		t.Fatalf("secret in logs:\n%s", logs)
	}
	if !strings.Contains(logs, `"op"="GetServer"`) || !strings.Contains(logs, "<redacted>") {
		t.Fatalf("calls not logged / redaction not visible:\n%s", logs)
	}
	// The requests did carry it: the redaction is not a missing header.
	if got := s.requests()[0].Header.Get("X-Auth-Token"); got != testSecretKey {
		t.Fatalf("X-Auth-Token %q", got)
	}
}

// TestConfigValidateReportsEveryProblemInOrder pins Validate's whole answer
// for a Config wrong everywhere: every problem at once, in field order, so
// that taking Validate apart into stages changed nothing an operator reads.
func TestConfigValidateReportsEveryProblemInOrder(t *testing.T) {
	c := Config{
		AccessKey: "scw-lower", SecretKey: "not-a-uuid", ProjectID: "proj", OrganizationID: "org",
		DefaultZone: "mars-1", APIURL: "http://u:p@host",
		RateLimit:      RateLimit{PerSecond: -1, Burst: -1},
		Retry:          RetryPolicy{MaxAttempts: -1, BaseBackoff: -1},
		RequestTimeout: -1, PollInterval: -1, OrderSettle: -1, SettleWait: -1, ReadLag: -1,
	}
	want := []string{
		EnvAccessKey + " (AccessKey) must look like",
		EnvSecretKey + " (SecretKey) must be a UUID (value not shown)",
		EnvProjectID + ` (ProjectID) "proj" is not a UUID`,
		EnvOrganizationID + ` (OrganizationID) "org" is not a UUID`,
		EnvDefaultZone + ` (DefaultZone) "mars-1" is not a zone like fr-par-2`,
		EnvAPIURL + " (APIURL) must not carry credentials",
		"RateLimit.PerSecond must not be negative",
		"RateLimit.Burst must not be negative",
		"Retry.MaxAttempts must not be negative",
		"retry backoffs must not be negative",
		"RequestTimeout must not be negative",
		"PollInterval must not be negative",
		"OrderSettle must not be negative",
		"SettleWait must not be negative",
		"ReadLag must not be negative",
	}
	got := strings.Split(c.Validate().Error(), "\n")
	if len(got) != len(want) {
		t.Fatalf("%d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d: %q, want it to start with %q", i, got[i], want[i])
		}
	}
	c = testConfig("http://127.0.0.1:1")
	c.Retry.BaseBackoff, c.Retry.MaxBackoff = time.Minute, time.Second
	if err := c.Validate(); err == nil || err.Error() != "Retry.BaseBackoff must not exceed Retry.MaxBackoff" {
		t.Fatalf("backoffs: %v", err)
	}
}
