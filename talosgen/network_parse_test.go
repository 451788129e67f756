package talosgen

import (
	"strings"
	"testing"
)

// TestParseNetworkProblems tables parseNetwork's refusals that the render
// tests do not reach, one per check of its parts (IPv6 address, gateway,
// private networks), and one network that parses.
func TestParseNetworkProblems(t *testing.T) {
	const addr, gw = "2001:db8:1::5", "2001:db8:1::1"
	for name, tc := range map[string]struct {
		n    Network
		want string
	}{
		"a /64":                      {Network{IPv6Address: addr + "/64", IPv6Gateway: gw}, "want /128"},
		"link-local":                 {Network{IPv6Address: "fe80::5", IPv6Gateway: gw}, "not a global unicast"},
		"gateway is own address":     {Network{IPv6Address: addr, IPv6Gateway: addr}, "the node's own address"},
		"multicast gateway":          {Network{IPv6Address: addr, IPv6Gateway: "ff02::1"}, "not a unicast IPv6"},
		"unspecified nameserver":     {Network{Nameservers: []string{"::"}}, "nameservers[0]"},
		"VLAN 0":                     {Network{PrivateNetworks: []PrivateNetwork{{VLAN: 0, DHCP: true}}}, "privateNetworks[0].vlan: 0 is not in 1-4094"},
		"address without prefix len": {Network{PrivateNetworks: []PrivateNetwork{{VLAN: 7, Addresses: []string{"10.0.0.1"}}}}, "privateNetworks[0].addresses[0]"},
		"second network's MTU":       {Network{PrivateNetworks: []PrivateNetwork{{VLAN: 7, DHCP: true}, {VLAN: 8, DHCP: true, MTU: 1000}}}, "privateNetworks[1].mtu"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseNetwork(tc.n)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want it to contain %q", err, tc.want)
			}
		})
	}
	p, err := parseNetwork(Network{IPv6Address: addr, IPv6Gateway: gw, Nameservers: []string{"1.1.1.1"},
		PrivateNetworks: []PrivateNetwork{{VLAN: 7, Addresses: []string{"10.0.0.1/24"}, MTU: 1400}}})
	if err != nil {
		t.Fatal(err)
	}
	if p.ipv6.String() != addr+"/128" || p.gateway.String() != gw || len(p.nameservers) != 1 ||
		len(p.private) != 1 || p.private[0].vlan != 7 || p.private[0].mtu != 1400 || p.private[0].addresses[0].String() != "10.0.0.1/24" {
		t.Fatalf("parsed %+v", p)
	}
}
