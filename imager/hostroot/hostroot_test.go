package hostroot

import "testing"

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
