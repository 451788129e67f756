// Package hwinfo lists the physical network interfaces from /sys/class/net,
// with the permanent MAC that survives a reboot into another OS (the one a
// Talos config selects the uplink by).
package hwinfo

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

var pciAddr = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// NICs lists physical interfaces sorted by name. Virtual ones (loopback,
// bonds, bridges, VLANs, veth, tun: no `device` link, or under
// /devices/virtual) are skipped; bond members are kept with their permanent MAC.
func NICs(root hostroot.Root) ([]report.NIC, error) {
	dir := root.Sys("class", "net")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	v4, v6 := defaultRouteIfaces(root)
	out := []report.NIC{}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if !physicalNIC(p) {
			continue
		}
		n := readNIC(root, e.Name(), p)
		n.HasDefaultRoute = carriesDefaultRoute(e.Name(), linkBase(filepath.Join(p, "master")), v4, v6)
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// physicalNIC reports whether the interface at p is backed by a device: virtual interfaces
// (bridges, bonds, veths, loopback) live under /devices/virtual/ or have no device link.
func physicalNIC(p string) bool {
	if rp, err := filepath.EvalSymlinks(p); err == nil && strings.Contains(rp, "/devices/virtual/") {
		return false
	}
	_, err := os.Lstat(filepath.Join(p, "device"))
	return err == nil
}

// readNIC reads one interface's sysfs attributes; the default route is left to the caller,
// which holds the routing tables.
func readNIC(root hostroot.Root, name, p string) report.NIC {
	n := report.NIC{Name: name, MAC: strings.ToLower(hostroot.ReadString(filepath.Join(p, "address")))}
	n.Driver = linkBase(filepath.Join(p, "device", "driver"))
	n.PCIAddress = nicPCIAddress(p)
	n.LinkUp = linkUp(hostroot.ReadString(filepath.Join(p, "operstate")), hostroot.ReadString(filepath.Join(p, "carrier")))
	if s, err := strconv.Atoi(hostroot.ReadString(filepath.Join(p, "speed"))); err == nil && s > 0 && n.LinkUp {
		n.SpeedMbps = s
	}
	n.PermanentMAC = permanentMAC(root, name, p)
	return n
}

// linkBase is the last element of the symlink at p's target, or "" when p is no symlink.
func linkBase(p string) string {
	t, err := os.Readlink(p)
	if err != nil {
		return ""
	}
	return filepath.Base(t)
}

// nicPCIAddress finds the PCI function the interface's device link ends at, or one level
// below it for virtio (…/0000:00:03.0/virtio2).
func nicPCIAddress(p string) string {
	t, err := filepath.EvalSymlinks(filepath.Join(p, "device"))
	if err != nil {
		return ""
	}
	for _, c := range []string{filepath.Base(t), filepath.Base(filepath.Dir(t))} {
		if pciAddr.MatchString(c) {
			return c
		}
	}
	return ""
}

// linkUp reads operstate, trusting carrier only when the driver reports no state ("unknown").
func linkUp(oper, carrier string) bool {
	return oper == "up" || (oper == "unknown" && carrier == "1")
}

// carriesDefaultRoute reports whether the interface, or the bond or bridge it is enslaved to,
// holds an IPv4 or IPv6 default route.
func carriesDefaultRoute(name, master string, v4, v6 map[string]bool) bool {
	if v4[name] || v6[name] {
		return true
	}
	return master != "" && (v4[master] || v6[master])
}

// permanentMAC asks the driver (ethtool ioctl) on a real host, then reads
// the bonding driver's record, then a `permaddr` file (fake trees only:
// the kernel exposes the permanent address through netlink, not sysfs).
func permanentMAC(root hostroot.Root, name, dir string) string {
	if !root.Fake() {
		if m := ethtoolPermAddr(name); m != "" {
			return m
		}
	}
	for _, f := range []string{filepath.Join(dir, "bonding_slave", "perm_hwaddr"), filepath.Join(dir, "permaddr")} {
		if m := normalizeMAC(hostroot.ReadString(f)); m != "" {
			return m
		}
	}
	return ""
}

func normalizeMAC(s string) string {
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) == 0 {
		return ""
	}
	zero := true
	for _, b := range hw {
		if b != 0 {
			zero = false
		}
	}
	if zero {
		return ""
	}
	return hw.String()
}

// defaultRouteIfaces reads /proc/net/route and /proc/net/ipv6_route.
func defaultRouteIfaces(root hostroot.Root) (v4, v6 map[string]bool) {
	v4, v6 = map[string]bool{}, map[string]bool{}
	if f, err := os.Open(root.Proc("net", "route")); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			fl := strings.Fields(s.Text())
			// Iface Destination Gateway Flags RefCnt Use Metric Mask ...
			if len(fl) >= 8 && fl[1] == "00000000" && fl[7] == "00000000" {
				v4[fl[0]] = true
			}
		}
		f.Close()
	}
	if f, err := os.Open(root.Proc("net", "ipv6_route")); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			fl := strings.Fields(s.Text())
			// dest prefixlen src srcprefix nexthop metric refcnt use flags iface
			if len(fl) >= 10 && fl[0] == strings.Repeat("0", 32) && fl[1] == "00" && fl[9] != "lo" {
				v6[fl[9]] = true
			}
		}
		f.Close()
	}
	return v4, v6
}
