// Package rescue drives a server's Scaleway rescue system over SSH: it waits
// for sshd, uploads em-imager over SFTP and runs it, relaying its progress and
// returning its report.
//
// Host keys: a rescue system is a fresh boot with a new host key every time
// and Scaleway does not publish it, so there is nothing to pin in advance.
// The dialer trusts the key it is shown first in a boot and refuses any other
// key for the rest of that boot with a *HostKeyChangedError. The pin is a
// HostKeyPin string: the caller persists Session.HostKey when it differs from
// what it stored (before it sends anything sensitive over the session) and
// loads it back with Dialer.Pin after a restart, so a restart between rescue
// and imaging does not trust a new key. The image itself is
// protected by its sha256, which em-imager verifies, and em-imager by its own
// sha256, which the rescue host checks before running it.
package rescue

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// Dialer connects to rescue systems.
type Dialer struct {
	User    string                       // "rescue" on Scaleway
	Port    int                          // 22 on Scaleway; the simulator uses another
	Signers func() ([]ssh.Signer, error) // the controller's key, registered with IAM
	Timeout time.Duration                // per connection attempt

	mu       sync.Mutex
	hostKeys map[string]HostKeyPin // host -> pin of its current boot
}

// Dial opens one SSH connection to host as d.User (no sudo password). A
// host key other than the one pinned for host's boot fails with a
// *HostKeyChangedError.
func (d *Dialer) Dial(ctx context.Context, host string) (*Session, error) {
	return d.DialAs(ctx, host, Login{User: d.User})
}

// DialAs is Dial as login.User; the session runs em-imager with sudo and,
// when sudo wants one, login.Password (LoginFor gives the boot's login).
//
// When the rescue system refuses the controller's key for login.User (the
// API's rescue_server user) and that user is not d.User (RESCUE_SSH_USER),
// it tries once more as d.User, keeping the password for sudo: public
// accounts of Scaleway's rescue systems disagree on which user takes the
// key, and the API's user is the one that may be wrong.
func (d *Dialer) DialAs(ctx context.Context, host string, login Login) (*Session, error) {
	if login.User == "" {
		login.User = d.User
	}
	s, err := d.dialOnce(ctx, host, login)
	if err != nil && login.User != d.User && d.User != "" && isAuthRefused(err) {
		fallback := Login{User: d.User, Password: login.Password}
		s, err2 := d.dialOnce(ctx, host, fallback)
		if err2 != nil {
			return nil, fmt.Errorf("as %s: %s; as %s: %w", login.User, err.Error(), d.User, err2)
		}
		return s, nil
	}
	return s, err
}

// isAuthRefused: the SSH handshake failed because no offered key was
// accepted for the user (golang.org/x/crypto/ssh says so only in words).
func isAuthRefused(err error) bool {
	return err != nil && strings.Contains(err.Error(), "unable to authenticate")
}

// dialOnce opens one connection as login.User.
func (d *Dialer) dialOnce(ctx context.Context, host string, login Login) (*Session, error) {
	timeout := d.Timeout
	if timeout == 0 {
		timeout = 15 * time.Second
	}
	addr := net.JoinHostPort(host, strconv.Itoa(d.Port))
	var seen HostKeyPin
	cfg := &ssh.ClientConfig{
		User:            login.User,
		Auth:            []ssh.AuthMethod{ssh.PublicKeysCallback(d.Signers)},
		HostKeyCallback: d.hostKeyCallback(host, &seen),
		Timeout:         timeout,
	}
	nd := net.Dialer{Timeout: timeout}
	conn, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	// Bound the handshake: a half-open sshd must not hang the pipeline.
	_ = conn.SetDeadline(time.Now().Add(timeout))
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return &Session{client: ssh.NewClient(c, chans, reqs), HostKey: seen, login: login}, nil
}

// WaitDial retries Dial every interval until it succeeds or ctx ends. A
// changed host key ends it at once: waiting would not make the key right.
func (d *Dialer) WaitDial(ctx context.Context, host string, interval time.Duration) (*Session, error) {
	return d.WaitDialAs(ctx, host, Login{User: d.User}, interval)
}

// WaitDialAs is WaitDial as login (DialAs).
func (d *Dialer) WaitDialAs(ctx context.Context, host string, login Login, interval time.Duration) (*Session, error) {
	var last error
	for {
		s, err := d.DialAs(ctx, host, login)
		if err == nil {
			return s, nil
		}
		if changed := (*HostKeyChangedError)(nil); errors.As(err, &changed) {
			return nil, err
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("rescue ssh on %s never came up: %w (last error: %v)", host, ctx.Err(), last)
		case <-time.After(interval):
		}
	}
}

// Session is one SSH connection to a rescue system.
type Session struct {
	client *ssh.Client
	// HostKey is the pin of the host key the rescue system presented.
	HostKey HostKeyPin

	login Login    // the password goes to sudo on stdin only
	sudo  sudoMode // probeSudo's answer for this session
}

// Close ends the connection (and, with it, anything still running in it).
func (s *Session) Close() error { return s.client.Close() }

// Upload writes data to name (relative to the rescue user's home) through a
// temporary file and a rename, so a half-uploaded binary is never run, and
// checks with sha256sum on the host that the file holds the bytes sent.
func (s *Session) Upload(ctx context.Context, name string, data []byte, mode os.FileMode) error {
	c, err := sftp.NewClient(s.client)
	if err != nil {
		return fmt.Errorf("sftp: %w", err)
	}
	defer c.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			_ = c.Close()
		case <-done:
		}
	}()
	tmp := name + ".part"
	f, err := c.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return fmt.Errorf("sftp create %s: %w", tmp, err)
	}
	if _, err := f.ReadFrom(bytes.NewReader(data)); err != nil {
		_ = f.Close()
		return fmt.Errorf("sftp write %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("sftp close %s: %w", tmp, err)
	}
	if err := c.Chmod(tmp, mode); err != nil {
		return fmt.Errorf("sftp chmod %s: %w", tmp, err)
	}
	// PosixRename replaces an existing file (a previous attempt's upload).
	if err := c.PosixRename(tmp, name); err != nil {
		return fmt.Errorf("sftp rename %s: %w", name, err)
	}
	want := sha256Hex(data)
	got, err := s.SHA256(ctx, name)
	if err != nil {
		return fmt.Errorf("checking the upload of %s: %w", name, err)
	}
	if got != want {
		return fmt.Errorf("uploaded %s has sha256 %s on the rescue host, %s was sent", name, got, want)
	}
	return nil
}

// SHA256 returns the hex sha256 of name on the rescue host (sha256sum, from
// coreutils, which Scaleway's Ubuntu-based rescue system has).
func (s *Session) SHA256(ctx context.Context, name string) (string, error) {
	out, errOut := cappedBuffer{max: maxSmallOutput}, cappedBuffer{max: maxSmallOutput}
	code, err := s.Run(ctx, "sha256sum "+shellQuote(name), &out, &errOut)
	if err != nil {
		return "", err
	}
	if code != 0 {
		return "", fmt.Errorf("sha256sum %s exited %d: %s", name, code, strings.TrimSpace(errOut.String()))
	}
	sum, _, _ := strings.Cut(out.String(), " ")
	if len(sum) != sha256.Size*2 {
		return "", fmt.Errorf("sha256sum %s printed %q", name, strings.TrimSpace(out.String()))
	}
	return sum, nil
}

// Run runs cmd through the rescue user's shell and returns its exit status.
// The process is killed (the session closed) when ctx ends, or when writing
// to stdout or stderr fails (a cappedBuffer full: the host printed more than
// anyone should keep).
func (s *Session) Run(ctx context.Context, cmd string, stdout, stderr io.Writer) (int, error) {
	return s.RunInput(ctx, cmd, nil, stdout, stderr)
}

// RunInput is Run with stdin (nil: none). Secrets go this way, never in
// cmd: a command line shows in the rescue host's process list.
func (s *Session) RunInput(ctx context.Context, cmd string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	sess, err := s.client.NewSession()
	if err != nil {
		return -1, err
	}
	defer sess.Close()
	// A failed write stops the SSH library's copy, not the command: Wait
	// would then block on an exit status the stalled channel never brings.
	failed := make(chan error, 2)
	sess.Stdin, sess.Stdout, sess.Stderr = stdin, reportFailure(stdout, failed), reportFailure(stderr, failed)
	if err := sess.Start(cmd); err != nil {
		return -1, err
	}
	waited := make(chan error, 1)
	go func() { waited <- sess.Wait() }()
	kill := func() {
		_ = sess.Signal(ssh.SIGKILL)
		_ = sess.Close()
		<-waited
	}
	select {
	case <-ctx.Done():
		kill()
		return -1, ctx.Err()
	case err := <-failed:
		kill()
		return -1, err
	case err := <-waited:
		var exit *ssh.ExitError
		if errors.As(err, &exit) {
			return exit.ExitStatus(), nil
		}
		if err != nil {
			return -1, err
		}
		return 0, nil
	}
}

// ImagerArgs are the arguments of one `em-imager write`.
type ImagerArgs struct {
	Binary         []byte // the static em-imager, embedded in the controller
	ImageURL       string // may be presigned: it is never logged or put in errors
	SHA256         string
	Format         string // auto|xz|zstd|raw
	Disk           string // auto or a device path
	RawSize        int64  // from the manifest: lets --disk auto pick the smallest disk that fits
	VerifyReadback bool
	// WipeOtherDisks erases old signatures of every other disk after the
	// image is verified (the local-disk policy's localdisks.Policy.Wipes).
	WipeOtherDisks bool
}

// ImagerName is where em-imager is uploaded, relative to the rescue user's home.
const ImagerName = "em-imager"

// exitImagerMismatch is the exit status of ImagerCommand when the binary on
// the host is not the one expected (em-imager itself never exits with it).
const exitImagerMismatch = 86

// ErrImagerDigestMismatch is returned when the em-imager on the rescue host was not the
// controller's build when it was about to run, so it was not run.
var ErrImagerDigestMismatch = errors.New("em-imager on the rescue host does not have the sha256 of the controller's build; it was not run")

// ImagerCommand is the shell command that runs `em-imager args...` as root
// (sudo when the rescue user is not root), only if the file's sha256 on the
// host is binarySHA256 (hex): it is checked right before exec, in the same
// shell, so what runs as root is the controller's build. Arguments are
// single-quoted for the shell.
func ImagerCommand(binarySHA256 string, args ...string) string {
	return imagerCommand("$SUDO ", binarySHA256, args...)
}

// imagerCommand is ImagerCommand with sudo (a prefix of the final exec,
// "$SUDO " for the choice by user ID) as the way to root.
func imagerCommand(sudo, binarySHA256 string, args ...string) string {
	quoted := make([]string, 0, len(args)+1)
	quoted = append(quoted, shellQuote("./"+ImagerName))
	for _, a := range args {
		quoted = append(quoted, shellQuote(a))
	}
	check := shellQuote(binarySHA256 + "  " + ImagerName)
	return `if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO="sudo -n"; fi; ` +
		`printf '%s\n' ` + check + ` | sha256sum --check --status - || ` +
		`{ echo 'em-imager: sha256 mismatch, not running it' >&2; exit ` + strconv.Itoa(exitImagerMismatch) + `; }; ` +
		`exec ` + sudo + strings.Join(quoted, " ")
}

// WriteCommand is the shell command of one `em-imager write` (ImagerCommand).
func WriteCommand(a ImagerArgs) string {
	return ImagerCommand(sha256Hex(a.Binary), writeArgs(a)...)
}

// writeArgs are the arguments of one `em-imager write`.
func writeArgs(a ImagerArgs) []string {
	args := []string{"write",
		"--image", a.ImageURL, "--sha256", a.SHA256,
		"--disk", orDefault(a.Disk, "auto"), "--format", orDefault(a.Format, "auto"),
		"--progress", "json"}
	if a.RawSize > 0 {
		args = append(args, "--image-size", strconv.FormatInt(a.RawSize, 10))
	}
	if a.VerifyReadback {
		args = append(args, "--verify-readback")
	}
	if a.WipeOtherDisks {
		args = append(args, "--wipe-other-disks")
	}
	return args
}

// RunImager uploads em-imager (unless the same build is already there), runs
// `write` (only if the binary on the host still has the build's sha256, else
// ErrImagerDigestMismatch), relays each progress line to onProgress and
// returns the report. A report with ok=false is returned with a *report.Error
// error.
func RunImager(ctx context.Context, s *Session, a ImagerArgs, onProgress func(report.Progress)) (*report.Report, error) {
	if err := uploadIfChanged(ctx, s, a.Binary); err != nil {
		return nil, err
	}
	stdout := cappedBuffer{max: maxReport}
	pr, pw := io.Pipe()
	progressDone := make(chan struct{})
	var tail tailBuffer
	go func() {
		defer close(progressDone)
		relayProgress(pr, onProgress, &tail)
	}()
	cmd, stdin, err := s.imagerRun(ctx, sha256Hex(a.Binary), nil, writeArgs(a)...)
	if err != nil {
		_ = pw.Close()
		<-progressDone
		return nil, err
	}
	code, err := s.RunInput(ctx, cmd, stdin, &stdout, pw)
	_ = pw.Close()
	<-progressDone
	if err != nil {
		return nil, fmt.Errorf("running em-imager: %w", err)
	}
	rep, err := imagerReport(code, stdout.Bytes(), &tail)
	if err == nil && (rep.Command != "write" || rep.Disk == nil || rep.Disk.Path == "") {
		// What the install reads next; a host that answers otherwise is
		// not running the build the controller uploaded.
		return nil, fmt.Errorf("em-imager write reported success without the disk it wrote (command %q)", rep.Command)
	}
	return rep, err
}

// relayProgress reads em-imager's stderr: progress lines go to onProgress,
// the others into tail for the error of a failed run. It reads to the end so
// the writer never blocks.
func relayProgress(r io.Reader, onProgress func(report.Progress), tail *tailBuffer) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var p report.Progress
		if len(line) > 0 && line[0] == '{' && json.Unmarshal(line, &p) == nil && p.Phase != "" {
			if onProgress != nil {
				onProgress(p)
			}
			continue
		}
		tail.add(string(line))
	}
	_, _ = io.Copy(io.Discard, r)
}

// ConfigArgs are the arguments of one `em-imager write-config`.
type ConfigArgs struct {
	Binary []byte // the static em-imager, embedded in the controller
	Disk   string // the disk `em-imager write` reported
	// Config is the machine config: it holds the cluster's secrets, so it
	// travels on stdin only (never argv, a file, a log or an error).
	Config []byte
}

// RunWriteConfig uploads em-imager (unless the same build is already
// there) and runs `write-config --disk Disk` with the config on stdin (only
// if the binary on the host still has the build's sha256, else
// ErrImagerDigestMismatch). A report with ok=false is returned with a
// *report.Error error.
func RunWriteConfig(ctx context.Context, s *Session, a ConfigArgs) (*report.Report, error) {
	if a.Disk == "" || a.Disk == "auto" {
		return nil, errors.New("write-config needs the disk em-imager wrote, not " + strconv.Quote(a.Disk))
	}
	return runReporting(ctx, s, a.Binary, bytes.NewReader(a.Config), "write-config", "--disk", a.Disk)
}

// RunInspect uploads em-imager (unless the same build is already there) and
// runs `inspect --disk disk`: the disks and NICs as write reports them,
// nothing written. A report with ok=false is returned with a *report.Error.
func RunInspect(ctx context.Context, s *Session, binary []byte, disk string) (*report.Report, error) {
	if disk == "" || disk == "auto" {
		return nil, errors.New("inspect needs the disk em-imager wrote, not " + strconv.Quote(disk))
	}
	return runReporting(ctx, s, binary, nil, "inspect", "--disk", disk)
}

// RunProbe uploads em-imager (unless the same build is already there) and
// runs `inspect` with no image and no disk named: what the host has (disks,
// NICs, whether kexec is possible), nothing written. make smoke-live's
// rescue probe.
func RunProbe(ctx context.Context, s *Session, binary []byte) (*report.Report, error) {
	return runReporting(ctx, s, binary, nil, "inspect")
}

// KexecArgs are the arguments of one `em-imager kexec`.
type KexecArgs struct {
	Binary []byte
	Disk   string // the disk write reported
	// ConfigSHA256, when known, is the config write-config reported: the
	// jump is refused (config_not_verified) unless the disk holds it.
	ConfigSHA256 string
	// JumpDelay, when positive, is em-imager's wait between its report
	// and the jump (its default otherwise).
	JumpDelay time.Duration
}

// command is the em-imager command line of a: the disk must be the one
// write chose, never "auto".
func (a KexecArgs) command() ([]string, error) {
	if a.Disk == "" || a.Disk == "auto" {
		return nil, errors.New("kexec needs the disk em-imager wrote, not " + strconv.Quote(a.Disk))
	}
	args := []string{"kexec", "--disk", a.Disk}
	if a.ConfigSHA256 != "" {
		args = append(args, "--config-sha256", a.ConfigSHA256)
	}
	if a.JumpDelay > 0 {
		args = append(args, "--jump-delay", a.JumpDelay.String())
	}
	return args, nil
}

// RunKexec uploads em-imager (unless the same build is already there) and
// runs `kexec --disk Disk`: on success em-imager prints a report saying it
// jumps, and the session ends, usually without an exit status (the rescue
// kernel is gone; under a fake root it exits 0). jumped is true only with
// such a report. A refusal comes back as a report with ok=false and a
// *report.Error (report.KexecFallback tells a reboot will do instead).
func RunKexec(ctx context.Context, s *Session, a KexecArgs) (rep *report.Report, jumped bool, err error) {
	args, err := a.command()
	if err != nil {
		return nil, false, err
	}
	if err := uploadIfChanged(ctx, s, a.Binary); err != nil {
		return nil, false, err
	}
	stdout := cappedBuffer{max: maxReport}
	var tail tailBuffer
	stderr := lineWriter{add: tail.add}
	cmd, stdin, err := s.imagerRun(ctx, sha256Hex(a.Binary), nil, args...)
	if err != nil {
		return nil, false, err
	}
	code, runErr := s.RunInput(ctx, cmd, stdin, &stdout, &stderr)
	stderr.flush()
	if runErr != nil {
		// The connection went with the rescue kernel: only a report that
		// says it jumps tells the jump from a broken session.
		if rep, perr := report.Parse(bytes.TrimSpace(stdout.Bytes())); perr == nil && rep.OK && rep.Kexec != nil && rep.Kexec.Jumping {
			return rep, true, nil
		}
		return nil, false, fmt.Errorf("running em-imager kexec: %w", runErr)
	}
	rep, err = imagerReport(code, stdout.Bytes(), &tail)
	if err != nil {
		return rep, false, err
	}
	return rep, rep.Kexec != nil && rep.Kexec.Jumping, nil
}

// RunErase uploads em-imager (unless the same build is already there) and
// runs `erase --all-disks --full --yes`: every disk of the host discarded
// and read back as zeroes, or overwritten whole where discard is refused
// (hours on an HDD). The report must list at least one disk, each erased
// completely and verified; anything less is an error.
func RunErase(ctx context.Context, s *Session, binary []byte) (*report.Report, error) {
	rep, err := runReporting(ctx, s, binary, nil, "erase", "--all-disks", "--full", "--yes")
	if err != nil {
		return rep, err
	}
	if rep.Command != "erase" || len(rep.Erased) == 0 {
		return rep, fmt.Errorf("em-imager erase reported success without the disks it erased (command %q)", rep.Command)
	}
	for _, e := range rep.Erased {
		if !e.Complete || !e.Verified {
			return rep, fmt.Errorf("em-imager erase reported %s as not completely erased (method %q, verified %v)", e.Path, e.Method, e.Verified)
		}
	}
	return rep, nil
}

// runReporting runs em-imager args (stdin nil: none) and reads its report.
func runReporting(ctx context.Context, s *Session, binary []byte, stdin io.Reader, args ...string) (*report.Report, error) {
	if err := uploadIfChanged(ctx, s, binary); err != nil {
		return nil, err
	}
	stdout := cappedBuffer{max: maxReport}
	var tail tailBuffer
	stderr := lineWriter{add: tail.add}
	cmd, stdin, err := s.imagerRun(ctx, sha256Hex(binary), stdin, args...)
	if err != nil {
		return nil, err
	}
	code, err := s.RunInput(ctx, cmd, stdin, &stdout, &stderr)
	if err != nil {
		return nil, fmt.Errorf("running em-imager %s: %w", args[0], err)
	}
	stderr.flush()
	return imagerReport(code, stdout.Bytes(), &tail)
}

// imagerReport reads the report em-imager printed and exited code with.
func imagerReport(code int, stdout []byte, stderrTail *tailBuffer) (*report.Report, error) {
	rep, perr := report.Parse(bytes.TrimSpace(stdout))
	if perr != nil && code == exitImagerMismatch {
		return nil, ErrImagerDigestMismatch
	}
	if perr != nil {
		return nil, fmt.Errorf("em-imager exited %d without a report (%w); stderr: %s", code, perr, stderrTail.String())
	}
	if !rep.OK {
		return rep, rep.Error
	}
	if code != 0 {
		return rep, fmt.Errorf("em-imager reported ok but exited %d", code)
	}
	return rep, nil
}

// lineWriter splits what is written into lines for add, each cut to
// maxLine bytes (the rest of a longer line is dropped, not kept).
type lineWriter struct {
	add  func(string)
	part []byte
	long bool // the line in part was cut: drop until its end
}

func (w *lineWriter) Write(p []byte) (int, error) {
	rest := p
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		chunk := rest
		if i >= 0 {
			chunk = rest[:i]
		}
		if room := maxLine - len(w.part); !w.long && len(chunk) > room {
			w.part = append(w.part, chunk[:room]...)
			w.long = true
		} else if !w.long {
			w.part = append(w.part, chunk...)
		}
		if i < 0 {
			break
		}
		w.flush()
		rest = rest[i+1:]
	}
	return len(p), nil
}

func (w *lineWriter) flush() {
	if len(w.part) > 0 || w.long {
		line := string(w.part)
		if w.long {
			line += " [cut]"
		}
		w.add(line)
		w.part, w.long = w.part[:0], false
	}
}

// What the controller keeps of a rescue host's output, at most: the host may
// be hostile, and the process that reads it also runs Karpenter core.
const (
	maxReport      = 1 << 20 // em-imager's JSON report (a few KiB)
	maxSmallOutput = 4 << 10 // sha256sum's line, its error
	maxLine        = 4 << 10 // one stderr line kept for an error message
)

// ErrOutputTooLong is returned when a command on the rescue host printed more than the
// controller keeps; it was killed.
var ErrOutputTooLong = errors.New("the rescue host printed more than the controller keeps")

// cappedBuffer is a bytes.Buffer that refuses to grow past max.
type cappedBuffer struct {
	bytes.Buffer
	max int
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if c.Len()+len(p) > c.max {
		return 0, fmt.Errorf("%w (%d bytes)", ErrOutputTooLong, c.max)
	}
	return c.Buffer.Write(p)
}

// reportFailure passes writes to w and sends the first failure on failed.
func reportFailure(w io.Writer, failed chan<- error) io.Writer {
	if w == nil {
		return nil
	}
	return &failureWriter{w: w, failed: failed}
}

type failureWriter struct {
	w      io.Writer
	failed chan<- error
	once   sync.Once
}

func (f *failureWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err != nil {
		f.once.Do(func() { f.failed <- err })
	}
	return n, err
}

func uploadIfChanged(ctx context.Context, s *Session, bin []byte) error {
	if len(bin) == 0 {
		return errors.New("this controller build has no embedded em-imager (build it with `make build`)")
	}
	if got, err := s.SHA256(ctx, ImagerName); err == nil && got == sha256Hex(bin) {
		return nil
	}
	return s.Upload(ctx, ImagerName, bin, 0o755)
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// tailBuffer keeps the last lines of em-imager's non-JSON stderr for errors.
type tailBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (t *tailBuffer) add(l string) {
	if len(l) > maxLine {
		l = l[:maxLine] + " [cut]"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, l)
	if len(t.lines) > 10 {
		t.lines = t.lines[len(t.lines)-10:]
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, " | ")
}
