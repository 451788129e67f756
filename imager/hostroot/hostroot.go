// Package hostroot locates the host's /sys, /dev and /proc. Tests and the
// simulated rescue hosts point it at a fake tree (--sysroot DIR or
// EM_IMAGER_SYSROOT=DIR); on a real machine it is the root filesystem.
package hostroot

import (
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

// ReadString reads a small sysfs/proc file, trimmed; "" when absent.
func ReadString(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
