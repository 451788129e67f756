package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/faketree"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/testimage"
)

// The integration tests serve a Talos-like image compressed by Debian's xz
// and zstd, the way Talos publishes it, and run `em-imager write` against a
// fake host tree whose disks are sparse files.

var (
	rawImage  []byte
	rawSHA    string
	raw4kSHA  string // files["raw4k"]: the same kind of image laid out for 4 KiB sectors
	files     = map[string][]byte{}
	fixtureMu sync.Mutex
	fixtureOK bool
)

const imageSize = 24 << 20

func fixtures(t *testing.T) {
	t.Helper()
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	if fixtureOK {
		return
	}
	for _, tool := range []string{"xz", "zstd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: the integration tests compress images with Debian's xz and zstd; run `make deps` (packages xz-utils, zstd)", tool)
		}
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "metal-amd64.raw")
	sum, err := testimage.Write(p, testimage.Spec{Size: imageSize, DataBytes: 5 << 20, Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	rawImage, _ = os.ReadFile(p)
	rawSHA = sum
	files["raw"] = rawImage
	p4k := filepath.Join(dir, "metal-amd64-4k.raw")
	if raw4kSHA, err = testimage.Write(p4k, testimage.Spec{Size: imageSize, DataBytes: 5 << 20, SectorSize: 4096, Seed: 43}); err != nil {
		t.Fatal(err)
	}
	files["raw4k"], _ = os.ReadFile(p4k)
	run := func(name string, args ...string) {
		out, err := exec.Command(args[0], args[1:]...).Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		files[name] = out
	}
	// Talos: xz -0 -T0 (independent 1 MiB blocks) and zstd -T0 -18.
	run("xz", "xz", "-0", "-T2", "--block-size=1MiB", "-c", p)
	run("xz-single", "xz", "-0", "-T1", "-c", p)
	run("zst", "zstd", "-q", "-T0", "-18", "-c", p)
	fixtureOK = true
}

// server serves the fixtures with fault injection chosen per request.
type server struct {
	*httptest.Server
	mode     atomic.Value // string
	requests atomic.Int32
	release  chan struct{}
}

func newServer(t *testing.T) *server {
	s := &server{release: make(chan struct{})}
	s.mode.Store("")
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	t.Cleanup(func() { close(s.release); s.Close() })
	return s
}

func (s *server) url(name string) string {
	return s.URL + "/talos/" + name + "?X-Amz-Signature=topsecret"
}

func (s *server) handle(w http.ResponseWriter, req *http.Request) {
	n := s.requests.Add(1)
	data, ok := files[filepath.Base(req.URL.Path)]
	mode := s.mode.Load().(string)
	if !ok || mode == "404" {
		http.NotFound(w, req)
		return
	}
	etag := `"v1"`
	switch mode {
	case "flip":
		data = append([]byte{}, data...)
		data[len(data)/2] ^= 0x10
	case "truncate":
		data = data[:len(data)*2/3]
	case "garbage":
		data = append(append([]byte{}, data...), []byte("<html>oops</html>")...)
	case "drop-once", "etag-change":
		if n == 1 {
			conn, buf, _ := w.(http.Hijacker).Hijack()
			fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nETag: %s\r\nAccept-Ranges: bytes\r\n\r\n", len(data), etag)
			buf.Write(data[:len(data)/2])
			buf.Flush()
			conn.Close()
			return
		}
		if mode == "etag-change" {
			etag = `"v2"`
		}
	case "slow":
		// About 2 MB/s, so that a terminal shows the run's progress for a
		// few seconds.
		w.Header().Set("ETag", etag)
		http.ServeContent(&throttled{ResponseWriter: w}, req, "img", time.Time{}, bytes.NewReader(data))
		return
	case "norange":
		// A server that ignores Range: the whole file, every time.
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.WriteHeader(http.StatusOK)
		w.Write(data)
		return
	case "stall":
		// The first answer stops after a third; resumes answer and then stall.
		w.Header().Set("ETag", etag)
		var start int
		if rg := req.Header.Get("Range"); rg != "" {
			fmt.Sscanf(rg, "bytes=%d-", &start)
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, len(data)-1, len(data)))
			w.Header().Set("Content-Length", fmt.Sprint(len(data)-start))
			w.WriteHeader(http.StatusPartialContent)
		} else {
			w.Header().Set("Content-Length", fmt.Sprint(len(data)))
			w.WriteHeader(200)
			w.Write(data[:len(data)/3])
		}
		w.(http.Flusher).Flush()
		select {
		case <-s.release:
		case <-req.Context().Done():
		}
		return
	}
	w.Header().Set("ETag", etag)
	http.ServeContent(w, req, "img", time.Time{}, bytes.NewReader(data))
}

// throttled writes 64 KiB every 30 ms.
type throttled struct{ http.ResponseWriter }

func (t *throttled) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k, err := t.ResponseWriter.Write(p[:min(len(p), 64<<10)])
		n += k
		if err != nil {
			return n, err
		}
		p = p[k:]
		t.ResponseWriter.(http.Flusher).Flush()
		time.Sleep(30 * time.Millisecond)
	}
	return n, nil
}

// host builds a fake rescue host: a fast NVMe disk, a bigger spinning disk,
// a USB stick, a loop device, an NVMe disk too small for anything, and NICs.
func host(t *testing.T, extra ...faketree.Disk) string {
	t.Helper()
	dir := faketree.DirectIODir(t)
	h := faketree.Host{
		Disks: append([]faketree.Disk{
			{Name: "nvme0n1", Size: 64 << 20, Model: "SAMSUNG MZQL2960HCJR-00A07", Serial: "S64FNE0R123456", WWID: "eui.36344630523012345"},
			{Name: "sda", Size: 128 << 20, Rotational: true, Model: "HGST HUS726T4TAL"},
			{Name: "sdb", Size: 256 << 20, USB: true, Removable: true, Model: "SanDisk Cruzer"},
			{Name: "loop0", Size: 100 << 20},
			{Name: "nvme1n1", Size: 8 << 20},
		}, extra...),
		NICs: []faketree.NIC{
			{Name: "eno1", MAC: "d2:11:22:33:44:55", PermMAC: "a0:36:9f:00:00:01", Driver: "ixgbe", PCI: "0000:01:00.0", Up: true, Speed: 10000, Master: "bond0"},
			{Name: "eno2", MAC: "a0:36:9f:00:00:02", Driver: "ixgbe", PCI: "0000:01:00.1"},
			{Name: "bond0", MAC: "d2:11:22:33:44:55", Virtual: true},
			{Name: "lo", MAC: "00:00:00:00:00:00", Virtual: true},
		},
		Mounts:       []string{"tmpfs / tmpfs", "proc /proc proc"},
		DefaultRoute: "bond0",
	}
	if err := faketree.Build(dir, h); err != nil {
		t.Fatal(err)
	}
	return dir
}

// oldInstall puts a previous OS (a GPT at both ends) on a fake disk.
func oldInstall(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	f.WriteAt([]byte("EFI PART old header"), 512)
	f.WriteAt(bytes.Repeat([]byte{0xCD}, 3<<20), 4<<20)
	f.WriteAt([]byte("EFI PART old backup"), st.Size()-512)
}

type run struct {
	code   int
	rep    *report.Report
	stdout string
	stderr string
}

func write(t *testing.T, root string, args ...string) run {
	t.Helper()
	return writeCtx(context.Background(), t, root, args...)
}

// mainReport runs Main and parses the one report it must print; secret,
// when not empty, must appear in neither stdout nor stderr.
func mainReport(ctx context.Context, t *testing.T, args []string, stdin io.Reader, secret string) run {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(ctx, args, stdin, &out, &errb)
	r := run{code: code, stdout: out.String(), stderr: errb.String()}
	rep, err := report.Parse(out.Bytes())
	if err != nil {
		t.Fatalf("%s: stdout is not one report: %v\n%s", args[0], err, out.String())
	}
	r.rep = rep
	if secret != "" && strings.Contains(r.stdout+r.stderr, secret) {
		t.Fatalf("%s: a secret leaked into the output:\n%s\n%s", args[0], r.stdout, r.stderr)
	}
	return r
}

func writeCtx(ctx context.Context, t *testing.T, root string, args ...string) run {
	t.Helper()
	full := append([]string{"write", "--sysroot", root, "--progress", "json", "--stall-timeout", "2s", "--connect-timeout", "2s", "--retries", "2"}, args...)
	r := mainReport(ctx, t, full, nil, "topsecret") // the presigned URL's signature
	// stderr holds only progress JSON lines.
	sc := bufio.NewScanner(strings.NewReader(r.stderr))
	for sc.Scan() {
		var p report.Progress
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil || p.Phase == "" {
			t.Fatalf("stderr line is not a progress object: %q", sc.Text())
		}
	}
	return r
}

func wantCode(t *testing.T, r run, code string) {
	t.Helper()
	got := ""
	if r.rep.Error != nil {
		got = r.rep.Error.Code
	}
	if got != code || r.code != report.ExitCode(code) || r.rep.OK != (code == "") {
		t.Fatalf("code %q exit %d ok %v, want code %q exit %d\nreport: %s\nstderr: %s", got, r.code, r.rep.OK, code, report.ExitCode(code), r.stdout, r.stderr)
	}
}

func diskBytes(t *testing.T, root, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "dev", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func assertImage(t *testing.T, root, name string) {
	t.Helper()
	b := diskBytes(t, root, name)
	if !bytes.Equal(b[:len(rawImage)], rawImage) {
		t.Fatalf("%s does not hold the image", name)
	}
}

func assertNoGPT(t *testing.T, root, name string) {
	t.Helper()
	b := diskBytes(t, root, name)
	if i := bytes.Index(b, []byte("EFI PART")); i >= 0 {
		t.Fatalf("%s still carries a GPT signature at offset %d: it could boot half-written", name, i)
	}
}

func TestWriteXZAutoDisk(t *testing.T) {
	fixtures(t)
	srv := newServer(t)
	root := host(t)
	oldInstall(t, filepath.Join(root, "dev", "nvme0n1"))
	r := write(t, root, "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", "auto", "--image-size", fmt.Sprint(imageSize), "--format", "auto", "--verify-readback")
	wantCode(t, r, "")
	assertImage(t, root, "nvme0n1")
	d := r.rep.Disk
	if d.Path != "/dev/nvme0n1" || d.Transport != "nvme" || d.Serial != "S64FNE0R123456" || d.Rotational || d.Reason == "" {
		t.Fatalf("disk %+v", d)
	}
	rejected := map[string]string{}
	for _, rd := range r.rep.RejectedDisks {
		rejected[rd.Path] = rd.Reason
	}
	for _, p := range []string{"/dev/sda", "/dev/sdb", "/dev/loop0", "/dev/nvme1n1"} {
		if rejected[p] == "" {
			t.Errorf("%s not listed as rejected: %v", p, rejected)
		}
	}
	if !strings.Contains(rejected["/dev/sdb"], "USB") || !strings.Contains(rejected["/dev/nvme1n1"], "too small") {
		t.Errorf("reasons: %v", rejected)
	}
	im := r.rep.Image
	if im.Format != "xz" || im.RawBytes != int64(len(rawImage)) || im.RawSHA256 != rawSHA || !im.Verified || !im.ReadbackVerified || !im.DirectIO ||
		im.CompressedBytes != int64(len(files["xz"])) || im.ZeroBytesSkipped == 0 || strings.Contains(im.URL, "?") {
		t.Fatalf("image %+v", im)
	}
	if len(r.rep.NICs) != 2 || r.rep.NICs[0].Name != "eno1" || r.rep.NICs[0].PermanentMAC != "a0:36:9f:00:00:01" || !r.rep.NICs[0].HasDefaultRoute {
		t.Fatalf("nics %+v", r.rep.NICs)
	}
	if !strings.Contains(r.stderr, `"phase":"done"`) {
		t.Fatalf("no final progress line: %s", r.stderr)
	}
}

func TestWriteFormats(t *testing.T) {
	fixtures(t)
	srv := newServer(t)
	for _, c := range []struct{ file, format string }{{"zst", "zstd"}, {"xz-single", "xz"}, {"raw", "raw"}} {
		root := host(t)
		r := write(t, root, "--image", srv.url(c.file), "--sha256", rawSHA, "--disk", "/dev/sda", "--format", c.format)
		wantCode(t, r, "")
		assertImage(t, root, "sda")
		if r.rep.Image.Format != c.format || r.rep.Disk.Path != "/dev/sda" {
			t.Fatalf("%s: %+v %+v", c.file, r.rep.Image, r.rep.Disk)
		}
	}
}

func TestResumeAfterDrop(t *testing.T) {
	fixtures(t)
	srv := newServer(t)
	srv.mode.Store("drop-once")
	root := host(t)
	r := write(t, root, "--image", srv.url("zst"), "--sha256", rawSHA)
	wantCode(t, r, "")
	assertImage(t, root, "nvme0n1")
	if r.rep.Image.Resumes != 1 || !strings.Contains(r.stderr, "resuming") {
		t.Fatalf("resumes = %d; stderr %s", r.rep.Image.Resumes, r.stderr)
	}
}

func TestFailures(t *testing.T) {
	fixtures(t)
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	deadURL := "http://" + closed.Addr().String() + "/talos/xz"
	closed.Close()
	wrongSHA := strings.Repeat("ab", 32)
	cases := []struct {
		name  string
		mode  string
		args  func(*server) []string
		code  string
		wiped bool // the disk was touched and must carry no GPT
	}{
		{"xz byte flipped", "flip", func(s *server) []string { return []string{"--image", s.url("xz"), "--sha256", rawSHA} }, report.CodeCorruptInput, true},
		{"zstd byte flipped", "flip", func(s *server) []string { return []string{"--image", s.url("zst"), "--sha256", rawSHA} }, report.CodeCorruptInput, true},
		{"raw byte flipped", "flip", func(s *server) []string { return []string{"--image", s.url("raw"), "--sha256", rawSHA} }, report.CodeDigestMismatch, true},
		{"truncated xz", "truncate", func(s *server) []string { return []string{"--image", s.url("xz"), "--sha256", rawSHA} }, report.CodeTruncatedInput, true},
		{"truncated zstd", "truncate", func(s *server) []string { return []string{"--image", s.url("zst"), "--sha256", rawSHA} }, report.CodeTruncatedInput, true},
		{"trailing garbage", "garbage", func(s *server) []string { return []string{"--image", s.url("xz"), "--sha256", rawSHA} }, report.CodeCorruptInput, true},
		{"wrong digest", "", func(s *server) []string { return []string{"--image", s.url("xz"), "--sha256", wrongSHA} }, report.CodeDigestMismatch, true},
		{"wrong format", "", func(s *server) []string {
			return []string{"--image", s.url("xz"), "--sha256", rawSHA, "--format", "zstd"}
		}, report.CodeUnsupportedFormat, false},
		{"disk too small", "", func(s *server) []string {
			return []string{"--image", s.url("xz"), "--sha256", rawSHA, "--disk", "/dev/nvme1n1"}
		}, report.CodeDiskTooSmall, false},
		{"raw image larger than the disk", "", func(s *server) []string {
			return []string{"--image", s.url("raw"), "--sha256", rawSHA, "--disk", "/dev/nvme1n1"}
		}, report.CodeDiskTooSmall, false},
		{"auto finds no disk big enough", "", func(s *server) []string {
			return []string{"--image", s.url("xz"), "--sha256", rawSHA, "--image-size", fmt.Sprint(1 << 30)}
		}, report.CodeDiskTooSmall, false},
		{"missing disk", "", func(s *server) []string {
			return []string{"--image", s.url("xz"), "--sha256", rawSHA, "--disk", "/dev/nvme7n1"}
		}, report.CodeDiskNotFound, false},
		{"unreachable URL", "", func(s *server) []string { return []string{"--image", deadURL, "--sha256", rawSHA, "--retries", "1"} }, report.CodeSourceUnreachable, false},
		{"404", "404", func(s *server) []string { return []string{"--image", s.url("xz"), "--sha256", rawSHA} }, report.CodeSourceRejected, false},
		{"slow server", "stall", func(s *server) []string {
			return []string{"--image", s.url("xz"), "--sha256", rawSHA, "--stall-timeout", "300ms", "--retries", "1"}
		}, report.CodeStalled, true},
		{"ETag changed on resume", "etag-change", func(s *server) []string { return []string{"--image", s.url("xz"), "--sha256", rawSHA} }, report.CodeSourceChanged, true},
		{"bad sha256", "", func(s *server) []string { return []string{"--image", s.url("xz"), "--sha256", "xyz"} }, report.CodeInvalidArgument, false},
		{"missing image", "", func(s *server) []string { return []string{"--sha256", rawSHA} }, report.CodeInvalidArgument, false},
		{"bad format flag", "", func(s *server) []string {
			return []string{"--image", s.url("xz"), "--sha256", rawSHA, "--format", "bz2"}
		}, report.CodeInvalidArgument, false},
		{"unknown flag", "", func(s *server) []string { return []string{"--image", s.url("xz"), "--sha256", rawSHA, "--bogus"} }, report.CodeInvalidArgument, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := newServer(t)
			srv.mode.Store(c.mode)
			root := host(t)
			oldInstall(t, filepath.Join(root, "dev", "nvme0n1"))
			r := write(t, root, c.args(srv)...)
			wantCode(t, r, c.code)
			if r.rep.Error.Message == "" {
				t.Fatal("no error message")
			}
			if c.wiped {
				assertNoGPT(t, root, "nvme0n1")
				if !strings.Contains(r.rep.Error.Message, "wiped") {
					t.Fatalf("message does not say the disk was wiped: %s", r.rep.Error.Message)
				}
			} else if !bytes.Contains(diskBytes(t, root, "nvme0n1"), []byte("EFI PART old")) {
				t.Fatal("the disk was touched although the command failed before writing")
			}
		})
	}
}

func TestDiskInUse(t *testing.T) {
	fixtures(t)
	srv := newServer(t)
	dir := faketree.DirectIODir(t)
	err := faketree.Build(dir, faketree.Host{
		Disks: []faketree.Disk{
			{Name: "sda", Size: 64 << 20, Partitions: []string{"sda1"}},
			{Name: "sdb", Size: 64 << 20, Holders: []string{"md127"}},
			{Name: "nvme0n1", Size: 64 << 20, Partitions: []string{"nvme0n1p1"}},
		},
		Mounts: []string{"/dev/sda1 / ext4", "/dev/nvme0n1p1 /mnt xfs"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"/dev/sda", "/dev/sdb", "/dev/nvme0n1"} {
		r := write(t, dir, "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", d)
		wantCode(t, r, report.CodeDiskBusy)
	}
	r := write(t, dir, "--image", srv.url("xz"), "--sha256", rawSHA)
	wantCode(t, r, report.CodeDiskBusy)
	if len(r.rep.RejectedDisks) != 3 {
		t.Fatalf("rejected %+v", r.rep.RejectedDisks)
	}
}

func TestSectorSizeMismatch(t *testing.T) {
	fixtures(t)
	srv := newServer(t)
	root := host(t, faketree.Disk{Name: "nvme2n1", Size: 64 << 20, SectorSize: 4096})
	r := write(t, root, "--image", srv.url("xz"), "--sha256", rawSHA, "--disk", "/dev/nvme2n1")
	wantCode(t, r, report.CodeDiskUnsuitable)
}

func TestInterrupted(t *testing.T) {
	fixtures(t)
	srv := newServer(t)
	srv.mode.Store("stall")
	root := host(t)
	oldInstall(t, filepath.Join(root, "dev", "nvme0n1"))
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		// Cancel once the download has started (the server saw the request).
		for srv.requests.Load() == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		cancel()
	}()
	r := writeCtx(ctx, t, root, "--image", srv.url("xz"), "--sha256", rawSHA, "--stall-timeout", "1m")
	wantCode(t, r, report.CodeInterrupted)
	assertNoGPT(t, root, "nvme0n1")
}

func TestInspect(t *testing.T) {
	root := host(t)
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"inspect", "--sysroot", root, "--image-size", fmt.Sprint(imageSize)}, nil, &out, &errb)
	rep, err := report.Parse(out.Bytes())
	if err != nil || code != 0 || !rep.OK || rep.Command != "inspect" {
		t.Fatalf("code %d err %v: %s", code, err, out.String())
	}
	if rep.Disk == nil || rep.Disk.Path != "/dev/nvme0n1" || len(rep.RejectedDisks) != 4 || len(rep.NICs) != 2 {
		t.Fatalf("inspect: %s", out.String())
	}
	// Nothing written.
	if b := diskBytes(t, root, "nvme0n1"); !bytes.Equal(b[:4096], make([]byte, 4096)) {
		t.Fatal("inspect wrote to a disk")
	}
	out.Reset()
	code = Main(context.Background(), []string{"inspect", "--sysroot", root, "--disk", "/dev/nvme5n1"}, nil, &out, &errb)
	rep, _ = report.Parse(out.Bytes())
	if code != 5 || rep.Error == nil || rep.Error.Code != report.CodeDiskNotFound {
		t.Fatalf("inspect of a missing disk: %d %s", code, out.String())
	}
}

func TestVersionAndUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if Main(context.Background(), []string{"version"}, nil, &out, &errb) != 0 || !strings.HasPrefix(out.String(), "em-imager ") {
		t.Fatalf("version: %q", out.String())
	}
	if Main(context.Background(), []string{"frobnicate"}, nil, &out, &errb) != 2 || !strings.Contains(errb.String(), "unknown command") {
		t.Fatal("unknown command accepted")
	}
	if Main(context.Background(), nil, nil, &out, &errb) != 2 {
		t.Fatal("no command accepted")
	}
}

// TestBinary runs the real static binary the way the controller does, with
// the fake root given through the environment.
func TestBinary(t *testing.T) {
	fixtures(t)
	bin := imagerBinary(t)
	srv := newServer(t)
	root := host(t)
	for _, c := range []struct {
		sha  string
		code string
	}{{rawSHA, ""}, {strings.Repeat("0", 64), report.CodeDigestMismatch}} {
		cmd := exec.Command(bin, "write", "--image", srv.url("xz"), "--sha256", c.sha, "--disk", "auto", "--format", "auto", "--progress", "json")
		cmd.Env = append(os.Environ(), "EM_IMAGER_SYSROOT="+root)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		exit := 0
		ee := &exec.ExitError{}
		if errors.As(err, &ee) {
			exit = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(&out)
		var rep report.Report
		if err := dec.Decode(&rep); err != nil {
			t.Fatalf("stdout: %v", err)
		}
		if dec.More() {
			t.Fatal("stdout holds more than one JSON object")
		}
		got := ""
		if rep.Error != nil {
			got = rep.Error.Code
		}
		if got != c.code || exit != report.ExitCode(c.code) {
			t.Fatalf("code %q exit %d, want %q; stderr: %s", got, exit, c.code, errb.String())
		}
	}
}

// imagerBinary builds the static em-imager into the test's temporary directory.
func imagerBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "em-imager")
	build := exec.Command("go", "build", "-o", bin, "../cmd/em-imager")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
