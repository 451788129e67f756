// Package rescue drives a server's Scaleway rescue system over SSH: it waits
// for sshd, uploads em-imager over SFTP and runs it, relaying its progress and
// returning its report.
//
// Host keys: a rescue system is a fresh boot with a new host key every time
// and Scaleway does not publish it, so there is nothing to pin. The dialer
// accepts the key it is shown (trust on first use per boot), logs its
// fingerprint, and refuses a different key for the rest of the boot. The
// image itself is protected by its sha256, which em-imager verifies.
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
	hostKeys map[string]string // host -> fingerprint seen for the current boot
}

// Forget drops the remembered host key of host: call it when the server reboots.
func (d *Dialer) Forget(host string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.hostKeys, host)
}

func (d *Dialer) hostKeyCallback(host string) ssh.HostKeyCallback {
	return func(_ string, _ net.Addr, key ssh.PublicKey) error {
		fp := ssh.FingerprintSHA256(key)
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.hostKeys == nil {
			d.hostKeys = map[string]string{}
		}
		if seen, ok := d.hostKeys[host]; ok && seen != fp {
			return fmt.Errorf("rescue host %s changed its host key during one boot (%s, was %s)", host, fp, seen)
		}
		d.hostKeys[host] = fp
		return nil
	}
}

// Dial opens one SSH connection to host.
func (d *Dialer) Dial(ctx context.Context, host string) (*Session, error) {
	timeout := d.Timeout
	if timeout == 0 {
		timeout = 15 * time.Second
	}
	addr := net.JoinHostPort(host, strconv.Itoa(d.Port))
	cfg := &ssh.ClientConfig{
		User:            d.User,
		Auth:            []ssh.AuthMethod{ssh.PublicKeysCallback(d.Signers)},
		HostKeyCallback: d.hostKeyCallback(host),
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
	return &Session{client: ssh.NewClient(c, chans, reqs)}, nil
}

// WaitDial retries Dial every interval until it succeeds or ctx ends.
func (d *Dialer) WaitDial(ctx context.Context, host string, interval time.Duration) (*Session, error) {
	var last error
	for {
		s, err := d.Dial(ctx, host)
		if err == nil {
			return s, nil
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
}

// Close ends the connection (and, with it, anything still running in it).
func (s *Session) Close() error { return s.client.Close() }

// Upload writes data to name (relative to the rescue user's home) through a
// temporary file and a rename, so a half-uploaded binary is never run, and
// checks the uploaded bytes' digest.
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
	st, err := c.Stat(name)
	if err != nil {
		return fmt.Errorf("sftp stat %s: %w", name, err)
	}
	if st.Size() != int64(len(data)) {
		return fmt.Errorf("sftp upload %s: %d bytes on the server, %d sent", name, st.Size(), len(data))
	}
	return nil
}

// Run runs cmd through the rescue user's shell and returns its exit status.
// The process is killed (the session closed) when ctx ends.
func (s *Session) Run(ctx context.Context, cmd string, stdout, stderr io.Writer) (int, error) {
	sess, err := s.client.NewSession()
	if err != nil {
		return -1, err
	}
	defer sess.Close()
	sess.Stdout, sess.Stderr = stdout, stderr
	if err := sess.Start(cmd); err != nil {
		return -1, err
	}
	waited := make(chan error, 1)
	go func() { waited <- sess.Wait() }()
	select {
	case <-ctx.Done():
		_ = sess.Signal(ssh.SIGKILL)
		_ = sess.Close()
		<-waited
		return -1, ctx.Err()
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
}

// ImagerName is where em-imager is uploaded, relative to the rescue user's home.
const ImagerName = "em-imager"

// WriteCommand is the shell command that runs em-imager as root (sudo when the
// rescue user is not root). Arguments are single-quoted for the shell.
func WriteCommand(a ImagerArgs) string {
	args := []string{"./" + ImagerName, "write",
		"--image", a.ImageURL, "--sha256", a.SHA256,
		"--disk", orDefault(a.Disk, "auto"), "--format", orDefault(a.Format, "auto"),
		"--progress", "json"}
	if a.RawSize > 0 {
		args = append(args, "--image-size", strconv.FormatInt(a.RawSize, 10))
	}
	if a.VerifyReadback {
		args = append(args, "--verify-readback")
	}
	quoted := make([]string, len(args))
	for i, s := range args {
		quoted[i] = shellQuote(s)
	}
	return `if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO="sudo -n"; fi; exec $SUDO ` + strings.Join(quoted, " ")
}

// RunImager uploads em-imager (unless the same build is already there), runs
// `write`, relays each progress line to onProgress and returns the report. A
// report with ok=false is returned with a *report.Error error.
func RunImager(ctx context.Context, s *Session, a ImagerArgs, onProgress func(report.Progress)) (*report.Report, error) {
	if err := uploadIfChanged(ctx, s, a.Binary); err != nil {
		return nil, err
	}
	var stdout bytes.Buffer
	pr, pw := io.Pipe()
	progressDone := make(chan struct{})
	var tail tailBuffer
	go func() {
		defer close(progressDone)
		sc := bufio.NewScanner(pr)
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
		_, _ = io.Copy(io.Discard, pr)
	}()
	code, err := s.Run(ctx, WriteCommand(a), &stdout, pw)
	_ = pw.Close()
	<-progressDone
	if err != nil {
		return nil, fmt.Errorf("running em-imager: %w", err)
	}
	rep, perr := report.Parse(bytes.TrimSpace(stdout.Bytes()))
	if perr != nil {
		return nil, fmt.Errorf("em-imager exited %d without a report (%v); stderr: %s", code, perr, tail.String())
	}
	if !rep.OK {
		return rep, rep.Error
	}
	if code != 0 {
		return rep, fmt.Errorf("em-imager reported ok but exited %d", code)
	}
	return rep, nil
}

func uploadIfChanged(ctx context.Context, s *Session, bin []byte) error {
	if len(bin) == 0 {
		return errors.New("this controller build has no embedded em-imager (build it with `make build`)")
	}
	sum := sha256.Sum256(bin)
	want := hex.EncodeToString(sum[:])
	var out bytes.Buffer
	if code, err := s.Run(ctx, "sha256sum "+ImagerName+" 2>/dev/null", &out, io.Discard); err == nil && code == 0 &&
		strings.HasPrefix(out.String(), want) {
		return nil
	}
	return s.Upload(ctx, ImagerName, bin, 0o755)
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
