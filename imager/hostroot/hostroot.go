// Package hostroot locates the host's /sys, /dev and /proc. Tests and the
// simulated rescue hosts point it at a fake tree (--sysroot DIR or
// EM_IMAGER_SYSROOT=DIR); on a real machine it is the root filesystem.
package hostroot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EnvVar names the environment variable that sets the root when --sysroot is not given.
const EnvVar = "EM_IMAGER_SYSROOT"

// Root is a directory holding sys/, dev/ and proc/; "" is the real root.
type Root struct{ Dir string }

// Resolve picks the flag value, else the environment variable, else the real root.
func Resolve(flag string) Root {
	if flag != "" {
		return Root{Dir: flag}
	}
	return Root{Dir: os.Getenv(EnvVar)}
}

// Fake reports whether the root is a fake tree (ioctls on real devices are skipped).
func (r Root) Fake() bool { return r.Dir != "" && r.Dir != "/" }

func (r Root) join(top string, elem []string) string {
	return filepath.Join(append([]string{r.base(), top}, elem...)...)
}

func (r Root) base() string {
	if r.Dir == "" {
		return "/"
	}
	return r.Dir
}

// Sys joins elem under the host's /sys.
func (r Root) Sys(elem ...string) string { return r.join("sys", elem) }

// Proc joins elem under the host's /proc.
func (r Root) Proc(elem ...string) string { return r.join("proc", elem) }

// Dev maps a device path as the user writes it (/dev/nvme0n1) to where it is
// opened; paths outside /dev are used as they are (disk image files).
func (r Root) Dev(path string) string {
	if !r.Fake() || !strings.HasPrefix(filepath.Clean(path), "/dev/") {
		return path
	}
	return filepath.Join(r.Dir, filepath.Clean(path))
}

// ResolveDev follows the symbolic links of a device path (a udev link such
// as /dev/disk/by-id/nvme-..., pointing at ../../nvme0n1) and returns the
// path as the host names it (/dev/nvme0n1) and the path to open. In a fake
// tree, links under /dev resolve inside the tree, absolute ones included,
// as they would for a process chrooted there. Every check on a disk runs on
// what this returns, never on the link.
func (r Root) ResolveDev(path string) (hostPath, openPath string, err error) {
	clean := filepath.Clean(path)
	if !r.Fake() || !strings.HasPrefix(clean, "/dev/") {
		p, err := filepath.EvalSymlinks(clean)
		if err != nil {
			return "", "", err
		}
		return p, p, nil
	}
	p, err := r.inside(clean)
	if err != nil {
		return "", "", err
	}
	return p, filepath.Join(r.Dir, p), nil
}

// inside resolves an absolute path component by component within r.Dir.
func (r Root) inside(path string) (string, error) {
	resolved := "/"
	rest := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for links := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved) // ".." of "/" is "/", as in a chroot
			continue
		}
		next := filepath.Join(resolved, c)
		fi, err := os.Lstat(filepath.Join(r.Dir, next))
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			resolved = next
			continue
		}
		if links++; links > 40 {
			return "", &os.PathError{Op: "resolve", Path: path, Err: errors.New("too many levels of symbolic links")}
		}
		target, err := os.Readlink(filepath.Join(r.Dir, next))
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			resolved = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	if resolved == "/" {
		return "", fmt.Errorf("%s resolves to the root directory", path)
	}
	return resolved, nil
}

// ReadString reads a small sysfs/proc file, trimmed; "" when absent.
func ReadString(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
