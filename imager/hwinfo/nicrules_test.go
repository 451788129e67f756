package hwinfo

import "testing"

// TestNICRules pins the two decisions NICs makes from sysfs text: when a link counts as up,
// and when a default route on a master (bond, bridge) counts for its member.
func TestNICRules(t *testing.T) {
	for _, c := range []struct {
		oper, carrier string
		want          bool
	}{
		{"up", "", true},
		{"up", "0", true},
		{"unknown", "1", true},
		{"unknown", "0", false},
		{"down", "1", false},
		{"", "", false},
	} {
		if got := linkUp(c.oper, c.carrier); got != c.want {
			t.Errorf("linkUp(%q, %q) = %v, want %v", c.oper, c.carrier, got, c.want)
		}
	}
	v4, v6 := map[string]bool{"eth0": true, "bond0": true}, map[string]bool{"eth1": true}
	for _, c := range []struct {
		name, master string
		want         bool
	}{
		{"eth0", "", true},
		{"eth1", "", true},
		{"eth2", "", false},
		{"eth2", "bond0", true},
		{"eth2", "br0", false},
	} {
		if got := carriesDefaultRoute(c.name, c.master, v4, v6); got != c.want {
			t.Errorf("carriesDefaultRoute(%q, %q) = %v, want %v", c.name, c.master, got, c.want)
		}
	}
}
