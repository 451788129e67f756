package schematic

import (
	"bytes"
	"strings"
	"testing"
)

func run(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Main(args, &o, &e)
	return code, o.String(), e.String()
}

func TestCommandPrintsTheMetalISOSchematic(t *testing.T) {
	code, out, _ := run()
	want, _ := New([]string{MetalISOArg}, nil)
	id, _ := want.ID()
	if code != 0 || out != id+"\n" {
		t.Fatalf("em-imager schematic = %d %q, want %s", code, out, id)
	}
	if id == "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba" {
		t.Fatal("the default schematic is the factory's empty one, which lacks talos.config=metal-iso")
	}
	code, out, _ = run("--yaml", "--extension", "siderolabs/amd-ucode", "--kernel-arg", "net.ifnames=0")
	if code != 0 || !strings.Contains(out, "- talos.config=metal-iso\n        - net.ifnames=0\n") || !strings.Contains(out, "- siderolabs/amd-ucode") {
		t.Fatalf("--yaml = %d:\n%s", code, out)
	}
	if code, out, _ = run("--maintenance-api"); code != 0 || out != "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba\n" {
		t.Fatalf("--maintenance-api = %d %q, want the empty schematic", code, out)
	}
}

func TestCommandRefusesBadInput(t *testing.T) {
	for _, args := range [][]string{{"--extension", "nvidia"}, {"--kernel-arg", "a b"}, {"extra"}, {"--nope"}} {
		if code, out, errOut := run(args...); code != 2 || out != "" || !strings.Contains(errOut, "em-imager schematic:") {
			t.Errorf("%q: exit %d stdout %q stderr %q; want exit 2 and the reason on stderr", args, code, out, errOut)
		}
	}
	if code, out, _ := run("-h"); code != 0 || !strings.Contains(out, "-extension") {
		t.Errorf("-h: exit %d\n%s", code, out)
	}
}
