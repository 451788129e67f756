package hostroot

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPaths(t *testing.T) {
	real := Root{}
	if real.Sys("block", "sda", "size") != "/sys/block/sda/size" || real.Dev("/dev/sda") != "/dev/sda" || real.Fake() {
		t.Fatalf("real root maps wrongly: %s %s", real.Sys("block", "sda", "size"), real.Dev("/dev/sda"))
	}
	fake := Root{Dir: "/tmp/host"}
	if got := fake.Dev("/dev/nvme0n1"); got != "/tmp/host/dev/nvme0n1" {
		t.Fatalf("Dev = %s", got)
	}
	if got := fake.Dev("/var/disk.img"); got != "/var/disk.img" {
		t.Fatalf("Dev of a file outside /dev = %s", got)
	}
	if got := fake.Proc("self", "mounts"); got != "/tmp/host/proc/self/mounts" {
		t.Fatalf("Proc = %s", got)
	}
	t.Setenv(EnvVar, "/env/root")
	if Resolve("").Dir != "/env/root" || Resolve("/flag").Dir != "/flag" {
		t.Fatal("Resolve does not prefer the flag over the environment")
	}
}

func TestResolveDev(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"dev/disk/by-id", "dev/disk/by-path", "dev/mapper"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "dev", "sda"), nil, 0o644)
	os.Symlink("../../sda", filepath.Join(dir, "dev/disk/by-id/ata-X"))            // udev's relative link
	os.Symlink("/dev/disk/by-id/ata-X", filepath.Join(dir, "dev/disk/by-path/p1")) // absolute: inside the root
	os.Symlink("../../../../../../dev/sda", filepath.Join(dir, "dev/mapper/up"))   // ".." stops at the root
	os.Symlink("loop", filepath.Join(dir, "dev/loop"))
	fake := Root{Dir: dir}
	for _, p := range []string{"/dev/sda", "/dev/disk/by-id/ata-X", "/dev/disk/by-path/p1", "/dev/mapper/up"} {
		host, open, err := fake.ResolveDev(p)
		if err != nil || host != "/dev/sda" || open != filepath.Join(dir, "dev/sda") {
			t.Errorf("%s: %q %q %v", p, host, open, err)
		}
	}
	if _, _, err := fake.ResolveDev("/dev/loop"); err == nil {
		t.Error("a link loop resolved")
	}
	if _, _, err := fake.ResolveDev("/dev/nvme0n1"); !os.IsNotExist(err) {
		t.Errorf("missing device: %v", err)
	}
	// The real root resolves with the kernel's rules.
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(filepath.Join(dir, "dev", "sda"), link)
	if host, open, err := (Root{}).ResolveDev(link); err != nil || host != filepath.Join(dir, "dev", "sda") || open != host {
		t.Errorf("real root: %q %q %v", host, open, err)
	}
}
