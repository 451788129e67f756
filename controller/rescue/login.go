package rescue

import (
	"context"
	"fmt"
	"io"
	"strings"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
)

// Login is how one rescue boot lets the controller in: the user to log in
// as (always with the controller's key) and the password the API shows for
// that boot, which only sudo ever gets, on stdin.
//
// Scaleway's rescue systems differ: some let the key-only user "rescue" run
// sudo without a password; others have a per-server user (em-XXXXX) whose
// sudo asks for the password the console and the API show for the boot. The
// API's rescue_server gives both of each boot, so the controller uses them
// and needs no setting per zone.
type Login struct {
	User     string
	Password string
}

// String and GoString never show the password, so that a Login printed by
// mistake (%v, %+v, %#v) does not leak it.
func (l Login) String() string {
	if l.Password == "" {
		return "rescue login " + l.User + " (no password)"
	}
	return "rescue login " + l.User + " (password given)"
}

// GoString keeps %#v from printing the password too.
func (l Login) GoString() string { return l.String() }

// LoginFor is the login of srv's current rescue boot: the user and password
// the API shows for it (Server.RescueServer), or d.User without a password
// when the API shows no user (a server not in rescue, an API that leaves it
// out).
func (d *Dialer) LoginFor(srv *baremetal.Server) Login {
	if srv != nil && srv.RescueServer != nil && srv.RescueServer.User != "" {
		return Login{User: srv.RescueServer.User, Password: srv.RescueServer.Password}
	}
	return Login{User: d.User}
}

// SudoRefusedError says the rescue user may not run em-imager as root, with the
// password the API gave for the boot (or without one, when it gave none).
// Retrying the same boot will not help.
type SudoRefusedError struct {
	User string
	// Why is what went wrong, in words; sudo's own message (never holding
	// the password) is part of it.
	Why string
}

func (e *SudoRefusedError) Error() string {
	return fmt.Sprintf("sudo as %s on the rescue host: %s", e.User, e.Why)
}

// sudoMode is how a session runs a command as root.
type sudoMode int

const (
	sudoUnknown      sudoMode = iota
	sudoNoPassword            // root already, or sudo -n works (the key-only "rescue" user)
	sudoWithPassword          // sudo wants the boot's password (the per-server em-XXXXX user)
)

// sudoRequired is what sudo -n answers when the policy wants a password
// ("sudo: a password is required"); sudo prints it in English whatever the
// locale of the rescue system, which the session does not set.
const sudoRequired = "a password is required"

// maxSudoSaid is how much of what sudo printed a refusal quotes.
const maxSudoSaid = 200

// probeSudo finds out, once per session, whether the rescue user runs sudo
// without a password or needs the boot's password, and checks that
// password before any command that reads stdin gets it: a refused password
// never reaches em-imager, and sudo never reads further lines of a
// command's input as more attempts.
func (s *Session) probeSudo(ctx context.Context) (sudoMode, error) {
	if s.sudo != sudoUnknown {
		return s.sudo, nil
	}
	var out, errOut cappedBuffer
	out.max, errOut.max = maxSmallOutput, maxSmallOutput
	code, err := s.Run(ctx, `if [ "$(id -u)" = 0 ]; then exit 0; fi; exec sudo -n true`, &out, &errOut)
	if err != nil {
		return sudoUnknown, fmt.Errorf("checking sudo on the rescue host: %w", err)
	}
	if code == 0 {
		s.sudo = sudoNoPassword
		return s.sudo, nil
	}
	said := strings.TrimSpace(errOut.String())
	if !strings.Contains(said, sudoRequired) {
		// Not a password question (no sudo at all, a broken host): the
		// command as before, which fails with its own message.
		s.sudo = sudoNoPassword
		return s.sudo, nil
	}
	if s.login.Password == "" {
		return sudoUnknown, &SudoRefusedError{User: s.login.User, Why: "sudo needs a password and the API shows none for this rescue boot"}
	}
	if strings.ContainsAny(s.login.Password, "\n\r\x00") {
		// sudo -S reads one line: such a password cannot be given that way.
		return sudoUnknown, &SudoRefusedError{User: s.login.User, Why: "the API's rescue password has a line break, which sudo -S cannot read"}
	}
	out.Reset()
	errOut.Reset()
	// Only the password on stdin, then end of input: a refused password is
	// one attempt, and sudo stops at the end of input instead of asking again.
	code, err = s.RunInput(ctx, sudoWithStdin+"true", s.passwordLine(nil), &out, &errOut)
	if err != nil {
		return sudoUnknown, fmt.Errorf("checking the rescue password with sudo: %w", err)
	}
	if code != 0 {
		// sudo's own words, on one line and short: they go into an event.
		// The password comes out before the cut, which could split it.
		said := strings.Join(strings.Fields(strings.ReplaceAll(s.scrub(strings.TrimSpace(errOut.String())), "\n", "; ")), " ")
		if len(said) > maxSudoSaid {
			said = said[:maxSudoSaid] + " [cut]"
		}
		return sudoUnknown, &SudoRefusedError{User: s.login.User, Why: "sudo refused the rescue password the API shows for this boot: " + said}
	}
	s.sudo = sudoWithPassword
	return s.sudo, nil
}

// sudoWithStdin runs what follows as root with the password read from
// stdin: -S reads it from stdin, -p with an empty argument prints no
// prompt (stderr is read as em-imager's), -k ignores a cached credential
// so that sudo always reads the password line (else the line would go on
// to the command's stdin).
const sudoWithStdin = "sudo -k -S -p '' "

// passwordLine is the stdin of a command run with sudoWithStdin: the
// boot's password and a newline, then rest (nil: nothing).
//
// sudo -S reads its password one byte at a time up to the first newline
// and no further, so the command it then runs (em-imager) reads from
// exactly the byte after it: the machine config of write-config, or the
// end of input for write and inspect. The password is never in a command
// line (the rescue host's process list), an argument or em-imager's input.
// probeSudo checked the password first, so sudo reads this line once and
// never takes a line of rest for another attempt.
func (s *Session) passwordLine(rest io.Reader) io.Reader {
	line := strings.NewReader(s.login.Password + "\n")
	if rest == nil {
		return line
	}
	return io.MultiReader(line, rest)
}

// scrub takes the password out of text read from the rescue host (a
// hostile host could echo it back into an error).
func (s *Session) scrub(text string) string {
	if s.login.Password == "" {
		return text
	}
	return strings.ReplaceAll(text, s.login.Password, "[password]")
}

// imagerRun is the command and stdin that run em-imager args as root,
// checked against binarySHA256 (ImagerCommand), with stdin (nil: none) as
// em-imager's input.
func (s *Session) imagerRun(ctx context.Context, binarySHA256 string, stdin io.Reader, args ...string) (string, io.Reader, error) {
	mode, err := s.probeSudo(ctx)
	if err != nil {
		return "", nil, err
	}
	if mode == sudoWithPassword {
		return imagerCommand(sudoWithStdin, binarySHA256, args...), s.passwordLine(stdin), nil
	}
	return ImagerCommand(binarySHA256, args...), stdin, nil
}
