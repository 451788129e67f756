package blockdev

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
)

// usage is what the running system uses one whole disk for.
type usage struct {
	what []string
	root bool
}

type usageMap map[string]*usage

func (m usageMap) add(disks []string, root bool, what string) {
	for _, d := range disks {
		u := m[d]
		if u == nil {
			u = &usage{}
			m[d] = u
		}
		u.root = u.root || root
		dup := false
		for _, w := range u.what {
			dup = dup || w == what
		}
		if !dup {
			u.what = append(u.what, what)
		}
	}
}

// mount is one mounted filesystem; major 0 when the kernel gave no device
// numbers (overlay, tmpfs, btrfs) or only names were available.
type mount struct {
	major, minor  uint32
	source, mount string
}

// systemUse finds, for every whole disk, what the running system uses it
// for. Devices are identified by number wherever the kernel gives one: the
// MAJ:MIN of each line of /proc/self/mountinfo (right even when the source
// reads /dev/root), stat("/")'s device on a real host (right even when /proc
// is not what it seems), then mapped through /sys/dev/block to whole disks,
// following dm/md members and loop backing files. Mount sources and swap
// devices are resolved by path only where no number exists.
func systemUse(root hostroot.Root) usageMap {
	use := usageMap{}
	if !root.Fake() {
		var st unix.Stat_t
		if unix.Stat("/", &st) == nil && unix.Major(st.Dev) != 0 {
			if n, ok := byDevnum(root, unix.Major(st.Dev), unix.Minor(st.Dev)); ok {
				use.add(disksBehind(root, n), true, fmt.Sprintf("/dev/%s is the device of / (%d:%d)", n.name, unix.Major(st.Dev), unix.Minor(st.Dev)))
			}
		}
	}
	for _, m := range readMountinfo(root) {
		n, ok := node{}, false
		if m.major != 0 {
			n, ok = byDevnum(root, m.major, m.minor)
		}
		if !ok {
			n, ok = byPath(root, m.source)
		}
		if !ok {
			continue
		}
		use.add(disksBehind(root, n), m.mount == "/", label(n, m.source)+" mounted on "+m.mount)
	}
	for _, s := range readSwaps(root) {
		if n, ok := byPath(root, s); ok {
			use.add(disksBehind(root, n), false, label(n, s)+" used as swap")
		}
	}
	return use
}

// label names a device, with the name the mount table used when it differs.
func label(n node, source string) string {
	l := "/dev/" + n.name
	if source != l && strings.HasPrefix(source, "/") {
		l += " (as " + source + ")"
	}
	return l
}

// readMountinfo reads /proc/self/mountinfo, else the names of /proc/self/mounts
// or /proc/mounts (trees that have only those).
func readMountinfo(root hostroot.Root) []mount {
	if f, err := os.Open(root.Proc("self", "mountinfo")); err == nil {
		defer f.Close()
		var ms []mount
		s := bufio.NewScanner(f)
		s.Buffer(nil, 1<<20)
		for s.Scan() {
			if m, ok := parseMountinfoLine(s.Text()); ok {
				ms = append(ms, m)
			}
		}
		return ms
	}
	return readMounts(root)
}

// parseMountinfoLine reads one line of /proc/self/mountinfo:
// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS.
func parseMountinfoLine(line string) (mount, bool) {
	f := strings.Fields(line)
	sep := -1
	for i, x := range f {
		if x == "-" && i >= 6 {
			sep = i
			break
		}
	}
	if sep < 0 || len(f) < sep+3 {
		return mount{}, false
	}
	m := mount{source: unescape(f[sep+2]), mount: unescape(f[4])}
	if maj, min, ok := strings.Cut(f[2], ":"); ok {
		a, err1 := strconv.ParseUint(maj, 10, 32)
		b, err2 := strconv.ParseUint(min, 10, 32)
		if err1 == nil && err2 == nil {
			m.major, m.minor = uint32(a), uint32(b)
		}
	}
	return m, true
}

// readMounts reads /proc/self/mounts (or /proc/mounts) where mountinfo is
// missing: sources and mount points, no device numbers.
func readMounts(root hostroot.Root) []mount {
	for _, p := range []string{root.Proc("self", "mounts"), root.Proc("mounts")} {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		var ms []mount
		s := bufio.NewScanner(f)
		for s.Scan() {
			if fields := strings.Fields(s.Text()); len(fields) >= 2 {
				ms = append(ms, mount{source: unescape(fields[0]), mount: unescape(fields[1])})
			}
		}
		f.Close()
		return ms
	}
	return nil
}

// unescape undoes the octal escapes of /proc/mounts (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func readSwaps(root hostroot.Root) []string {
	f, err := os.Open(root.Proc("swaps"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	s.Scan() // header
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) > 0 {
			out = append(out, unescape(fields[0]))
		}
	}
	return out
}
