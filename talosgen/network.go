package talosgen

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/cel"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/types/network"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// UplinkLink is the alias the uplink NIC gets on the node. The kernel names
// the NIC differently in rescue (eth0) and in Talos (enpXsY), so the config
// selects it by MAC and calls it by this alias everywhere else.
const UplinkLink = "uplink"

// vlanLink names the VLAN interface of a private network ("uplink.3001").
func vlanLink(id uint16) string { return fmt.Sprintf("%s.%d", UplinkLink, id) }

func normalizeMAC(s string) (string, error) {
	hw, err := net.ParseMAC(strings.TrimSpace(s))
	if err != nil || len(hw) != 6 {
		return "", errors.New("not a 48-bit MAC address")
	}

	return hw.String(), nil
}

// uplinkNIC is the NIC that carries the server's public addresses.
type uplinkNIC struct {
	name      string // rescue name, for messages only
	mac       string // normalized
	permanent bool   // mac is the permanent address
}

// pickUplink finds the uplink in the report: the NIC with the MAC the
// network names, else the one the rescue system routes through, else the
// only NIC with link.
func pickUplink(hw *report.Report, wantMAC string) (*uplinkNIC, error) {
	if len(hw.NICs) == 0 {
		return nil, errors.New("hardware report: no NIC listed")
	}

	if wantMAC != "" {
		return uplinkByMAC(hw.NICs, wantMAC)
	}

	return uplinkByRoute(hw.NICs)
}

// uplinkByMAC is the NIC whose permanent or current MAC the network names.
func uplinkByMAC(nics []report.NIC, wantMAC string) (*uplinkNIC, error) {
	for _, n := range nics {
		for _, m := range []string{n.PermanentMAC, n.MAC} {
			if got, err := normalizeMAC(m); err == nil && got == wantMAC {
				return newUplink(n)
			}
		}
	}

	return nil, fmt.Errorf("network: uplinkMac %s is not a NIC in the hardware report", wantMAC)
}

// uplinkByRoute is the one NIC the rescue system routes through, else the
// only NIC with link; more than one of either is for the NodeClass to say.
func uplinkByRoute(nics []report.NIC) (*uplinkNIC, error) {
	var routed, up []report.NIC

	for _, n := range nics {
		if n.HasDefaultRoute {
			routed = append(routed, n)
		}

		if n.LinkUp {
			up = append(up, n)
		}
	}

	switch {
	case len(routed) == 1:
		return newUplink(routed[0])
	case len(routed) > 1:
		return nil, fmt.Errorf("hardware report: %d NICs have the default route; set network.uplinkMac", len(routed))
	case len(up) == 1:
		return newUplink(up[0])
	default:
		return nil, fmt.Errorf("hardware report: cannot tell the uplink (%d NICs with link, none routed); set network.uplinkMac", len(up))
	}
}

// newUplink is the uplink NIC n, its MAC normalised.
func newUplink(n report.NIC) (*uplinkNIC, error) {
	mac, err := normalizeMAC(n.HardwareMAC())
	if err != nil {
		return nil, fmt.Errorf("hardware report: NIC %q: MAC %q: %w", n.Name, n.HardwareMAC(), err)
	}

	return &uplinkNIC{name: n.Name, mac: mac, permanent: n.PermanentMAC != ""}, nil
}

// selectorFor matches the uplink by its permanent MAC, which survives the
// reboot from rescue into Talos; the current MAC only when no permanent one
// was reported.
func selectorFor(u *uplinkNIC) (cel.Expression, error) {
	field := "link.permanent_addr"
	if !u.permanent {
		field = "link.hardware_addr"
	}

	return cel.ParseBooleanExpression(fmt.Sprintf("mac(%s) == %q", field, u.mac), celenv.LinkLocator())
}

// networkDocuments renders the node's network as multi-document config.
func networkDocuments(hostname string, up *uplinkNIC, n *parsedNetwork) ([]config.Document, error) {
	sel, err := selectorFor(up)
	if err != nil {
		return nil, fmt.Errorf("uplink selector: %w", err)
	}

	alias := network.NewLinkAliasConfigV1Alpha1(UplinkLink)
	alias.Selector.Match = sel

	link := network.NewLinkConfigV1Alpha1(UplinkLink)
	link.LinkUp = new(true)

	if n.ipv6.IsValid() {
		link.LinkAddresses = append(link.LinkAddresses, network.AddressConfig{AddressAddress: n.ipv6})

		if !n.gateway.IsLinkLocalUnicast() {
			// a global gateway is outside the /128: reach it on-link first
			link.LinkRoutes = append(link.LinkRoutes, network.RouteConfig{
				RouteDestination: network.Prefix{Prefix: netip.PrefixFrom(n.gateway, 128)},
			})
		}

		// no destination: the default route of the gateway's family
		link.LinkRoutes = append(link.LinkRoutes, network.RouteConfig{
			RouteGateway: network.Addr{Addr: n.gateway},
			RouteSource:  network.Addr{Addr: n.ipv6.Addr()},
		})
	}

	dhcp := network.NewDHCPv4ConfigV1Alpha1(UplinkLink)
	// the hostname is the NodeClaim's; a DHCP-provided one must not win
	dhcp.ConfigIgnoreHostname = new(true)

	docs := []config.Document{alias, link, dhcp}

	for _, pn := range n.private {
		name := vlanLink(pn.vlan)

		v := network.NewVLANConfigV1Alpha1(name)
		v.VLANIDConfig = pn.vlan
		v.ParentLinkConfig = UplinkLink
		v.LinkUp = new(true)
		v.LinkMTU = pn.mtu

		for _, a := range pn.addresses {
			v.LinkAddresses = append(v.LinkAddresses, network.AddressConfig{AddressAddress: a})
		}

		docs = append(docs, v)

		if pn.dhcp {
			d := network.NewDHCPv4ConfigV1Alpha1(name)
			d.ConfigIgnoreHostname = new(true)
			// the public uplink keeps the default route
			d.ConfigRouteMetric = 2048

			docs = append(docs, d)
		}
	}

	host := network.NewHostnameConfigV1Alpha1()
	host.ConfigHostname = hostname
	docs = append(docs, host)

	if len(n.nameservers) > 0 {
		r := network.NewResolverConfigV1Alpha1()
		for _, a := range n.nameservers {
			r.ResolverNameservers = append(r.ResolverNameservers, network.NameserverConfig{Address: network.Addr{Addr: a}})
		}

		docs = append(docs, r)
	}

	return docs, nil
}
