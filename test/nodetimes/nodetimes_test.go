package nodetimes

import (
	"strings"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// A monthly server's two lives: ordered and installed, kept as a spare,
// taken by a second NodeClaim that only reboots it.
func TestLivesSplitScalewayJoinAndProvider(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	st := func(v string, s float64) world.Stamp { return world.Stamp{Value: v, At: at(s)} }
	const id = "11111111-2222-4333-8444-555555555555"
	tl := world.Timeline{ID: id, Offer: "EM-A215R-HDD", Zone: "fr-par-2", Created: at(0),
		Statuses: []world.Stamp{st("delivering", 0.1), st("ready", 270), st("stopping", 280), st("starting", 325),
			st("ready", 430), st("stopping", 445), st("starting", 490), st("ready", 600),
			st("stopping", 700), st("starting", 745), st("ready", 850),
			st("stopping", 905), st("starting", 950), st("ready", 1055)},
		Phases: []world.Stamp{st("ordered", 0), st("rescue", 278), st("imaging", 435), st("booting", 444),
			st("joined", 601), st("spare", 699), st("ordered", 900), st("imaging", 902), st("booting", 904), st("joined", 1057)},
		Claims: []world.Stamp{st("np-aaaaa", 0.1), st("np-bbbbb", 900)},
		Nodes:  []world.NodeSeen{{Name: "np-aaaaa", Seen: at(600.5), Ready: at(601)}, {Name: "np-bbbbb", Seen: at(1056), Ready: at(1057)}},
	}
	calls := []scwsim.Call{
		{Method: "POST", Path: "/baremetal/v1/zones/fr-par-2/servers", At: at(0), ServerID: id},
		{Method: "POST", Path: "/baremetal/v1/zones/fr-par-2/servers/" + id + "/reboot", At: at(279), ServerID: id},
		{Method: "PATCH", Path: "/baremetal/v1/zones/fr-par-2/servers/" + id, At: at(444), ServerID: id},
		{Method: "POST", Path: "/baremetal/v1/zones/fr-par-2/servers/" + id + "/reboot", At: at(445), ServerID: id},
		{Method: "PATCH", Path: "/baremetal/v1/zones/fr-par-2/servers/" + id, At: at(699), ServerID: id}, // keep: no life's
		{Method: "PATCH", Path: "/baremetal/v1/zones/fr-par-2/servers/" + id, At: at(900), ServerID: id},
		{Method: "POST", Path: "/baremetal/v1/zones/fr-par-2/servers/" + id + "/reboot", At: at(904.5), ServerID: id},
		{Method: "GET", Path: "/baremetal/v1/zones/fr-par-2/servers/other", At: at(904.5), ServerID: "other"},
	}
	lives := Lives(tl, calls)
	if len(lives) != 2 {
		t.Fatalf("%d lives, want 2: %+v", len(lives), lives)
	}
	cold, reuse := lives[0], lives[1]
	sec := func(d time.Duration) float64 { return d.Seconds() }
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"cold reused", cold.Reused, false},
		{"cold node", cold.Node, "np-aaaaa"},
		{"cold total", sec(cold.Total()), 601.0},
		{"cold Scaleway", sec(cold.Scaleway), 575.0},
		{"cold join", sec(cold.Join), 1.0},
		{"cold provider", sec(cold.Provider), 25.0},
		{"cold imaging", sec(cold.Imaging), 9.0},
		{"cold waits", cold.WaitsString(1), "delivery 4m30s, reboot 2m30s, reboot 2m35s"},
		{"cold gaps", cold.GapsString(), "after delivery 10.0s, after reboot 15.0s"},
		{"cold calls", Kinds(cold.Calls), "2 POST /servers/{id}/reboot, 1 PATCH /servers/{id}, 1 POST /servers"},
		{"cold phases", strings.Join(cold.Phases, ">"), "ordered>rescue>imaging>booting>joined"},
		{"reuse reused", reuse.Reused, true},
		{"reuse node", reuse.Node, "np-bbbbb"},
		{"reuse total", sec(reuse.Total()), 157.0},
		{"reuse Scaleway", sec(reuse.Scaleway), 150.0},
		{"reuse join", sec(reuse.Join), 2.0},
		{"reuse provider", sec(reuse.Provider), 5.0},
		{"reuse calls", Kinds(reuse.Calls), "1 PATCH /servers/{id}, 1 POST /servers/{id}/reboot"},
		{"reuse phases", strings.Join(reuse.Phases, ">"), "ordered>imaging>booting>joined"},
		// At a delay scale of 0.1, Scaleway's 150 s are 1500 s of real time.
		{"reuse projected x0.1", sec(reuse.Projected(0.1)), 1507.0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

// A node that never became Ready has no total and no join.
func TestLifeNeverReady(t *testing.T) {
	t0 := time.Now().Add(-time.Minute)
	tl := world.Timeline{ID: "s", Created: t0, Claims: []world.Stamp{{Value: "c", At: t0}},
		Statuses: []world.Stamp{{Value: "delivering", At: t0}}}
	l := Lives(tl, nil)[0]
	if l.Total() != 0 || l.Join != 0 || l.Provider != 0 || len(l.Waits) != 1 || l.Waits[0].Kind != "delivery" {
		t.Errorf("never Ready: total %s join %s provider %s waits %+v", l.Total(), l.Join, l.Provider, l.Waits)
	}
	if !strings.Contains(Table([]Life{l}, 1), " never ") {
		t.Errorf("table does not say never:\n%s", Table([]Life{l}, 1))
	}
}

func TestStats(t *testing.T) {
	if m, x := Stats([]int{14, 9, 11}); m != 11 || x != 14 {
		t.Errorf("Stats = %d, %d; want 11, 14", m, x)
	}
	if m, x := Stats[int](nil); m != 0 || x != 0 {
		t.Errorf("Stats(nil) = %d, %d", m, x)
	}
}

func TestSparesQuiet(t *testing.T) {
	servers := []scwsim.ServerState{
		{ID: "a", Status: "ready", Tags: []string{world.TagPhase + "=spare"}},
		{ID: "b", Status: "stopping", Tags: []string{world.TagPhase + "=spare"}},
		{ID: "c", Status: "ready", Tags: []string{world.TagPhase + "=joined"}},
	}
	var w Spares
	if spares, quiet := w.Quiet(servers, 0); spares != 2 || quiet != 1 {
		t.Errorf("at once: %d spares, %d quiet; want 2, 1", spares, quiet)
	}
	if _, quiet := w.Quiet(servers, time.Hour); quiet != 0 {
		t.Errorf("%d quiet for an hour, want 0", quiet)
	}
	time.Sleep(20 * time.Millisecond)
	if _, quiet := w.Quiet(servers, 10*time.Millisecond); quiet != 1 {
		t.Errorf("unchanged: %d quiet, want 1", quiet)
	}
	servers[0].Tags = append(servers[0].Tags, "karpenter-scaleway-em/rescue-boot=install")
	if _, quiet := w.Quiet(servers, 10*time.Millisecond); quiet != 0 {
		t.Errorf("a tag changed: %d quiet, want 0 (its quiet starts over)", quiet)
	}
	// Pre-imaged (keyed rescue, pinned host key, image written): settled at once.
	servers[0].Tags = append(servers[0].Tags, "karpenter-scaleway-em/rescue-host-key=ssh-ed25519:abc", "karpenter-scaleway-em/image=0cd82988")
	if _, quiet := w.Quiet(servers, time.Hour); quiet != 1 {
		t.Errorf("pre-imaged: %d settled, want 1", quiet)
	}
}
