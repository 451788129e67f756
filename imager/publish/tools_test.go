package publish

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildImager cross-builds em-imager's static binary for linux/arch, as
// `make imager-binaries` does.
func buildImager(t *testing.T, arch string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "em-imager-linux-"+arch)
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "../cmd/em-imager")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build for %s: %v\n%s", arch, err, b)
	}
	return out
}

// TestPublishUploadsImager: both architectures' em-imager go into the
// bucket with their sha256 (an object and a sha256sum file); the files an
// operator downloads pass `sha256sum -c` and the arm64 build runs (qemu).
// Publishing again uploads nothing. The running binary is the default.
func TestPublishUploadsImager(t *testing.T) {
	amd64, arm64 := buildImager(t, "amd64"), buildImager(t, "arm64")
	s3 := startS3(t)
	s3.MustCreateBucket(t, bucket)
	c := s3.MustClient(t)
	in := writeFile(t, "metal-amd64.raw", makeRaw(4<<20, 31))
	args := baseArgs(in, "--imager-binary", amd64, "--imager-binary", arm64)

	r := publish(t, s3.env(nil), args...)
	if r.code != 0 || len(r.sum.Tools) != 2 {
		t.Fatalf("exit %d, summary %+v\n%s", r.code, r.sum, r.stderr)
	}
	dl := t.TempDir()
	for i, arch := range []string{"amd64", "arm64"} {
		tool := r.sum.Tools[i]
		name := "em-imager-linux-" + arch
		if tool.Arch != arch || tool.Key != "images/tools/"+name || tool.SHA256Key != tool.Key+".sha256" || tool.Action != "uploaded" {
			t.Fatalf("tool %+v", tool)
		}
		bin, st := fetch(t, c, tool.Key)
		local, _ := os.ReadFile(map[string]string{"amd64": amd64, "arm64": arm64}[arch])
		if !bytes.Equal(bin, local) || sum(bin) != tool.SHA256 || metaSHA256(st.UserMetadata) != tool.SHA256 {
			t.Fatalf("%s: the object is not the build, or its digest is wrong", tool.Key)
		}
		sumFile, _ := fetch(t, c, tool.SHA256Key)
		if string(sumFile) != tool.SHA256+"  "+name+"\n" {
			t.Fatalf("%s: %q", tool.SHA256Key, sumFile)
		}
		os.WriteFile(filepath.Join(dl, name), bin, 0o755)
		os.WriteFile(filepath.Join(dl, name+".sha256"), sumFile, 0o644)
		check := exec.Command("sha256sum", "-c", name+".sha256")
		check.Dir = dl
		if out, err := check.CombinedOutput(); err != nil || !strings.Contains(string(out), name+": OK") {
			t.Fatalf("sha256sum -c: %v\n%s", err, out)
		}
	}
	runner := exec.Command("qemu-aarch64", filepath.Join(dl, "em-imager-linux-arm64"), "version")
	if out, err := runner.CombinedOutput(); err != nil || !strings.Contains(string(out), "linux/arm64") {
		t.Fatalf("the arm64 build under qemu-aarch64: %v\n%s (make deps installs qemu-user)", err, out)
	}
	// A tampered download fails the check.
	os.WriteFile(filepath.Join(dl, "em-imager-linux-amd64"), []byte("not em-imager"), 0o755)
	check := exec.Command("sha256sum", "-c", "em-imager-linux-amd64.sha256")
	check.Dir = dl
	if err := check.Run(); err == nil {
		t.Fatal("sha256sum -c accepted a tampered binary")
	}

	// The summary gives the manifest's digest, for --manifest-sha256.
	stored, _ := fetch(t, c, r.sum.ManifestKey)
	if r.sum.ManifestSHA256 != sum(stored) {
		t.Fatalf("manifestSha256 %s, the stored manifest's is %s", r.sum.ManifestSHA256, sum(stored))
	}
	r = publish(t, s3.env(nil), args...)
	if r.code != 0 || r.sum.Tools[0].Action != "skipped" || r.sum.Tools[1].Action != "skipped" ||
		r.sum.ManifestAction != "skipped" || r.sum.ManifestSHA256 != sum(stored) {
		t.Fatalf("republish: %+v %s %s", r.sum.Tools, r.sum.ManifestAction, r.sum.ManifestSHA256)
	}

	// Without --imager-binary, the running em-imager is uploaded.
	var out, errb bytes.Buffer
	code := mainEnv(context.Background(), baseArgs(in, "--prefix", "other"), &out, &errb, s3.env(nil), amd64)
	if code != 0 || !strings.Contains(out.String(), `"key": "other/tools/em-imager-linux-amd64"`) || strings.Contains(out.String(), "arm64") {
		t.Fatalf("default: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
}

// TestPublishRefusesWrongImagerBinary: what is not a static Linux
// em-imager build is refused before anything is uploaded.
func TestPublishRefusesWrongImagerBinary(t *testing.T) {
	amd64 := buildImager(t, "amd64")
	s3 := startS3(t)
	s3.MustCreateBucket(t, bucket)
	c := s3.MustClient(t)
	in := writeFile(t, "metal-amd64.raw", makeRaw(2<<20, 32))
	self, _ := os.Executable() // this test binary: Go, but not em-imager
	script := writeFile(t, "em-imager", []byte("#!/bin/sh\necho hi\n"))
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"not a Go binary":         {[]string{"--imager-binary", script}, "not a Go binary"},
		"another program":         {[]string{"--imager-binary", self}, "not em-imager"},
		"two builds for one arch": {[]string{"--imager-binary", amd64, "--imager-binary", amd64}, "both amd64 builds"},
		"missing file":            {[]string{"--imager-binary", filepath.Join(t.TempDir(), "none")}, "--imager-binary"},
		"contradiction":           {[]string{"--imager-binary", amd64, "--no-imager"}, "contradict"},
	} {
		t.Run(name, func(t *testing.T) {
			r := publish(t, s3.env(nil), baseArgs(in, c.args...)...)
			if r.code != 2 || r.sum.Error == nil || !strings.Contains(r.sum.Error.Message, c.want) {
				t.Fatalf("exit %d %+v, want exit 2 naming %q", r.code, r.sum.Error, c.want)
			}
		})
	}
	if keys := listKeys(t, c); len(keys) != 0 {
		t.Fatalf("refused publishes uploaded %v", keys)
	}
	r := publish(t, s3.env(nil), baseArgs(in, "--no-imager")...)
	if r.code != 0 || len(r.sum.Tools) != 0 {
		t.Fatalf("--no-imager: exit %d tools %+v", r.code, r.sum.Tools)
	}
}
