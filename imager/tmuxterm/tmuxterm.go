// Package tmuxterm runs a command in a real pseudo-terminal for em-imager's
// tests: a tmux server of the test's own (its own socket, so tests on the
// same machine never share one), keys typed with send-keys and the screen
// read back with capture-pane, as a person would see it. It needs tmux
// (`make deps`); without it the test fails, never skips.
package tmuxterm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Term is one tmux session running one command.
type Term struct {
	tb     testing.TB
	socket string
}

// Width and Height of the terminal every test gets.
const (
	Width  = 160
	Height = 50
)

// WaitLimit bounds every wait for the screen: a failure bound for a
// loaded machine, never a measure of speed.
const WaitLimit = 3 * time.Minute

// exitMarker is printed by the shell after the command, with its status.
const exitMarker = "[em-imager test: exit "

var exitRe = regexp.MustCompile(regexp.QuoteMeta(exitMarker) + `(\d+)\]`)

// Start runs command (a shell command line, run by sh -c in dir) in a new
// tmux session with env added to the environment. The session ends with
// the test.
func Start(tb testing.TB, dir string, env []string, command string) *Term {
	tb.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		tb.Fatal("tmux not found: the terminal tests run em-imager in tmux; run `make deps` (package tmux)")
	}
	sockDir, err := os.MkdirTemp("", "tmux-")
	if err != nil {
		tb.Fatal(err)
	}
	t := &Term{tb: tb, socket: filepath.Join(sockDir, "s")}
	tb.Cleanup(func() {
		_ = exec.Command("tmux", "-S", t.socket, "kill-server").Run()
		os.RemoveAll(sockDir)
	})
	// The shell stays after the command so that the screen can still be
	// read; the marker gives the exit status.
	script := fmt.Sprintf("cd %s && %s; echo \"%s$?]\"; exec sleep 3600", shellQuote(dir), command, exitMarker)
	args := []string{"-S", t.socket, "-f", "/dev/null", "new-session", "-d", "-x", strconv.Itoa(Width), "-y", strconv.Itoa(Height)}
	for _, e := range env {
		args = append(args, "-e", e)
	}
	args = append(args, "sh", "-c", script)
	cmd := exec.Command("tmux", args...)
	cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	return t
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func (t *Term) tmux(args ...string) string {
	t.tb.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", t.socket}, args...)...).CombinedOutput()
	if err != nil {
		t.tb.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Screen is what the terminal shows now, a line per row, trailing blanks cut.
func (t *Term) Screen() string {
	t.tb.Helper()
	return t.tmux("capture-pane", "-p")
}

// History is everything the terminal showed, scrolled-off lines included:
// a line redrawn in place is there once, in its last state.
func (t *Term) History() string {
	t.tb.Helper()
	return t.tmux("capture-pane", "-p", "-S", "-", "-E", "-")
}

// Send types keys (tmux key names: "n", "Enter", "C-c").
func (t *Term) Send(keys ...string) {
	t.tb.Helper()
	t.tmux(append([]string{"send-keys"}, keys...)...)
}

// WaitFor polls the screen until match says yes, and returns that screen.
func (t *Term) WaitFor(what string, match func(screen string) bool) string {
	t.tb.Helper()
	deadline := time.Now().Add(WaitLimit)
	for {
		s := t.Screen()
		if match(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.tb.Fatalf("waited %v for %s; the screen:\n%s", WaitLimit, what, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitText waits until the screen shows text.
func (t *Term) WaitText(text string) string {
	t.tb.Helper()
	return t.WaitFor(fmt.Sprintf("%q", text), func(s string) bool { return strings.Contains(s, text) })
}

// Exit waits for the command to end and returns its exit status.
func (t *Term) Exit() int {
	t.tb.Helper()
	s := t.WaitFor("the command to end", exitRe.MatchString)
	n, _ := strconv.Atoi(exitRe.FindStringSubmatch(s)[1])
	return n
}

// Ended reports whether the command has ended.
func (t *Term) Ended() bool {
	t.tb.Helper()
	return exitRe.MatchString(t.Screen())
}
