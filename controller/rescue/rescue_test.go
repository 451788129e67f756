package rescue

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"golang.org/x/crypto/ssh"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	simrescue "github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/rescue"
)

// The rescue side is the simulated rescue host: a real SSH/SFTP server that
// runs commands with /bin/sh, as rescue@ with a sudo shim.

func newKey(t *testing.T) ssh.Signer {
	t.Helper()
	s, err := simrescue.NewHostKey()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func startHost(t *testing.T, key ssh.Signer) (*Dialer, string, string) {
	t.Helper()
	return startHostWith(t, key, func(*simrescue.Options, string) {})
}

// startHostWith starts a rescue host that lets key in, with the options
// set changes (dir is the host's own temporary directory).
func startHostWith(t *testing.T, key ssh.Signer, set func(o *simrescue.Options, dir string)) (*Dialer, string, string) {
	t.Helper()
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	o := simrescue.Options{Addr: "127.0.0.1:0", Home: home, BinDir: filepath.Join(dir, "bin"),
		AuthorizedKeys: []string{string(ssh.MarshalAuthorizedKey(key.PublicKey()))}}
	set(&o, dir)
	srv, err := simrescue.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	host, p := splitAddr(t, srv.Addr())
	return &Dialer{User: "rescue", Port: p, Timeout: 5 * time.Second,
		Signers: func() ([]ssh.Signer, error) { return []ssh.Signer{key}, nil }}, host, home
}

func splitAddr(t *testing.T, addr string) (string, int) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return host, p
}

// dialHost starts a rescue host for a fresh key and opens a session to it,
// closed when the test ends.
func dialHost(t *testing.T) *Session {
	s, _ := dialHostHome(t)
	return s
}

// dialHostHome is dialHost that also returns the rescue user's home.
func dialHostHome(t *testing.T) (*Session, string) {
	t.Helper()
	d, host, home := startHost(t, newKey(t))
	s, err := d.Dial(context.Background(), host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, home
}

// fakeImager is a shell script standing in for em-imager: progress lines on
// stderr, the report on stdout, an exit status.
func fakeImager(progress, stdout string, exit int) []byte {
	return []byte(fmt.Sprintf("#!/bin/sh\necho %q 1>&2\necho 'not json noise' 1>&2\nprintf '%%s' %q\nexit %d\n", progress, stdout, exit))
}

func TestRunImagerRelaysProgressAndReport(t *testing.T) {
	key := newKey(t)
	d, host, home := startHost(t, key)
	s, err := d.WaitDial(context.Background(), host, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ok := `{"version":1,"command":"write","ok":true,"imager":"t","nics":[],"disk":{"path":"/dev/nvme0n1","sizeBytes":1,"logicalSectorSize":512,"rotational":false,"reason":"x"}}`
	var got []report.Progress
	rep, err := RunImager(context.Background(), s, ImagerArgs{
		Binary:   fakeImager(`{"phase":"write","bytesIn":50,"bytesOut":100,"totalIn":100,"rawMBps":12}`, ok, 0),
		ImageURL: "https://bucket/img?X-Amz-Signature=secret", SHA256: "ab", Disk: "auto",
	}, func(p report.Progress) { got = append(got, p) })
	if err != nil {
		t.Fatalf("RunImager: %v", err)
	}
	if rep.Disk.Path != "/dev/nvme0n1" {
		t.Errorf("report disk %+v", rep.Disk)
	}
	if len(got) != 1 || got[0].BytesIn != 50 || got[0].TotalIn != 100 {
		t.Errorf("progress relayed: %+v", got)
	}
	st, err := os.Stat(filepath.Join(home, ImagerName))
	if err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("uploaded binary not executable: %v %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(home, ImagerName+".part")); !os.IsNotExist(err) {
		t.Errorf("temporary upload left behind: %v", err)
	}
}

func TestRunImagerFailures(t *testing.T) {
	s := dialHost(t)
	failed := `{"version":1,"command":"write","ok":false,"imager":"t","nics":[],"error":{"code":"digest_mismatch","message":"sha256 differs"}}`
	_, err := RunImager(context.Background(), s, ImagerArgs{Binary: fakeImager("{}", failed, 4), SHA256: "ab"}, nil)
	var re *report.Error
	if !errors.As(err, &re) || re.Code != report.CodeDigestMismatch {
		t.Fatalf("failed report: err = %v, want a *report.Error digest_mismatch", err)
	}
	_, err = RunImager(context.Background(), s, ImagerArgs{Binary: fakeImager("{}", "segfault", 139), SHA256: "ab"}, nil)
	if err == nil || !strings.Contains(err.Error(), "without a report") || !strings.Contains(err.Error(), "not json noise") {
		t.Fatalf("no report: err = %v, want the exit and stderr tail", err)
	}
	_, err = RunImager(context.Background(), s, ImagerArgs{SHA256: "ab"}, nil)
	if err == nil || !strings.Contains(err.Error(), "no embedded em-imager") {
		t.Fatalf("no binary: err = %v", err)
	}
}

func TestRunIsKilledWithItsContext(t *testing.T) {
	s := dialHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := s.Run(ctx, "sleep 30", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v, want the context's error", err)
	}
	if time.Since(start) > 20*time.Second {
		t.Fatal("Run waited for the command instead of its context")
	}
}

func TestWrongKeyIsRefusedAndHostKeyPinnedPerBoot(t *testing.T) {
	key := newKey(t)
	d, host, _ := startHost(t, key)
	other := &Dialer{User: d.User, Port: d.Port, Timeout: d.Timeout,
		Signers: func() ([]ssh.Signer, error) { return []ssh.Signer{newKey(t)}, nil }}
	if _, err := other.Dial(context.Background(), host); err == nil {
		t.Fatal("a key rescue was not given logged in")
	}
	// First contact pins the host key; a different one in the same boot is refused.
	s, err := d.Dial(context.Background(), host)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	d.hostKeys[host] = "SHA256:someone-else"
	var changed *HostKeyChangedError
	if _, err := d.Dial(context.Background(), host); !errors.As(err, &changed) || changed.Pinned != "SHA256:someone-else" {
		t.Fatalf("Dial with a changed host key = %v", err)
	}
	d.Forget(host) // a reboot
	if s, err := d.Dial(context.Background(), host); err != nil {
		t.Fatalf("Dial after Forget: %v", err)
	} else {
		s.Close()
	}
}

func TestWriteCommandQuotesArguments(t *testing.T) {
	cmd := WriteCommand(ImagerArgs{ImageURL: "https://x/y?a=1&b='2'", SHA256: "ab", VerifyReadback: true, RawSize: 4096, WipeOtherDisks: true})
	for _, want := range []string{`'https://x/y?a=1&b='\''2'\'''`, "'--verify-readback'", "'--disk' 'auto'", "'--image-size' '4096'", "'--wipe-other-disks'", "sudo -n"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("command %q lacks %q", cmd, want)
		}
	}
	if cmd := WriteCommand(ImagerArgs{SHA256: "ab"}); strings.Contains(cmd, "wipe") {
		t.Errorf("command %q wipes other disks unasked", cmd)
	}
}

// rebooter records reboots: the API side of RebootIntoRescue.
type rebooter struct{ boots []baremetal.ServerBootType }

func (r *rebooter) RebootServer(_ context.Context, zone scw.Zone, id string, bt baremetal.ServerBootType, _ []string) (*baremetal.Server, error) {
	r.boots = append(r.boots, bt)
	return &baremetal.Server{ID: id, Zone: zone, BootType: bt}, nil
}

// Every reboot into rescue forgets the key pinned for the server's address,
// so the next rescue system (with its own key) is accepted.
func TestRebootIntoRescueForgetsThePinnedKey(t *testing.T) {
	key := newKey(t)
	d, host, _ := startHost(t, key)
	s, err := d.Dial(context.Background(), host)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	d.hostKeys[host] = "SHA256:the-previous-boot"
	srv := &baremetal.Server{ID: "s", Zone: "fr-par-2", IPs: []*baremetal.IP{{Version: baremetal.IPVersionIPv4, Address: net.ParseIP(host)}}}
	api := &rebooter{}
	if _, err := d.RebootIntoRescue(context.Background(), api, srv, []string{"k"}); err != nil {
		t.Fatal(err)
	}
	if len(api.boots) != 1 || api.boots[0] != baremetal.ServerBootTypeRescue {
		t.Fatalf("reboots %v", api.boots)
	}
	s, err = d.Dial(context.Background(), host)
	if err != nil {
		t.Fatalf("Dial after a reboot into rescue: %v", err)
	}
	s.Close()
	// A server shown without addresses: every pin goes.
	d.hostKeys[host] = "SHA256:the-previous-boot"
	if _, err := d.RebootIntoRescue(context.Background(), api, &baremetal.Server{ID: "s", Zone: "fr-par-2"}, nil); err != nil {
		t.Fatal(err)
	}
	if len(d.hostKeys) != 0 {
		t.Fatalf("pins left after a reboot of a server without addresses: %v", d.hostKeys)
	}
}

// A hostile rescue host cannot make the controller keep what it prints: an
// endless report is cut off and the command killed, an endless line on
// stderr is kept only in part, an endless sha256sum answer is refused.
func TestHostileRescueOutputIsBounded(t *testing.T) {
	s := dialHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	endless := []byte("#!/bin/sh\nyes '{\"version\":1}'\n")
	_, err := RunImager(ctx, s, ImagerArgs{Binary: endless, SHA256: "ab"}, nil)
	if !errors.Is(err, ErrOutputTooLong) {
		t.Fatalf("endless report: err = %v, want ErrOutputTooLong", err)
	}
	longLine := []byte("#!/bin/sh\nhead -c 20000000 /dev/zero | tr '\\0' x >&2\nexit 3\n")
	_, err = RunWriteConfig(ctx, s, ConfigArgs{Binary: longLine, Disk: "/dev/vda", Config: []byte("c")})
	if err == nil || !strings.Contains(err.Error(), "without a report") || !strings.Contains(err.Error(), "[cut]") {
		t.Fatalf("one endless stderr line: err = %v, want the exit and the line cut", err)
	}
	if len(err.Error()) > 2*maxLine {
		t.Errorf("the error holds %d bytes of the host's stderr, want at most one cut line", len(err.Error()))
	}
	if _, err := s.Run(ctx, "yes", &cappedBuffer{max: maxSmallOutput}, nil); !errors.Is(err, ErrOutputTooLong) {
		t.Fatalf("Run into a capped buffer: err = %v, want ErrOutputTooLong", err)
	}
	if err := ctx.Err(); err != nil {
		t.Fatalf("the commands were stopped by the test's deadline, not by their output: %v", err)
	}
}

// A report that says ok but lacks what the install reads next (the disk
// written) is refused, not handed on to a nil dereference.
func TestHostileRescueWrongReport(t *testing.T) {
	s := dialHost(t)
	for _, out := range []string{
		`{"version":1,"command":"write","ok":true,"imager":"t","nics":[],"timings":{"rawMBps":1}}`,
		`{"version":1,"command":"inspect","ok":true,"imager":"t","nics":[],"disk":{"path":"/dev/nvme0n1"}}`,
	} {
		rep, err := RunImager(context.Background(), s, ImagerArgs{Binary: fakeImager("{}", out, 0), SHA256: "ab"}, nil)
		if err == nil || rep != nil || !strings.Contains(err.Error(), "without the disk") {
			t.Errorf("report %s: %+v, %v; want an error and no report", out, rep, err)
		}
	}
}

// RunErase takes only a report that lists every disk erased in full and
// verified: an overwrite that left EPHEMERAL's data, a report without disks
// or a failed erase is an error, so the spare stays out of capacity.
func TestRunEraseNeedsEveryDiskErasedInFull(t *testing.T) {
	s := dialHost(t)
	disk := func(method string, complete bool) string {
		return fmt.Sprintf(`{"path":"/dev/sda","sizeBytes":1,"rotational":true,"method":%q,"bytes":1,"seconds":1,"verified":true,"verifiedBytes":1,"complete":%v,"oldPartitions":7}`, method, complete)
	}
	rep := func(disks ...string) string {
		return `{"version":1,"command":"erase","ok":true,"imager":"t","nics":[],"erased":[` + strings.Join(disks, ",") + `]}`
	}
	if r, err := RunErase(context.Background(), s, fakeImager("", rep(disk("discard", true), disk("overwrite-full", true)), 0)); err != nil || len(r.Erased) != 2 {
		t.Fatalf("complete erase: %v", err)
	}
	for name, out := range map[string]string{
		"partitions only": rep(disk("discard", true), disk("overwrite", false)),
		"no disk":         rep(),
		"a write report":  `{"version":1,"command":"write","ok":true,"imager":"t","nics":[],"disk":{"path":"/dev/sda","sizeBytes":1,"logicalSectorSize":512,"rotational":false,"reason":"x"}}`,
	} {
		if _, err := RunErase(context.Background(), s, fakeImager("", out, 0)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	failed := `{"version":1,"command":"erase","ok":false,"imager":"t","nics":[],"error":{"code":"erase_unverified","message":"reads back data"}}`
	var re *report.Error
	if _, err := RunErase(context.Background(), s, fakeImager("", failed, 6)); !errors.As(err, &re) || re.Code != report.CodeEraseUnverified {
		t.Fatalf("failed erase: %v", err)
	}
}
