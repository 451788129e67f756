package rescue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"golang.org/x/crypto/ssh"

	simrescue "github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/rescue"
)

// syncBuffer is a bytes.Buffer safe for the rescue host's logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// loginHost starts a rescue host that lets in user only, whose sudo wants
// sudoPassword ("" none); its log (every command line it ran) goes to log.
func loginHost(t *testing.T, key ssh.Signer, user, sudoPassword string, log *syncBuffer) (*Dialer, string, string, string) {
	t.Helper()
	var transcripts string
	d, host, home := startHostWith(t, key, func(o *simrescue.Options, dir string) {
		transcripts = filepath.Join(dir, "transcripts")
		o.User, o.SudoPassword, o.Transcript = user, sudoPassword, transcripts
		o.Logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	return d, host, home, transcripts
}

// stdinImager stands in for em-imager: it keeps what it read on stdin in
// stdin.got (in the rescue user's home) and reports success.
var stdinImager = []byte("#!/bin/sh\ncat > stdin.got\nprintf '" +
	`{"version":1,"command":"%s","ok":true,"imager":"t","nics":[],"disk":{"path":"/dev/sda","sizeBytes":1,"logicalSectorSize":512,"rotational":false,"reason":"x"}}` +
	"' \"$1\"\n")

// The three rescue logins Scaleway gives: the key-only "rescue" user with
// passwordless sudo, a per-server em-XXXXX user whose sudo wants the boot's
// password (given on stdin, one line that sudo alone reads), and a password
// sudo refuses. em-imager reads exactly its own input in the first two and
// never runs in the third; the password is in no command line, no output
// the host gave back and no error.
func TestRescueLoginRunsEmImagerAsEachVariantAllows(t *testing.T) {
	const password = "pw-7c1e0a55d2b94f3e" // the API's, for this boot
	config := []byte("machine:\n  token: not-a-password\n")
	for _, tc := range []struct {
		name, user, sudoPassword string
		login                    Login
		refused                  string // "": em-imager runs
	}{
		{name: "key-only rescue user, passwordless sudo", user: "rescue", login: Login{User: "rescue"}},
		{name: "key-only rescue user, the API shows a password anyway", user: "rescue", login: Login{User: "rescue", Password: password}},
		{name: "per-server user, sudo wants the password", user: "em-a1b2c", sudoPassword: password, login: Login{User: "em-a1b2c", Password: password}},
		{name: "per-server user, sudo refuses the password", user: "em-a1b2c", sudoPassword: "another-password", login: Login{User: "em-a1b2c", Password: password},
			refused: "sudo refused the rescue password"},
		{name: "per-server user, the API shows no password", user: "em-a1b2c", sudoPassword: password, login: Login{User: "em-a1b2c"},
			refused: "shows none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log syncBuffer
			d, host, home, transcripts := loginHost(t, newKey(t), tc.user, tc.sudoPassword, &log)
			s, err := d.DialAs(context.Background(), host, tc.login)
			if err != nil {
				t.Fatalf("login as %s: %v", tc.login.User, err)
			}
			defer s.Close()
			_, err = RunWriteConfig(context.Background(), s, ConfigArgs{Binary: stdinImager, Disk: "/dev/sda", Config: config})
			got, readErr := os.ReadFile(filepath.Join(home, "stdin.got"))
			if tc.refused != "" {
				var refused *SudoRefusedError
				if !errors.As(err, &refused) || !strings.Contains(err.Error(), tc.refused) || refused.User != tc.login.User {
					t.Fatalf("write-config: %v, want a SudoRefusedError saying %q", err, tc.refused)
				}
				if readErr == nil {
					t.Errorf("em-imager ran although sudo refused (its stdin: %q)", got)
				}
			} else {
				if err != nil {
					t.Fatalf("write-config: %v", err)
				}
				if !bytes.Equal(got, config) {
					t.Errorf("em-imager read %q on stdin, want exactly the config %q", got, config)
				}
				// write has no input: em-imager reads the end of input at once.
				if _, err := RunImager(context.Background(), s, ImagerArgs{Binary: stdinImager, SHA256: "ab"}, nil); err != nil {
					t.Fatalf("write: %v", err)
				}
				if got, _ := os.ReadFile(filepath.Join(home, "stdin.got")); len(got) != 0 {
					t.Errorf("em-imager write read %q on stdin, want nothing", got)
				}
			}
			if err != nil && strings.Contains(err.Error(), password) {
				t.Errorf("the password is in the error: %v", err)
			}
			if !strings.Contains(log.String(), "exec") {
				t.Fatal("the rescue host logged no command: the check below means nothing")
			}
			if strings.Contains(log.String(), password) {
				t.Errorf("the password is on a command line the rescue host ran:\n%s", log.String())
			}
			files, _ := filepath.Glob(filepath.Join(transcripts, "*"))
			for _, f := range files {
				if b, _ := os.ReadFile(f); bytes.Contains(b, []byte(password)) {
					t.Errorf("the password is in what the rescue host printed (%s): %q", filepath.Base(f), b)
				}
			}
		})
	}
}

// A login is the API's user and password of the boot when it shows one,
// the configured user otherwise; printed, it never shows the password.
func TestRescueLoginComesFromTheAPI(t *testing.T) {
	d := &Dialer{User: "configured"}
	if got := d.LoginFor(&baremetal.Server{}); got != (Login{User: "configured"}) {
		t.Errorf("no rescue_server: %v, want the configured user without a password", got)
	}
	srv := &baremetal.Server{RescueServer: &baremetal.ServerRescueServer{User: "em-x1y2z", Password: "hunter2-secret"}}
	l := d.LoginFor(srv)
	if l.User != "em-x1y2z" || l.Password != "hunter2-secret" {
		t.Errorf("rescue_server: %v, want the API's user and password", l)
	}
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(f, l); strings.Contains(s, "hunter2") {
			t.Errorf("%s of a login shows the password: %s", f, s)
		}
		if s := fmt.Sprintf(f, &l); strings.Contains(s, "hunter2") {
			t.Errorf("%s of a *Login shows the password: %s", f, s)
		}
	}
	// The API shows no user: the configured one.
	if got := d.LoginFor(&baremetal.Server{RescueServer: &baremetal.ServerRescueServer{}}); got.User != "configured" {
		t.Errorf("empty rescue_server: %v", got)
	}
}

// The API's rescue user may be one the rescue system does not take the key
// for: the login is tried once more as RESCUE_SSH_USER (Dialer.User), which
// keeps the boot's password for sudo. When that user is refused too, the
// error names both.
func TestRescueLoginFallsBackToTheConfiguredUser(t *testing.T) {
	key := newKey(t)
	var log syncBuffer
	d, host, _, _ := loginHost(t, key, "rescue", "", &log)
	d.User = "rescue"
	s, err := d.DialAs(t.Context(), host, Login{User: "em-a1b2c", Password: "pw-api"})
	if err != nil {
		t.Fatalf("the API's user refused, RESCUE_SSH_USER accepted: %v", err)
	}
	defer s.Close()
	if s.login.User != "rescue" || s.login.Password != "pw-api" {
		t.Errorf("session logged in as %v, want rescue with the API's password", s.login)
	}

	d.User = "someone-else"
	if _, err := d.DialAs(t.Context(), host, Login{User: "em-a1b2c"}); err == nil ||
		!strings.Contains(err.Error(), "as em-a1b2c") || !strings.Contains(err.Error(), "as someone-else") {
		t.Errorf("both users refused: %v, want an error naming both", err)
	}
}
