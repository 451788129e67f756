package harness

import (
	"strings"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// life turns "0s POST servers, 1.369s GET servers/{server}, ..." (the
// shape ServerLife prints) into calls about one server.
func life(t *testing.T, s string) []scwsim.Call {
	t.Helper()
	t0 := time.Date(2026, 11, 29, 4, 33, 45, 0, time.UTC)
	var calls []scwsim.Call
	for _, f := range strings.Split(s, ",") {
		parts := strings.Fields(f) // at, method, kind
		d, err := time.ParseDuration(parts[0])
		if err != nil {
			t.Fatal(err)
		}
		path := "/baremetal/v1/zones/fr-par-2/" + strings.ReplaceAll(parts[2], "{server}", "06499bd0")
		calls = append(calls, scwsim.Call{Method: parts[1], Path: path, At: t0.Add(d), Duration: 2 * time.Millisecond, ServerID: "06499bd0"})
	}
	return calls
}

// The lives of a full make test's failure of TestScaleUpFromZeroThenConsolidate
// (14 calls against a budget of 13): each had one read of a state that a
// stall had aged just past the 0.8 s window; a plain life has none, and a
// read of a state still fresh is no re-read: it counts against the budget.
func TestStaleRereads(t *testing.T) {
	const window = 800 * time.Millisecond
	for _, c := range []struct {
		name, life string
		want       int
	}{
		{"aged delivery read before the first tag edit",
			"0s POST servers, 1.369s GET servers/{server}, 2.326s GET servers/{server}, 2.327s PATCH servers/{server}, 3.691s POST servers/{server}/reboot, " +
				"4.376s GET servers/{server}, 4.379s PATCH servers/{server}, 17.684s GET servers/{server}, 17.729s PATCH servers/{server}, " +
				"22.667s GET servers/{server}, 22.672s PATCH servers/{server}, 23.327s PATCH servers/{server}, 55.038s GET servers/{server}, 55.043s DELETE servers/{server}", 1},
		{"own write aged before the next tag edit",
			"0s POST servers, 1.022s GET servers/{server}, 1.496s PATCH servers/{server}, 2.688s POST servers/{server}/reboot, 3.554s GET servers/{server}, " +
				"3.567s PATCH servers/{server}, 15.884s GET servers/{server}, 15.895s PATCH servers/{server}, 21.669s GET servers/{server}, " +
				"21.676s PATCH servers/{server}, 22.51s GET servers/{server}, 22.537s PATCH servers/{server}, 54.698s GET servers/{server}, 54.701s DELETE servers/{server}", 1},
		{"plain life",
			"0s POST servers, 1.275s GET servers/{server}, 1.599s PATCH servers/{server}, 2.456s POST servers/{server}/reboot, 3.755s GET servers/{server}, " +
				"3.769s PATCH servers/{server}, 16.328s GET servers/{server}, 16.335s PATCH servers/{server}, 21.884s GET servers/{server}, " +
				"21.897s PATCH servers/{server}, 22.312s PATCH servers/{server}, 55.086s GET servers/{server}, 55.113s DELETE servers/{server}", 0},
		{"plain life, idle machine (imaging 2.3 s, booting 2.6 s)",
			"0s POST servers, 701ms GET servers/{server}, 1.101s PATCH servers/{server}, 2.9s POST servers/{server}/reboot, 4.601s GET servers/{server}, " +
				"5s PATCH servers/{server}, 7.3s GET servers/{server}, 7.901s PATCH servers/{server}, 10.468s GET servers/{server}, " +
				"10.469s PATCH servers/{server}, 10.672s PATCH servers/{server}, 46.722s GET servers/{server}, 46.722s DELETE servers/{server}", 0},
		{"read of a fresh state",
			"0s POST servers, 1.2s GET servers/{server}, 1.21s PATCH servers/{server}, 1.5s GET servers/{server}, 1.51s PATCH servers/{server}", 0},
	} {
		if got := StaleRereads(life(t, c.life), window); got != c.want {
			t.Errorf("%s: %d stale re-reads, want %d", c.name, got, c.want)
		}
	}
}
