package breaker

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/apis/v1alpha1"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

var (
	t0  = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	key = Key{Generation: 1, JoinSecretResourceVersion: "100"}
	pol = Policy{Threshold: 2, Window: time.Hour, Backoff: 10 * time.Minute, MaxBackoff: 35 * time.Minute}
)

func fail(claim string) v1alpha1.InstallFailure {
	return v1alpha1.InstallFailure{Phase: "imaging", Code: report.CodeDiskNotFound, NodeClaim: claim, Offering: "fr-par-2/EM-A116X-SSD/hourly"}
}

func TestOpensAfterThresholdWithinWindow(t *testing.T) {
	st := pol.Failure(nil, key, fail("a"), t0)
	if got := StateOf(st, t0, false); got != Closed {
		t.Fatalf("after 1 failure: %s, want closed", got)
	}
	st = pol.Failure(st, key, fail("b"), t0.Add(50*time.Minute))
	if got := StateOf(st, t0.Add(50*time.Minute), false); got != Open {
		t.Fatalf("after 2 failures within the window: %s, want open", got)
	}
	if want := t0.Add(60 * time.Minute); !st.NextAttempt.Time.Equal(want) {
		t.Errorf("next attempt %s, want %s (the base backoff)", st.NextAttempt.Time, want)
	}
	ok, reason, msg := Condition(st, t0.Add(55*time.Minute), false)
	if ok || reason != ReasonInstallsFailing {
		t.Errorf("condition %v %s, want False %s", ok, reason, ReasonInstallsFailing)
	}
	for _, want := range []string{"2 consecutive install failures", "phase imaging", "code disk_not_found", "2026-11-23T11:00:00Z"} {
		if !contains(msg, want) {
			t.Errorf("condition message %q lacks %q", msg, want)
		}
	}
}

func TestFailuresOutsideTheWindowDoNotOpen(t *testing.T) {
	st := pol.Failure(nil, key, fail("a"), t0)
	st = pol.Failure(st, key, fail("b"), t0.Add(61*time.Minute))
	if got := StateOf(st, t0.Add(61*time.Minute), false); got != Closed {
		t.Fatalf("failures 61 min apart with a 1 h window: %s, want closed", got)
	}
	if st.ConsecutiveFailures != 1 {
		t.Errorf("count %d, want 1 (the window restarted)", st.ConsecutiveFailures)
	}
}

func TestProbeAfterBackoffAndExponentialBackoff(t *testing.T) {
	st := pol.Failure(nil, key, fail("a"), t0)
	st = pol.Failure(st, key, fail("b"), t0)
	now := t0.Add(10 * time.Minute)
	if got := StateOf(st, now, false); got != ProbeAllowed {
		t.Fatalf("at the end of the backoff: %s, want probe_allowed", got)
	}
	if ok, reason, _ := Condition(st, now, false); !ok || reason != ReasonProbeAllowed {
		t.Errorf("condition %v %s, want True %s (Ready, so that Karpenter creates the probe)", ok, reason, ReasonProbeAllowed)
	}
	st = st.DeepCopy()
	st.ProbeNodeClaim = "probe-1"
	if got := StateOf(st, now, true); got != Probing {
		t.Fatalf("probe in flight: %s, want probing", got)
	}
	if got := StateOf(st, now, false); got != ProbeAllowed {
		t.Errorf("probe nodeclaim gone: %s, want probe_allowed (another probe may go)", got)
	}
	// A failure of an install ordered before the breaker opened neither
	// ends the probe nor extends the backoff.
	late := pol.Failure(st, key, fail("c"), now)
	if late.Opened != 1 || late.ProbeNodeClaim != "probe-1" || !late.NextAttempt.Equal(st.NextAttempt) {
		t.Errorf("a non-probe failure changed the breaker: opened %d probe %q next %s", late.Opened, late.ProbeNodeClaim, late.NextAttempt)
	}
	// Each failed probe doubles the backoff, up to the maximum.
	want := []time.Duration{20 * time.Minute, 35 * time.Minute, 35 * time.Minute}
	for i, d := range want {
		claim := fmt.Sprintf("probe-%d", i+1)
		st = st.DeepCopy()
		st.ProbeNodeClaim = claim
		st = pol.Failure(st, key, fail(claim), now)
		if got := st.NextAttempt.Sub(now); got != d {
			t.Errorf("after failed probe %d: backoff %s, want %s", i+1, got, d)
		}
		if st.ProbeNodeClaim != "" {
			t.Errorf("after failed probe %d: probe %q still recorded", i+1, st.ProbeNodeClaim)
		}
		now = st.NextAttempt.Time
	}
}

func TestNewGenerationOrSecretResets(t *testing.T) {
	st := pol.Failure(nil, key, fail("a"), t0)
	st = pol.Failure(st, key, fail("b"), t0)
	if Current(st, key) == nil {
		t.Fatal("the state was dropped under its own key")
	}
	for _, k := range []Key{{Generation: 2, JoinSecretResourceVersion: "100"}, {Generation: 1, JoinSecretResourceVersion: "101"}} {
		if Current(st, k) != nil {
			t.Errorf("state counted under %+v still applies under %+v", key, k)
		}
		next := pol.Failure(st, k, fail("c"), t0)
		if next.ConsecutiveFailures != 1 || next.Opened != 0 {
			t.Errorf("first failure under %+v: count %d opened %d, want 1 and closed", k, next.ConsecutiveFailures, next.Opened)
		}
	}
}

func TestCodeOfAndHardware(t *testing.T) {
	wrapped := fmt.Errorf("install phase imaging: %w", fmt.Errorf("em-imager write: %w", &report.Error{Code: report.CodeDiskTooSmall, Message: "8 GB"}))
	if got := CodeOf(wrapped); got != report.CodeDiskTooSmall {
		t.Errorf("CodeOf = %q, want %q", got, report.CodeDiskTooSmall)
	}
	if got := CodeOf(errors.New("booting did not finish")); got != CodePhaseFailed {
		t.Errorf("CodeOf(plain) = %q, want %q", got, CodePhaseFailed)
	}
	for _, c := range []struct {
		code, disk string
		want       bool
	}{
		{report.CodeDiskNotFound, "auto", true},
		{report.CodeDiskTooSmall, "", true},
		{report.CodeDiskUnsuitable, "auto", true},
		{report.CodeDiskNotFound, "/dev/nvme9n1", false},
		{report.CodeDigestMismatch, "auto", false},
		{CodePhaseFailed, "auto", false},
	} {
		if got := Hardware(c.code, c.disk); got != c.want {
			t.Errorf("Hardware(%s, %q) = %v, want %v", c.code, c.disk, got, c.want)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
