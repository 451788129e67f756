package rescue

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	simrescue "github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/rescue"
)

func TestParseHostKeyPin(t *testing.T) {
	pin := PinOf(newKey(t).PublicKey())
	if got, err := ParseHostKeyPin(string(pin)); err != nil || got != pin {
		t.Fatalf("ParseHostKeyPin(%q) = %q, %v", pin, got, err)
	}
	if got, err := ParseHostKeyPin(""); err != nil || got != "" {
		t.Fatalf(`ParseHostKeyPin("") = %q, %v`, got, err)
	}
	for _, bad := range []string{"MD5:16:27:ac:a5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48", "SHA256:short",
		strings.TrimPrefix(string(pin), "SHA256:"), string(pin) + "AA", "SHA256:" + strings.Repeat("!", 43)} {
		if _, err := ParseHostKeyPin(bad); err == nil {
			t.Errorf("ParseHostKeyPin(%q) accepted", bad)
		}
	}
}

// A restart keeps the pin (stored as a string, loaded into a new Dialer), and
// a rescue host that answers with another key in the same boot fails at once
// with a typed error instead of being retried until the phase times out.
func TestHostKeyPinSurvivesARestartAndAChangedKeyFailsAtOnce(t *testing.T) {
	user := newKey(t)
	keyA, keyB := newKey(t), newKey(t)
	dir := t.TempDir()
	start := func(addr string, hostKey ssh.Signer) *simrescue.Server {
		srv, err := simrescue.Start(simrescue.Options{Addr: addr, Home: filepath.Join(dir, "home"), BinDir: filepath.Join(dir, "bin"),
			HostKey: hostKey, AuthorizedKeys: []string{string(ssh.MarshalAuthorizedKey(user.PublicKey()))}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		return srv
	}
	srv := start("127.0.0.1:0", keyA)
	host, port := splitAddr(t, srv.Addr())
	dialer := func() *Dialer {
		return &Dialer{User: "rescue", Port: port, Timeout: 5 * time.Second,
			Signers: func() ([]ssh.Signer, error) { return []ssh.Signer{user}, nil }}
	}

	first := dialer()
	s, err := first.Dial(context.Background(), host)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s.HostKey != PinOf(keyA.PublicKey()) || first.Pinned(host) != s.HostKey {
		t.Fatalf("session host key %q, pinned %q, want %q", s.HostKey, first.Pinned(host), PinOf(keyA.PublicKey()))
	}
	stored := string(s.HostKey) // what the install keeps on the server's tag

	// The controller restarts: a new Dialer with the stored pin.
	restarted := dialer()
	pin, err := ParseHostKeyPin(stored)
	if err != nil {
		t.Fatal(err)
	}
	restarted.Pin(host, pin)
	if s, err := restarted.Dial(context.Background(), host); err != nil {
		t.Fatalf("Dial with the stored pin: %v", err)
	} else {
		s.Close()
	}

	// Another sshd (another key) answers on the same address within the boot.
	srv.Close()
	start(srv.Addr(), keyB)
	// Retrying would end with the context's error (which carries the last
	// error only as text): the typed error shows WaitDial stopped at once.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = restarted.WaitDial(ctx, host, 10*time.Millisecond)
	var changed *HostKeyChangedError
	if !errors.As(err, &changed) {
		t.Fatalf("WaitDial against a changed host key = %v, want a *HostKeyChangedError", err)
	}
	if changed.Pinned != pin || changed.Presented != PinOf(keyB.PublicKey()) || changed.Host != host {
		t.Errorf("error %+v", changed)
	}
	if restarted.Pinned(host) != pin {
		t.Error("a refused key replaced the pin")
	}

	// A reboot into rescue (Forget) trusts the new boot's key.
	restarted.Forget(host)
	s, err = restarted.Dial(context.Background(), host)
	if err != nil {
		t.Fatalf("Dial after Forget: %v", err)
	}
	s.Close()
	if s.HostKey != PinOf(keyB.PublicKey()) {
		t.Errorf("new boot pinned %q, want %q", s.HostKey, PinOf(keyB.PublicKey()))
	}
}

// markerImager is a script that records it ran by creating name in the home.
func markerImager(name string) []byte {
	return []byte("#!/bin/sh\ntouch " + name + "\necho '{}' \nexit 0\n")
}

// em-imager runs as root only when the file on the host has the sha256 of the
// controller's build, checked in the same command that runs it.
func TestImagerIsCheckedOnTheHostBeforeItRuns(t *testing.T) {
	s, home := dialHostHome(t)
	genuine, tampered := markerImager("ran-genuine"), markerImager("ran-tampered")
	if err := s.Upload(context.Background(), ImagerName, genuine, 0o755); err != nil {
		t.Fatal(err)
	}
	// Someone with access to the rescue host swaps the binary.
	if err := os.WriteFile(filepath.Join(home, ImagerName), tampered, 0o755); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	code, err := s.Run(context.Background(), ImagerCommand(sha256Hex(genuine), "version"), nil, &stderr)
	if err != nil || code != exitImagerMismatch {
		t.Fatalf("tampered binary: exit %d, %v; want %d", code, err, exitImagerMismatch)
	}
	if !strings.Contains(stderr.String(), "sha256 mismatch") {
		t.Errorf("stderr %q", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(home, "ran-tampered")); !os.IsNotExist(err) {
		t.Fatal("the tampered binary ran")
	}
	// The check can pass: the genuine binary runs.
	if err := os.WriteFile(filepath.Join(home, ImagerName), genuine, 0o755); err != nil {
		t.Fatal(err)
	}
	if code, err := s.Run(context.Background(), ImagerCommand(sha256Hex(genuine), "version"), nil, nil); err != nil || code != 0 {
		t.Fatalf("genuine binary: exit %d, %v", code, err)
	}
	if _, err := os.Stat(filepath.Join(home, "ran-genuine")); err != nil {
		t.Fatal("the genuine binary did not run")
	}
}

// lyingSHA256sum installs a sha256sum on the rescue host's PATH that prints
// sum for plain calls and checks honestly with --check: the host looks like
// it has the right file until the moment em-imager would run.
func lyingSHA256sum(t *testing.T, binDir, sum string) {
	t.Helper()
	real := "/usr/bin/sha256sum"
	if _, err := os.Stat(real); err != nil {
		t.Fatalf("coreutils sha256sum not found: %v", err)
	}
	script := "#!/bin/sh\nif [ \"$1\" = --check ]; then exec " + real + " \"$@\"; fi\necho '" + sum + "  '\"$1\"\n"
	if err := os.WriteFile(filepath.Join(binDir, "sha256sum"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestRunImagerRefusesABinaryThatChangedAfterUpload(t *testing.T) {
	s, home := dialHostHome(t)
	genuine, tampered := markerImager("ran-genuine"), markerImager("ran-tampered")
	if err := os.WriteFile(filepath.Join(home, ImagerName), tampered, 0o755); err != nil {
		t.Fatal(err)
	}
	lyingSHA256sum(t, filepath.Join(filepath.Dir(home), "bin"), sha256Hex(genuine))
	_, err := RunImager(context.Background(), s, ImagerArgs{Binary: genuine, SHA256: "ab"}, nil)
	if !errors.Is(err, ErrImagerDigestMismatch) {
		t.Fatalf("RunImager = %v, want ErrImagerDigestMismatch", err)
	}
	if _, err := os.Stat(filepath.Join(home, "ran-tampered")); !os.IsNotExist(err) {
		t.Fatal("the tampered binary ran")
	}
}

func TestUploadIsCheckedWithSHA256OnTheHost(t *testing.T) {
	s, home := dialHostHome(t)
	if err := s.Upload(context.Background(), ImagerName, []byte("binary"), 0o755); err != nil {
		t.Fatalf("Upload: %v", err)
	}
	// A host whose file does not hold what was sent (same size, other bytes).
	lyingSHA256sum(t, filepath.Join(filepath.Dir(home), "bin"), sha256Hex([]byte("BINARY")))
	err := s.Upload(context.Background(), ImagerName, []byte("binary"), 0o755)
	if err == nil || !strings.Contains(err.Error(), sha256Hex([]byte("BINARY"))) {
		t.Fatalf("Upload to a host with other bytes = %v", err)
	}
}
