// Package rescue plays Scaleway's rescue system for one simulated server: a
// real SSH server (golang.org/x/crypto/ssh) that lets in only its user
// (Options.User, "rescue" by default) with the public keys given at reboot, serves SFTP (github.com/pkg/sftp)
// confined to the machine's home directory, and runs exec requests for real
// with /bin/sh.
//
// Exec requests run `/bin/sh -c <command>` with:
//
//	cwd   = Options.Home
//	PATH  = Options.BinDir:/usr/bin:/bin (BinDir holds a `sudo` that plays
//	        sudo's password policy (Options.SudoPassword), then drops its
//	        options and runs the rest: the process is root already; and an
//	        `id` that answers as the rescue user, uid 1000, so that clients
//	        go through sudo as on Scaleway)
//	HOME  = Options.Home, plus Options.Env (EM_IMAGER_SYSROOT=...)
//
// stdout and stderr stream back on the channel, the exit status is sent as
// "exit-status" (or "exit-signal" when the process was killed), and the whole
// process group is killed when the channel or connection closes, or when the
// server is closed (the machine powers off).
//
// SFTP sees the real paths of the machine's filesystem, but only Home and
// below: relative paths resolve against Home, anything outside it (including
// through symlinks) is refused with "permission denied". Upload the helper
// with a relative path (e.g. "em-imager") and run it as "./em-imager".
//
//	srv, err := rescue.Start(rescue.Options{Addr: "127.0.0.7:2222", AuthorizedKeys: keys, Home: home, BinDir: bin})
//	defer srv.Close()
//
// Tests and the SFTP upload benchmark:
//
//	go test -count=1 -race ./test/sim/rescue/
//	go test -run '^$' -bench . ./test/sim/rescue/
package rescue

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// User is the login the rescue system accepts when Options.User is empty.
const User = "rescue"

// Options configure one rescue SSH server.
type Options struct {
	// Addr to listen on, host:port (the machine's IPv4 and the SSH port).
	Addr string
	// User is the only login accepted (User when empty): "rescue" or a
	// per-server em-XXXXX, as the API shows for the boot.
	User string
	// SudoPassword, when set, is the password sudo asks for, as the
	// per-server rescue users' sudo does: sudo -n answers "a password is
	// required", sudo -S reads one line of stdin and compares. Empty:
	// sudo needs no password (the key-only "rescue" user).
	SudoPassword string
	// AuthorizedKeys are authorized_keys lines; only these keys may log in.
	AuthorizedKeys []string
	// Home is the rescue user's home: cwd of commands and SFTP's root.
	Home string
	// BinDir is put first on PATH; Start writes the sudo shim there.
	BinDir string
	// Env is added to the environment of commands (KEY=VALUE).
	Env []string
	// HostKey signs the server's host key; nil generates an ed25519 key.
	HostKey ssh.Signer
	// Logger receives connection and command logs; nil discards them.
	Logger *slog.Logger
	// Transcript, when set, is a directory where each command's stdout and
	// stderr are also written (<n>.stdout, <n>.stderr): what the client was
	// told, for tests that inspect it (em-imager's report and progress).
	Transcript string
	// Halted, when set, is asked after each command whether the machine
	// left rescue while it ran (em-imager kexec jumped): then no exit
	// status is sent and the connection drops, as when the kernel goes;
	// the caller closes the server. It must not block.
	Halted func() bool
}

// Server is a running rescue SSH server.
type Server struct {
	opts    Options
	ln      net.Listener
	config  *ssh.ServerConfig
	hostKey ssh.Signer
	log     *slog.Logger
	home    string // Home with symlinks resolved

	mu       sync.Mutex
	closed   bool
	conns    map[*ssh.ServerConn]struct{}
	procs    map[*os.Process]struct{}
	commands int // run so far, numbering the transcripts
	wg       sync.WaitGroup
}

const sudoShim = `#!/bin/sh
# sudo of the simulated rescue system. When sudo-password sits beside this
# script, play sudo's password policy as the per-server rescue users' sudo
# does: -n fails with sudo's words, -S reads one line of stdin (the shell's
# read takes one byte at a time from a pipe, as sudo does, so the command
# reads on from the byte after it) and compares. Then, the process being
# root already, drop sudo's options and run the command with the same
# environment.
nonint= stdin=
while [ $# -gt 0 ]; do
  case "$1" in
    -u|-g|-C|-D|-h|-p|-r|-t|-U) shift 2 ;;
    -n) nonint=1; shift ;;
    -S) stdin=1; shift ;;
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
pwfile="$(dirname "$0")/sudo-password"
if [ -f "$pwfile" ]; then
  if [ -n "$nonint" ]; then
    echo "sudo: a password is required" >&2
    exit 1
  fi
  if [ -z "$stdin" ]; then
    echo "sudo: a terminal is required to read the password; either use the -S option to read from standard input or configure an askpass helper" >&2
    exit 1
  fi
  IFS= read -r pw || true
  if [ "$pw" != "$(cat "$pwfile")" ]; then
    echo "Sorry, try again." >&2
    echo "sudo: 1 incorrect password attempt" >&2
    exit 1
  fi
fi
exec "$@"
`

// idShim answers "id -u" and "id -un" as the rescue user (uid 1000, not
// root, as Scaleway's rescue users are) and leaves the rest to id.
const idShim = `#!/bin/sh
case "$*" in
  -u) echo 1000 ;;
  -un|"-u -n"|"-n -u") cat "$(dirname "$0")/id-user" ;;
  *) exec /usr/bin/id "$@" ;;
esac
`

// Start listens on opts.Addr and serves in the background.
func Start(opts Options) (*Server, error) {
	opts, err := opts.checked()
	if err != nil {
		return nil, err
	}
	keys, err := parseAuthorizedKeys(opts.AuthorizedKeys)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Home, 0o700); err != nil {
		return nil, err
	}
	home, err := filepath.EvalSymlinks(opts.Home)
	if err != nil {
		return nil, err
	}
	if opts.BinDir != "" {
		if err := writeBinDir(opts); err != nil {
			return nil, err
		}
	}
	hostKey := opts.HostKey
	if hostKey == nil {
		if hostKey, err = NewHostKey(); err != nil {
			return nil, err
		}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		opts: opts, hostKey: hostKey, log: log.With("addr", opts.Addr), home: home,
		conns: map[*ssh.ServerConn]struct{}{}, procs: map[*os.Process]struct{}{},
	}
	s.config = &ssh.ServerConfig{
		PublicKeyCallback: publicKeyCallback(opts.User, keys, log),
		ServerVersion:     "SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13",
	}
	s.config.AddHostKey(hostKey)
	s.ln, err = net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("rescue: listen %s: %w", opts.Addr, err)
	}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// checked refuses options Start cannot serve and fills in the default user.
func (opts Options) checked() (Options, error) {
	if opts.Addr == "" {
		return opts, errors.New("rescue: Addr is empty")
	}
	if opts.Home == "" {
		return opts, errors.New("rescue: Home is empty")
	}
	if opts.User == "" {
		opts.User = User
	}
	if opts.SudoPassword != "" && opts.BinDir == "" {
		return opts, errors.New("rescue: SudoPassword needs BinDir (where sudo is)")
	}
	return opts, nil
}

// parseAuthorizedKeys reads authorized_keys lines into wire-format keys.
func parseAuthorizedKeys(lines []string) ([][]byte, error) {
	var keys [][]byte
	for i, line := range lines {
		pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			return nil, fmt.Errorf("rescue: authorized key %d: %w", i, err)
		}
		keys = append(keys, pk.Marshal())
	}
	return keys, nil
}

// writeBinDir writes the sudo and id shims, the user id reads, and the
// sudo password (or removes a previous boot's when there is none).
func writeBinDir(opts Options) error {
	if err := os.MkdirAll(opts.BinDir, 0o755); err != nil {
		return err
	}
	for _, f := range []struct {
		name, body string
		mode       os.FileMode
	}{
		{"sudo", sudoShim, 0o755},
		{"id", idShim, 0o755},
		{"id-user", opts.User + "\n", 0o644},
	} {
		if err := os.WriteFile(filepath.Join(opts.BinDir, f.name), []byte(f.body), f.mode); err != nil {
			return err
		}
	}
	// Outside Home, so SFTP cannot read it; rewritten at each boot (a
	// new password per rescue boot).
	pwfile := filepath.Join(opts.BinDir, "sudo-password")
	if opts.SudoPassword == "" {
		if err := os.Remove(pwfile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return os.WriteFile(pwfile, []byte(opts.SudoPassword), 0o600)
}

// publicKeyCallback lets user in with any of keys and refuses anyone else.
func publicKeyCallback(user string, keys [][]byte, log *slog.Logger) func(ssh.ConnMetadata, ssh.PublicKey) (*ssh.Permissions, error) {
	return func(c ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
		if c.User() != user {
			// Logged: tests of the variant where the API's user is
			// refused read it.
			log.Debug("ssh login refused", "user", c.User(), "remote", c.RemoteAddr())
			return nil, fmt.Errorf("user %q not allowed", c.User())
		}
		m := key.Marshal()
		for _, k := range keys {
			if string(k) == string(m) {
				return &ssh.Permissions{}, nil
			}
		}
		return nil, errors.New("public key not authorized")
	}
}

// NewHostKey generates an ed25519 host key.
func NewHostKey() (ssh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return ssh.NewSignerFromKey(priv)
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// HostKey is the server's public host key.
func (s *Server) HostKey() ssh.PublicKey { return s.hostKey.PublicKey() }

// Close stops listening, drops every connection and kills every command, as
// a power-off does. It waits until all of it is gone.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	err := s.ln.Close()
	for p := range s.procs {
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	}
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go s.serveConn(nc)
	}
}

func (s *Server) serveConn(nc net.Conn) {
	defer s.wg.Done()
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second)) // handshake only
	conn, chans, reqs, err := ssh.NewServerConn(nc, s.config)
	if err != nil {
		s.log.Debug("ssh handshake failed", "remote", nc.RemoteAddr(), "err", err)
		_ = nc.Close()
		return
	}
	_ = nc.SetDeadline(time.Time{})
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = conn.Close()
		return
	}
	s.conns[conn] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
		_ = conn.Close()
	}()
	s.log.Debug("ssh login", "user", conn.User(), "remote", conn.RemoteAddr())
	go ssh.DiscardRequests(reqs)
	var cw sync.WaitGroup
	for nch := range chans {
		if nch.ChannelType() != "session" {
			_ = nch.Reject(ssh.UnknownChannelType, "only session channels are supported")
			continue
		}
		ch, creqs, err := nch.Accept()
		if err != nil {
			continue
		}
		cw.Add(1)
		go func() {
			defer cw.Done()
			s.session(ch, creqs)
		}()
	}
	cw.Wait()
}

// session serves one session channel: env, exec, shell or the sftp subsystem.
func (s *Server) session(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	var env []string
	for req := range reqs {
		switch req.Type {
		case "env":
			env = acceptEnv(req, env)
		case "exec", "shell":
			command, ok := execCommand(req)
			if !ok {
				_ = req.Reply(false, nil)
				continue
			}
			_ = req.Reply(true, nil)
			s.run(ch, reqs, req.Type == "shell", command, env)
			return
		case "subsystem":
			var p struct{ Name string }
			if err := ssh.Unmarshal(req.Payload, &p); err != nil || p.Name != "sftp" {
				_ = req.Reply(false, nil)
				continue
			}
			_ = req.Reply(true, nil)
			s.serveSFTP(ch, reqs)
			return
		default: // pty-req, x11-req, auth-agent-req...: not offered
			if req.WantReply {
				_ = req.Reply(false, nil)
			}
		}
	}
}

// acceptEnv answers an "env" request the way OpenSSH's default AcceptEnv
// does: locale variables only, added to env.
func acceptEnv(req *ssh.Request, env []string) []string {
	var kv struct{ Name, Value string }
	if err := ssh.Unmarshal(req.Payload, &kv); err != nil {
		_ = req.Reply(false, nil)
		return env
	}
	ok := kv.Name == "LANG" || strings.HasPrefix(kv.Name, "LC_")
	if ok {
		env = append(env, kv.Name+"="+kv.Value)
	}
	_ = req.Reply(ok, nil)
	return env
}

// execCommand is the command an "exec" request carries, empty for a
// "shell"; false when the payload does not decode.
func execCommand(req *ssh.Request) (string, bool) {
	if req.Type != "exec" {
		return "", true
	}
	var p struct{ Command string }
	if err := ssh.Unmarshal(req.Payload, &p); err != nil {
		return "", false
	}
	return p.Command, true
}

// serveSFTP serves SFTP on the channel, rooted at Home, until the client
// leaves; further session requests are discarded.
func (s *Server) serveSFTP(ch ssh.Channel, reqs <-chan *ssh.Request) {
	go ssh.DiscardRequests(reqs)
	srv := sftp.NewRequestServer(ch, s.sftpHandlers(), sftp.WithStartDirectory(s.home))
	if err := srv.Serve(); err != nil && !errors.Is(err, io.EOF) {
		s.log.Debug("sftp session ended", "err", err)
	}
	_ = srv.Close()
}

// transcript opens the files of the next command's output.
func (s *Server) transcript() (stdout, stderr *os.File, err error) {
	s.mu.Lock()
	s.commands++
	n := s.commands
	s.mu.Unlock()
	if err := os.MkdirAll(s.opts.Transcript, 0o700); err != nil {
		return nil, nil, err
	}
	base := filepath.Join(s.opts.Transcript, fmt.Sprintf("%d-%d", time.Now().UnixNano(), n))
	if stdout, err = os.Create(base + ".stdout"); err != nil {
		return nil, nil, err
	}
	if stderr, err = os.Create(base + ".stderr"); err != nil {
		stdout.Close()
		return nil, nil, err
	}
	return stdout, stderr, nil
}

// run executes the command and reports its exit status on the channel.
func (s *Server) run(ch ssh.Channel, reqs <-chan *ssh.Request, shell bool, command string, env []string) {
	cmd := s.command(shell, command, env)
	cmd.Stdout = ch
	cmd.Stderr = ch.Stderr()
	if s.opts.Transcript != "" {
		closeTranscript, err := s.teeTranscript(cmd, ch)
		if err != nil {
			fmt.Fprintf(ch.Stderr(), "sh: transcript: %v\n", err)
			sendExit(ch, 127)
			return
		}
		defer closeTranscript()
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		sendExit(ch, 127)
		return
	}
	if started, err := s.start(cmd); !started {
		if err != nil {
			fmt.Fprintf(ch.Stderr(), "sh: %v\n", err)
			sendExit(ch, 127)
		}
		return
	}
	s.log.Debug("exec", "command", command, "pid", cmd.Process.Pid)

	go func() {
		_, _ = io.Copy(stdin, ch)
		_ = stdin.Close()
	}()
	done := make(chan struct{})
	go forwardRequests(reqs, cmd.Process.Pid, done)
	err = cmd.Wait()
	close(done)
	s.mu.Lock()
	delete(s.procs, cmd.Process)
	s.mu.Unlock()

	if s.opts.Halted != nil && s.opts.Halted() {
		// The command's output went out; its exit status never does.
		s.log.Debug("the machine left rescue during the command", "command", command)
		return
	}
	sendResult(ch, err)
	_ = ch.CloseWrite()
}

// command builds the shell for a session (a login shell, or sh -c command)
// in Home, with the environment sshd would give: PATH with BinDir first,
// the user's names, then the client's accepted variables and Options.Env.
func (s *Server) command(shell bool, command string, env []string) *exec.Cmd {
	args := []string{"-c", command}
	if shell {
		args = nil
	}
	cmd := exec.Command("/bin/sh", args...)
	cmd.Dir = s.opts.Home
	path := "/usr/bin:/bin"
	if s.opts.BinDir != "" {
		path = s.opts.BinDir + ":" + path
	}
	cmd.Env = append([]string{"PATH=" + path, "HOME=" + s.opts.Home, "USER=" + s.opts.User, "LOGNAME=" + s.opts.User, "SHELL=/bin/sh"}, env...)
	cmd.Env = append(cmd.Env, s.opts.Env...)
	// Children that keep the pipes open must not hold the session forever.
	cmd.WaitDelay = 2 * time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// teeTranscript copies the command's output to the transcript as well as
// to the client; the returned func closes the transcript's files.
func (s *Server) teeTranscript(cmd *exec.Cmd, ch ssh.Channel) (func(), error) {
	out, errOut, err := s.transcript()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.MultiWriter(ch, out)
	cmd.Stderr = io.MultiWriter(ch.Stderr(), errOut)
	return func() {
		_ = errOut.Close()
		_ = out.Close()
	}, nil
}

// start starts cmd and tracks its process, so Close can kill it; false
// without an error when the server is already closed.
func (s *Server) start(cmd *exec.Cmd) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, nil
	}
	if err := cmd.Start(); err != nil {
		return false, err
	}
	s.procs[cmd.Process] = struct{}{}
	return true, nil
}

// forwardRequests applies the session's requests to the command's process
// group until done: signals are delivered, anything else refused. The
// request channel closes when the client closes the channel or the
// connection drops: the command dies with it, as with sshd.
func forwardRequests(reqs <-chan *ssh.Request, pid int, done <-chan struct{}) {
	for {
		select {
		case req, ok := <-reqs:
			if !ok {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				return
			}
			if req.Type == "signal" {
				signalGroup(req.Payload, pid)
			}
			if req.WantReply {
				_ = req.Reply(false, nil)
			}
		case <-done:
			return
		}
	}
}

// signalGroup sends the signal a "signal" request names to the process
// group; an unknown signal is ignored.
func signalGroup(payload []byte, pid int) {
	var p struct{ Signal string }
	if ssh.Unmarshal(payload, &p) != nil {
		return
	}
	if sig, ok := signals[ssh.Signal(p.Signal)]; ok {
		_ = syscall.Kill(-pid, sig)
	}
}

// sendResult reports how the command ended: its exit status, the signal
// that killed it, or 255 when it could not be waited for.
func sendResult(ch ssh.Channel, err error) {
	var ee *exec.ExitError
	switch {
	case err == nil:
		sendExit(ch, 0)
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			sendSignal(ch, ws.Signal())
		} else {
			sendExit(ch, ee.ExitCode())
		}
	default:
		sendExit(ch, 255)
	}
}

var signals = map[ssh.Signal]syscall.Signal{
	ssh.SIGABRT: syscall.SIGABRT, ssh.SIGALRM: syscall.SIGALRM, ssh.SIGFPE: syscall.SIGFPE,
	ssh.SIGHUP: syscall.SIGHUP, ssh.SIGILL: syscall.SIGILL, ssh.SIGINT: syscall.SIGINT,
	ssh.SIGKILL: syscall.SIGKILL, ssh.SIGPIPE: syscall.SIGPIPE, ssh.SIGQUIT: syscall.SIGQUIT,
	ssh.SIGSEGV: syscall.SIGSEGV, ssh.SIGTERM: syscall.SIGTERM, ssh.SIGUSR1: syscall.SIGUSR1,
	ssh.SIGUSR2: syscall.SIGUSR2,
}

func sendExit(ch ssh.Channel, code int) {
	b := make([]byte, 4)
	binary.BigEndian.PutUint32(b, uint32(code))
	_, _ = ch.SendRequest("exit-status", false, b)
}

func sendSignal(ch ssh.Channel, sig syscall.Signal) {
	name := "KILL"
	for k, v := range signals {
		if v == sig {
			name = string(k)
		}
	}
	_, _ = ch.SendRequest("exit-signal", false, ssh.Marshal(struct {
		Signal     string
		CoreDumped bool
		Message    string
		Lang       string
	}{Signal: name}))
}
