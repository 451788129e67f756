package rescue

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

type fixture struct {
	srv    *Server
	signer ssh.Signer
	home   string
	bin    string
}

func newKey(t *testing.T) ssh.Signer {
	t.Helper()
	s, err := NewHostKey()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func start(t *testing.T, env ...string) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{signer: newKey(t), home: filepath.Join(dir, "home"), bin: filepath.Join(dir, "bin")}
	other := newKey(t)
	var err error
	f.srv, err = Start(Options{
		Addr:           "127.0.0.1:0",
		AuthorizedKeys: []string{string(ssh.MarshalAuthorizedKey(other.PublicKey())), string(ssh.MarshalAuthorizedKey(f.signer.PublicKey()))},
		Home:           f.home,
		BinDir:         f.bin,
		Env:            env,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.srv.Close() })
	return f
}

func (f *fixture) dial(t *testing.T, user string, key ssh.Signer) (*ssh.Client, error) {
	t.Helper()
	return ssh.Dial("tcp", f.srv.Addr(), &ssh.ClientConfig{
		User:            user,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(key)},
		HostKeyCallback: ssh.FixedHostKey(f.srv.HostKey()),
		Timeout:         10 * time.Second,
	})
}

func (f *fixture) client(t *testing.T) *ssh.Client {
	t.Helper()
	c, err := f.dial(t, User, f.signer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func run(t *testing.T, c *ssh.Client, cmd string, stdin io.Reader) (stdout, stderr string, err error) {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var o, e bytes.Buffer
	s.Stdout, s.Stderr, s.Stdin = &o, &e, stdin
	err = s.Run(cmd)
	return o.String(), e.String(), err
}

func TestUploadAndRunWithSudo(t *testing.T) {
	f := start(t, "EM_IMAGER_SYSROOT=/sim/sysroot")
	c := f.client(t)
	sc, err := sftp.NewClient(c)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	wd, err := sc.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	realHome, _ := filepath.EvalSymlinks(f.home)
	if wd != realHome {
		t.Fatalf("sftp working directory %q, want home %q", wd, realHome)
	}
	script := "#!/bin/sh\necho \"out $1 $EM_IMAGER_SYSROOT $(pwd) $HOME\"\necho err >&2\nexit 3\n"
	w, err := sc.Create("tool")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte(script)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sc.Chmod("tool", 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(f.home, "tool"))
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("uploaded file: %v %v", st, err)
	}
	stdout, stderr, err := run(t, c, "sudo -n ./tool arg1", nil)
	var ee *ssh.ExitError
	if !errors.As(err, &ee) || ee.ExitStatus() != 3 {
		t.Fatalf("exit: %v", err)
	}
	want := "out arg1 /sim/sysroot " + f.home + " " + f.home + "\n"
	if stdout != want {
		t.Fatalf("stdout %q, want %q", stdout, want)
	}
	if stderr != "err\n" {
		t.Fatalf("stderr %q", stderr)
	}
	// stdin reaches the command; exit 0 gives no error.
	stdout, _, err = run(t, c, "cat", strings.NewReader("hello"))
	if err != nil || stdout != "hello" {
		t.Fatalf("cat: %q %v", stdout, err)
	}
	// A command that does not exist: status 127 like sh.
	_, _, err = run(t, c, "./missing", nil)
	if !errors.As(err, &ee) || ee.ExitStatus() != 127 {
		t.Fatalf("missing command: %v", err)
	}
}

func TestAuthentication(t *testing.T) {
	f := start(t)
	if _, err := f.dial(t, User, newKey(t)); err == nil || !strings.Contains(err.Error(), "unable to authenticate") {
		t.Fatalf("unknown key: %v", err)
	}
	if _, err := f.dial(t, "root", f.signer); err == nil {
		t.Fatal("user root logged in")
	}
	c, err := f.dial(t, User, f.signer)
	if err != nil {
		t.Fatalf("authorized key refused: %v", err)
	}
	c.Close()
	if _, err := Start(Options{Addr: "127.0.0.1:0", Home: t.TempDir(), AuthorizedKeys: []string{"ssh-ed25519 not-base64"}}); err == nil {
		t.Fatal("bad authorized key accepted")
	}
	if _, err := Start(Options{Home: t.TempDir()}); err == nil {
		t.Fatal("empty address accepted")
	}
}

func TestSFTPConfinedToHome(t *testing.T) {
	f := start(t)
	c := f.client(t)
	sc, err := sftp.NewClient(c)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(f.home, "escape")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		filepath.Join(outside, "secret"),
		"../secret",
		"escape/secret",
		"/etc/hostname",
	} {
		if _, err := sc.Open(p); !errors.Is(err, os.ErrPermission) {
			t.Errorf("open %s: %v, want permission denied", p, err)
		}
	}
	if _, err := sc.Create("escape/new"); !errors.Is(err, os.ErrPermission) {
		t.Errorf("create through symlink: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); !os.IsNotExist(err) {
		t.Errorf("file created outside home: %v", err)
	}
	if err := sc.Symlink("/etc", "etc"); !errors.Is(err, os.ErrPermission) {
		t.Errorf("symlink to outside: %v", err)
	}
	// Inside home everything works, also with absolute paths.
	realHome, _ := filepath.EvalSymlinks(f.home)
	if err := sc.Mkdir("d"); err != nil {
		t.Fatal(err)
	}
	w, err := sc.Create(filepath.Join(realHome, "d", "f"))
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("data"))
	w.Close()
	if err := sc.Rename("d/f", "d/g"); err != nil {
		t.Fatal(err)
	}
	ents, err := sc.ReadDir("d")
	if err != nil || len(ents) != 1 || ents[0].Name() != "g" || ents[0].Size() != 4 {
		t.Fatalf("readdir: %v %v", ents, err)
	}
	// Removing the escape symlink removes the link, not its target.
	if err := sc.Remove("escape"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(outside, "secret")); err != nil {
		t.Fatalf("target of removed link: %v", err)
	}
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startSleeper runs a long command and returns its session and pid.
func startSleeper(t *testing.T, f *fixture, c *ssh.Client) (*ssh.Session, int, chan error) {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start("echo $$; exec sleep 300"); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 32)
	n, err := out.Read(line)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(line[:n])))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	return s, pid, done
}

func TestPowerOffKillsCommandsAndDropsConnections(t *testing.T) {
	f := start(t)
	c := f.client(t)
	_, pid, done := startSleeper(t, f, c)
	if err := f.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("command reported success after power-off")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("process %d survived power-off: %v", pid, err)
	}
	if _, err := f.dial(t, User, f.signer); err == nil {
		t.Fatal("SSH still answers after power-off")
	}
}

func TestClosingSessionKillsCommand(t *testing.T) {
	f := start(t)
	c := f.client(t)
	s, pid, _ := startSleeper(t, f, c)
	s.Close()
	waitGone(t, pid)
}

func TestSignalIsDelivered(t *testing.T) {
	f := start(t)
	c := f.client(t)
	s, _, done := startSleeper(t, f, c)
	if err := s.Signal(ssh.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := <-done
	var ee *ssh.ExitError
	if !errors.As(err, &ee) || ee.Signal() != "TERM" {
		t.Fatalf("wait after SIGTERM: %v", err)
	}
}

// BenchmarkSFTPUpload measures uploading a helper-sized binary (8 MiB)
// through the simulated rescue system, as the controller does per server.
func BenchmarkSFTPUpload(b *testing.B) {
	dir := b.TempDir()
	signer, err := NewHostKey() // any ed25519 key works as a client key
	if err != nil {
		b.Fatal(err)
	}
	srv, err := Start(Options{Addr: "127.0.0.1:0", Home: filepath.Join(dir, "home"),
		AuthorizedKeys: []string{string(ssh.MarshalAuthorizedKey(signer.PublicKey()))}})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	c, err := ssh.Dial("tcp", srv.Addr(), &ssh.ClientConfig{User: User, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(srv.HostKey())})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	sc, err := sftp.NewClient(c, sftp.UseConcurrentWrites(true))
	if err != nil {
		b.Fatal(err)
	}
	defer sc.Close()
	payload := make([]byte, 8<<20)
	_, _ = rand.Read(payload)
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		w, err := sc.Create("em-imager")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.ReadFrom(bytes.NewReader(payload)); err != nil {
			b.Fatal(err)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
