package cli

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

func mainRun(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, nil, &out, &errb)
	return code, out.String(), errb.String()
}

// Every command's -h shows its own usage and flags, with descriptions.
func TestHelpPerCommand(t *testing.T) {
	cases := map[string][]string{
		"write":        {"usage: em-imager write --manifest URL", "-manifest string", "-manifest-sha256 string", "-dry-run", "-yes", "do not ask before writing", "-image-size int"},
		"inspect":      {"usage: em-imager inspect", "-manifest string", "-disk string", "disk to describe", "-allow-virtual"},
		"write-config": {"usage: em-imager write-config --disk PATH", "-disk PATH", "that em-imager write imaged"},
		"erase":        {"usage: em-imager erase", "-all-disks", "-method string", "-full", "hours on an HDD"},
		"kexec":        {"usage: em-imager kexec --disk PATH", "-dry-run", "-config-sha256 HEX", "-jump-delay duration"},
		"version":      {"usage: em-imager version"},
	}
	for cmd, wants := range cases {
		for _, args := range [][]string{{cmd, "-h"}, {cmd, "--help"}, {cmd, "--disk", "/dev/sda", "-help"}, {"help", cmd}} {
			code, out, _ := mainRun(args...)
			if code != 0 {
				t.Fatalf("%v: exit %d", args, code)
			}
			for _, w := range wants {
				if !strings.Contains(out, w) {
					t.Fatalf("%v lacks %q:\n%s", args, w, out)
				}
			}
			for other := range cases {
				if other != cmd && other != "write" && strings.Contains(out, "usage: em-imager "+other) {
					t.Fatalf("%v shows %s's usage:\n%s", args, other, out)
				}
			}
			if cmd != "write" && strings.Contains(out, "-verify-readback") {
				t.Fatalf("%v shows write's flags:\n%s", args, out)
			}
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	for _, args := range [][]string{{"frobnicate"}, {"wirte", "--help"}, {"help", "wirte"}} {
		code, out, errb := mainRun(args...)
		if code != 2 || out != "" || !strings.Contains(errb, "unknown command") ||
			!strings.Contains(errb, "the commands are write, inspect, write-config, erase, kexec, publish, presign, schematic, version") {
			t.Fatalf("%v: exit %d stdout %q stderr %q", args, code, out, errb)
		}
	}
	code, out, errb := mainRun()
	if code != 2 || out != "" || !strings.Contains(errb, "em-imager write   --manifest URL") {
		t.Fatalf("no command: exit %d stderr %q", code, errb)
	}
	code, out, _ = mainRun("help")
	if code != 0 || !strings.Contains(out, "em-imager inspect") {
		t.Fatalf("help: %d %q", code, out)
	}
}

// Bare write: the usage on stderr, exit 2; stdout (no terminal here)
// still holds the one JSON report.
func TestBareWrite(t *testing.T) {
	code, out, errb := mainRun("write")
	r, err := report.Parse([]byte(out))
	if code != 2 || err != nil || r.Error.Code != report.CodeInvalidArgument || !strings.Contains(errb, "usage: em-imager write") {
		t.Fatalf("exit %d stdout %q stderr %q", code, out, errb)
	}
}

// publish's, presign's and schematic's help come from their packages, through the
// binary's dispatch.
func TestPublishHelp(t *testing.T) {
	bin := sharedBinary(t)
	for _, args := range [][]string{{"publish", "-h"}, {"help", "publish"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Usage: em-imager publish") || !strings.Contains(string(out), "-imager-binary") {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	for _, args := range [][]string{{"presign", "-h"}, {"help", "presign"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Usage: em-imager presign") || !strings.Contains(string(out), "-expires") {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	for _, args := range [][]string{{"schematic", "-h"}, {"help", "schematic"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Usage: em-imager schematic") || !strings.Contains(string(out), "-extension") {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	out, err := exec.Command(bin, "schematic").Output()
	if err != nil || len(strings.TrimSpace(string(out))) != 64 {
		t.Fatalf("em-imager schematic: %v %q, want an ID", err, out)
	}
}
