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
		name := e.Name()
		p := filepath.Join(dir, name)
		if rp, err := filepath.EvalSymlinks(p); err == nil && strings.Contains(rp, "/devices/virtual/") {
			continue
		}
		if _, err := os.Lstat(filepath.Join(p, "device")); err != nil {
			continue
		}
		n := report.NIC{Name: name, MAC: strings.ToLower(hostroot.ReadString(filepath.Join(p, "address")))}
		if t, err := os.Readlink(filepath.Join(p, "device", "driver")); err == nil {
			n.Driver = filepath.Base(t)
		}
		// The device link ends at the PCI function, or one level below it
		// for virtio (…/0000:00:03.0/virtio2).
		if t, err := filepath.EvalSymlinks(filepath.Join(p, "device")); err == nil {
			for _, c := range []string{filepath.Base(t), filepath.Base(filepath.Dir(t))} {
				if pciAddr.MatchString(c) {
					n.PCIAddress = c
					break
				}
			}
		}
		oper := hostroot.ReadString(filepath.Join(p, "operstate"))
		carrier := hostroot.ReadString(filepath.Join(p, "carrier"))
		n.LinkUp = oper == "up" || (oper == "unknown" && carrier == "1")
		if s, err := strconv.Atoi(hostroot.ReadString(filepath.Join(p, "speed"))); err == nil && s > 0 && n.LinkUp {
			n.SpeedMbps = s
		}
		n.PermanentMAC = permanentMAC(root, name, p)
		master := ""
		if t, err := os.Readlink(filepath.Join(p, "master")); err == nil {
			master = filepath.Base(t)
		}
		n.HasDefaultRoute = v4[name] || v6[name] || (master != "" && (v4[master] || v6[master]))
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
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
