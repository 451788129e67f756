package blockdev

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
)

// node is one block device as sysfs shows it: a whole disk or a partition.
type node struct {
	name      string // kernel name: sda, sda1, loop3, dm-0
	disk      string // the whole disk: name itself, or the partition's parent
	partition bool
}

// nodeAt reads what a block device's sysfs directory says about it.
func nodeAt(dir string) node {
	n := node{name: filepath.Base(dir)}
	n.disk = n.name
	if _, err := os.Stat(filepath.Join(dir, "partition")); err == nil {
		n.partition = true
		n.disk = filepath.Base(filepath.Dir(dir))
	}
	return n
}

// byDevnum finds a block device from its numbers, as the kernel maps them
// in /sys/dev/block/MAJ:MIN.
func byDevnum(root hostroot.Root, major, minor uint32) (node, bool) {
	dir, err := filepath.EvalSymlinks(root.Sys("dev", "block", fmt.Sprintf("%d:%d", major, minor)))
	if err != nil {
		return node{}, false
	}
	return nodeAt(dir), true
}

// byName finds a block device from its kernel name.
func byName(root hostroot.Root, name string) (node, bool) {
	if name == "" || name == "." || name == ".." {
		return node{}, false
	}
	for _, p := range []string{root.Sys("class", "block", name), root.Sys("block", name)} {
		if dir, err := filepath.EvalSymlinks(p); err == nil {
			return nodeAt(dir), true
		}
	}
	// Fake trees without /sys/class/block: partitions sit under their disk.
	if m, _ := filepath.Glob(root.Sys("block", "*", name, "partition")); len(m) > 0 {
		if dir, err := filepath.EvalSymlinks(filepath.Dir(m[0])); err == nil {
			return nodeAt(dir), true
		}
	}
	return node{}, false
}

// byPath finds the block device a path names (a mount source, a swap
// device, a loop device's backing file). On a real host it is stat(2)'s
// answer: a device node's own numbers, or for a regular file the device its
// filesystem lives on. In a fake tree, device nodes are files: a real node
// (Disk.Device) still goes by its numbers, the others by their name.
func byPath(root hostroot.Root, p string) (node, bool) {
	if !filepath.IsAbs(p) {
		return node{}, false
	}
	if !root.Fake() {
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil {
			return node{}, false
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFBLK:
			return byDevnum(root, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		case unix.S_IFREG:
			return byDevnum(root, unix.Major(st.Dev), unix.Minor(st.Dev))
		}
		return node{}, false
	}
	if !strings.HasPrefix(p, "/dev/") {
		return node{}, false
	}
	host, open, err := root.ResolveDev(p)
	if err != nil {
		return byName(root, filepath.Base(p))
	}
	var st unix.Stat_t
	if unix.Stat(open, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFBLK {
		if n, ok := byDevnum(root, unix.Major(st.Rdev), unix.Minor(st.Rdev)); ok {
			return n, true
		}
	}
	return byName(root, filepath.Base(host))
}

// disksBehind lists the whole disks a device's data lives on: its own disk,
// the members (slaves) of a dm or md device, and for a loop device the disk
// that holds its backing file, recursively.
func disksBehind(root hostroot.Root, n node) []string {
	seen := map[string]bool{}
	var out []string
	var walk func(n node, depth int)
	walk = func(n node, depth int) {
		if depth > 16 || seen[n.disk] {
			return
		}
		seen[n.disk] = true
		out = append(out, n.disk)
		if ents, err := os.ReadDir(root.Sys("block", n.disk, "slaves")); err == nil {
			for _, e := range ents {
				if m, ok := byName(root, e.Name()); ok {
					walk(m, depth+1)
				}
			}
		}
		// A fake tree's backing-file paths belong to a host that is not this one.
		if !root.Fake() {
			b := strings.TrimSuffix(hostroot.ReadString(root.Sys("block", n.disk, "loop", "backing_file")), " (deleted)")
			if m, ok := byPath(root, b); ok {
				walk(m, depth+1)
			}
		}
	}
	walk(n, 0)
	return out
}
