package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/faketree"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/loopdev"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/tmuxterm"
)

// The terminal tests run the real static binary in a real pseudo-terminal
// (tmux) and read the screen as the operator would see it. The disk is a
// real loop device, reached through a fake sysfs that calls it an NVMe
// disk, so that --disk auto takes it (auto never takes a loop device).

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// sharedBinary builds em-imager once for the package's tests.
func sharedBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "em-imager-bin-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "em-imager")
		build := exec.Command("go", "build", "-o", binPath, "../cmd/em-imager")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

const (
	ttyModel  = "SAMSUNG MZQL2960HCJR-00A07"
	ttySerial = "S64FNE0R654321"
)

// ttyHost is a loop device holding an earlier installation (a GPT, an ext4
// partition labelled "olddata"), described by a fake sysfs as nvme0n1.
func ttyHost(t *testing.T) (string, *loopdev.Device) {
	t.Helper()
	d := loopdev.Attach(t, 64<<20, 512)
	parts := d.Partition(t, 16, 16)
	loopdev.Run(t, "mkfs.ext4", "-q", "-F", "-L", "olddata", parts[1])
	root := buildHost(t, faketree.Host{
		Disks: []faketree.Disk{{Name: "nvme0n1", Size: d.Size, Device: d.Path, Model: ttyModel, Serial: ttySerial}},
		NICs:  []faketree.NIC{{Name: "eno1", MAC: "a0:36:9f:00:00:01", Driver: "ixgbe", PCI: "0000:01:00.0", Up: true, Speed: 10000}},
	})
	return root, d
}

// ttyCase is what the write tests at a terminal share: the binary, a
// host whose disk holds an earlier install, the image server, a working
// directory and the environment that points em-imager at the host.
type ttyCase struct {
	bin, root, dir string
	d              *loopdev.Device
	srv            *server
	env            []string
}

func newTTYCase(t *testing.T) *ttyCase {
	t.Helper()
	fixtures(t)
	c := &ttyCase{bin: sharedBinary(t), srv: newServer(t), dir: t.TempDir()}
	c.root, c.d = ttyHost(t)
	c.env = []string{"EM_IMAGER_SYSROOT=" + c.root}
	return c
}

func readReport(t *testing.T, path string) *report.Report {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var r report.Report
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
	if dec.More() {
		t.Fatalf("%s holds more than one JSON object:\n%s", path, b)
	}
	return &r
}

// statusRe matches the terminal's status line (progress.go statusText).
var statusRe = regexp.MustCompile(`(?m)^(download|write|sync|verify|done|failed) +(\[[#-]{20}\]|[0-9.]+ [kMG]?B in)`)

// TestTerminalQuestion: at a terminal, write --disk auto names the disk
// (model, serial, size, what it holds now) and asks; "n" leaves the device
// byte for byte as it was. "y" writes it, with one status line redrawn in
// place while it runs.
func TestTerminalQuestion(t *testing.T) {
	c := newTTYCase(t)
	bin, d, srv, dir, env := c.bin, c.d, c.srv, c.dir, c.env
	cmd := fmt.Sprintf("%s write --image '%s' --sha256 %s > report.json", bin, srv.url("xz"), rawSHA)

	before := d.Bytes(t)
	term := tmuxterm.Start(t, dir, env, cmd)
	screen := term.WaitText("[y/N]")
	for _, want := range []string{
		"/dev/nvme0n1, " + ttyModel + ", serial " + ttySerial + ", 67.1 MB, nvme SSD, 512-byte sectors",
		"chosen: --disk auto",
		`holds now: GPT, 2 partitions: 1 16.8 MB Linux filesystem, 2 16.8 MB ext4 "olddata"`,
		"Erase /dev/nvme0n1 and write this image onto it? [y/N]",
	} {
		if !strings.Contains(screen, want) {
			t.Fatalf("the question lacks %q:\n%s", want, screen)
		}
	}
	term.Send("n", "Enter")
	if code := term.Exit(); code != report.ExitCode(report.CodeNotConfirmed) {
		t.Fatalf("exit status %d after n:\n%s", code, term.Screen())
	}
	if r := readReport(t, filepath.Join(dir, "report.json")); r.Error == nil || r.Error.Code != report.CodeNotConfirmed {
		t.Fatalf("report after n: %+v", r)
	}
	if !bytes.Equal(d.Bytes(t), before) {
		t.Fatal(`answering "n" changed the disk`)
	}

	srv.mode.Store("slow")
	term = tmuxterm.Start(t, dir, env, cmd)
	term.WaitText("[y/N]")
	term.Send("y", "Enter")
	// While it runs the screen shows one status line, whose text changes.
	seen := map[string]bool{}
	for !term.Ended() {
		s := term.Screen()
		lines := statusRe.FindAllString(s, -1)
		if len(lines) > 1 {
			t.Fatalf("%d status lines on the screen at once:\n%s", len(lines), s)
		}
		if len(lines) == 1 && !strings.HasPrefix(lines[0], "done") {
			for _, l := range strings.Split(s, "\n") {
				if statusRe.MatchString(l) {
					seen[l] = true
				}
			}
		}
	}
	if code := term.Exit(); code != 0 {
		t.Fatalf("exit status %d:\n%s", code, term.History())
	}
	if len(seen) < 2 {
		t.Fatalf("the status line was seen in %d state(s) while writing: %v", len(seen), seen)
	}
	hist := term.History()
	if all := statusRe.FindAllString(hist, -1); len(all) != 1 || !strings.HasPrefix(all[0], "done") {
		t.Fatalf("the terminal's history holds %d status lines, want the one last \"done\" line (redrawn in place):\n%s", len(all), hist)
	}
	if !holds(t, d, rawImage) {
		t.Fatal("the device does not hold the image after y")
	}
	if r := readReport(t, filepath.Join(dir, "report.json")); !r.OK || !r.Image.Verified {
		t.Fatalf("report after y: %+v", r)
	}
}

// TestTerminalTypeahead: a "y" typed before the question appeared does
// not answer it (the operator had not read which disk): the question
// waits, and "n" then leaves the disk as it was.
func TestTerminalTypeahead(t *testing.T) {
	c := newTTYCase(t)
	bin, d, srv, dir := c.bin, c.d, c.srv, c.dir
	before := d.Bytes(t)
	// read takes the first line only; "y" stays queued at the terminal
	// when em-imager starts, whatever the machine's speed.
	cmd := fmt.Sprintf("read -r _; %s write --image '%s' --sha256 %s > report.json", bin, srv.url("xz"), rawSHA)
	term := tmuxterm.Start(t, dir, c.env, cmd)
	term.Send("go", "Enter", "y", "Enter")
	term.WaitText("[y/N]")
	term.Send("n", "Enter")
	if code := term.Exit(); code != report.ExitCode(report.CodeNotConfirmed) {
		t.Fatalf("exit status %d: the typed-ahead y answered the question:\n%s", code, term.History())
	}
	if !bytes.Equal(d.Bytes(t), before) {
		t.Fatal("a typed-ahead y wrote the disk")
	}
}

// TestTerminalYesAndDryRun: --yes and --dry-run never ask; the dry run
// shows its plan and writes nothing.
func TestTerminalYesAndDryRun(t *testing.T) {
	c := newTTYCase(t)
	bin, d, srv, dir, env := c.bin, c.d, c.srv, c.dir, c.env
	before := d.Bytes(t)
	term := tmuxterm.Start(t, dir, env, fmt.Sprintf("%s write --image '%s' --sha256 %s --dry-run > dry.json", bin, srv.url("zst"), rawSHA))
	if code := term.Exit(); code != 0 {
		t.Fatalf("dry run exit status %d:\n%s", code, term.Screen())
	}
	s := term.Screen()
	for _, want := range []string{"Disk   /dev/nvme0n1, " + ttyModel, `ext4 "olddata"`, "the image's GPT is for 512-byte sectors", "Dry run: nothing was written"} {
		if !strings.Contains(s, want) {
			t.Fatalf("the dry run's screen lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "[y/N]") || !bytes.Equal(d.Bytes(t), before) {
		t.Fatalf("the dry run asked or wrote:\n%s", s)
	}
	if r := readReport(t, filepath.Join(dir, "dry.json")); !r.OK || !r.DryRun || r.Disk.Path != "/dev/nvme0n1" {
		t.Fatalf("dry run report: %+v", r)
	}
	term = tmuxterm.Start(t, dir, env, fmt.Sprintf("%s write --image '%s' --sha256 %s --yes > report.json", bin, srv.url("zst"), rawSHA))
	if code := term.Exit(); code != 0 || strings.Contains(term.History(), "[y/N]") {
		t.Fatalf("--yes: exit status %d:\n%s", code, term.History())
	}
	if !holds(t, d, rawImage) {
		t.Fatal("the device does not hold the image after --yes")
	}
}

// TestTerminalInspect: at a terminal inspect shows tables on stderr, and
// stdout keeps exactly the JSON report a program gets.
func TestTerminalInspect(t *testing.T) {
	bin := sharedBinary(t)
	root, _ := ttyHost(t)
	dir := t.TempDir()
	args := fmt.Sprintf("inspect --image-size %d", imageSize)
	term := tmuxterm.Start(t, dir, []string{"EM_IMAGER_SYSROOT=" + root}, bin+" "+args+" > inspect.json")
	if code := term.Exit(); code != 0 {
		t.Fatalf("exit status %d:\n%s", code, term.Screen())
	}
	s := term.Screen()
	for _, want := range []string{
		"write --disk auto --image-size 25165824 would write /dev/nvme0n1",
		"   DISK          SIZE     TYPE      SECTOR  MODEL                       SERIAL",
		"*  /dev/nvme0n1  67.1 MB  nvme SSD  512     " + ttyModel + "  " + ttySerial,
		`holds: GPT, 2 partitions: 1 16.8 MB Linux filesystem, 2 16.8 MB ext4 "olddata"`,
		"chosen: --disk auto: the smallest non-rotational disk that fits",
		"NIC   MAC                PERMANENT MAC  DRIVER  PCI           LINK  SPEED       DEFAULT ROUTE",
		"eno1  a0:36:9f:00:00:01  -              ixgbe   0000:01:00.0  up    10000 Mb/s",
		"kexec: not possible (kexec_unsupported): the rescue kernel has no kexec",
	} {
		if !strings.Contains(s, want) {
			t.Fatalf("the screen lacks %q:\n%s", want, s)
		}
	}
	got, err := os.ReadFile(filepath.Join(dir, "inspect.json"))
	if err != nil {
		t.Fatal(err)
	}
	pipe := exec.Command(bin, strings.Fields(args)...)
	pipe.Env = append(os.Environ(), "EM_IMAGER_SYSROOT="+root)
	var errb bytes.Buffer
	pipe.Stderr = &errb
	want, err := pipe.Output()
	if err != nil || errb.Len() != 0 {
		t.Fatalf("inspect without a terminal: %v, stderr %q", err, errb.String())
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("stdout at a terminal differs from stdout in a pipe:\n%s\n---\n%s", got, want)
	}
	readReport(t, filepath.Join(dir, "inspect.json"))
}

// TestTerminalBareWrite: a person typing `em-imager write` gets the usage
// and exit status 2, no JSON on the screen; a program still gets its JSON.
func TestTerminalBareWrite(t *testing.T) {
	bin := sharedBinary(t)
	term := tmuxterm.Start(t, t.TempDir(), nil, bin+" write")
	if code := term.Exit(); code != 2 {
		t.Fatalf("exit status %d:\n%s", code, term.Screen())
	}
	s := term.Screen()
	if !strings.Contains(s, "usage: em-imager write --manifest URL") || !strings.Contains(s, `Run "em-imager write -h" for the flags.`) || strings.Contains(s, "{") {
		t.Fatalf("screen:\n%s", s)
	}
	cmd := exec.Command(bin, "write")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("exit: %v", err)
	}
	r, perr := report.Parse(out.Bytes())
	if perr != nil || r.Error.Code != report.CodeInvalidArgument || !strings.Contains(errb.String(), "usage: em-imager write") {
		t.Fatalf("stdout %q stderr %q", out.String(), errb.String())
	}
}

// TestNoTerminalUnchanged: without a terminal, write asks nothing and
// prints plain progress lines (no carriage returns, no escape sequences)
// and one JSON report on stdout, as the controller expects.
func TestNoTerminalUnchanged(t *testing.T) {
	c := newTTYCase(t)
	bin, root, d, srv := c.bin, c.root, c.d, c.srv
	srv.mode.Store("slow")
	cmd := exec.Command(bin, "write", "--image", srv.url("xz"), "--sha256", rawSHA)
	cmd.Env = append(os.Environ(), "EM_IMAGER_SYSROOT="+root)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	if !holds(t, d, rawImage) {
		t.Fatal("the device does not hold the image")
	}
	stderr := errb.String()
	if strings.ContainsAny(stderr, "\r\x1b") || strings.Contains(stderr, "[y/N]") {
		t.Fatalf("terminal output without a terminal: %q", stderr)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	for _, l := range lines {
		if !strings.HasPrefix(l, "em-imager: ") {
			t.Fatalf("stderr line %q", l)
		}
	}
	if len(lines) < 2 || !strings.HasPrefix(lines[len(lines)-1], "em-imager: done") {
		t.Fatalf("progress lines:\n%s", stderr)
	}
	dec := json.NewDecoder(&out)
	var r report.Report
	if err := dec.Decode(&r); err != nil || dec.More() || !r.OK {
		t.Fatalf("stdout is not one report: %v %+v", err, r)
	}
}
