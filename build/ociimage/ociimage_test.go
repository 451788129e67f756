package ociimage_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/build/ociimage"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

const (
	testRevision = "0123456789abcdef0123456789abcdef01234567"
	testEpoch    = 1767225600 // 2026-01-01T00:00:00Z
)

// TestBuild builds both images twice, as `make image` does, then opens what
// the first build wrote with go-containerregistry and checks every platform's
// image: config, filesystem, the binaries, and that they run. Then it builds
// the top-level Dockerfiles from the first build's context with buildah and
// compares them with it (testDockerfiles, about 30 s more).
//
// Cost: four go builds (em-imager and the controller, amd64 and arm64) per
// build; with the build cache warm, links and gzip dominate: about 1m10s per
// build on the shared 2-core machine (the durations are logged). A cold cache
// first compiles the dependencies for arm64 (about 7 CPU minutes).
func TestBuild(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	version, err := ociimage.ChartVersion(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	build := func(out string) *ociimage.Result {
		t.Helper()
		res, err := ociimage.Build(ctx, ociimage.Options{
			Root: root, Out: out, Revision: testRevision, SourceDateEpoch: testEpoch, Log: logWriter{t},
		})
		if err != nil {
			t.Fatalf("build: %v", err)
		}
		return res
	}
	dir := t.TempDir()
	// The first build's output stands where `make image` writes it, under
	// bin/image of a repository top level, where the Dockerfiles read it.
	top := filepath.Join(dir, "first")
	first := build(filepath.Join(top, "bin", "image"))
	second := build(filepath.Join(dir, "second"))
	t.Logf("first build %s, second %s", first.Duration.Round(time.Millisecond), second.Duration.Round(time.Millisecond))

	t.Run("reproducible", func(t *testing.T) {
		for i, a := range first.Images {
			b := second.Images[i]
			if a.Digest != b.Digest {
				t.Errorf("%s: index %s, then %s", a.Image.Name, a.Digest, b.Digest)
			}
			for j := range a.Platforms {
				if a.Platforms[j].Digest != b.Platforms[j].Digest {
					t.Errorf("%s linux/%s: image %s, then %s", a.Image.Name, a.Platforms[j].Arch, a.Platforms[j].Digest, b.Platforms[j].Digest)
				}
			}
			if ha, hb := fileSHA256(t, a.Archive), fileSHA256(t, b.Archive); ha != hb {
				t.Errorf("%s: archive sha256 %s, then %s", filepath.Base(a.Archive), ha, hb)
			}
		}
	})

	// Binaries as extracted from the images, by image name and arch.
	bins := map[string]map[string][]byte{}
	for _, b := range first.Images {
		bins[b.Image.Name] = map[string][]byte{}
		ix, tag, err := ociimage.ReadLayout(b.Layout)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(b.Image.Name+"/index", func(t *testing.T) {
			checkIndex(t, b, ix, tag, version)
		})
		for _, p := range b.Platforms {
			t.Run(b.Image.Name+"/linux-"+p.Arch, func(t *testing.T) {
				im := platformImage(t, ix, p.Arch)
				if d, _ := im.Digest(); d != p.Digest {
					t.Errorf("layout holds %s for linux/%s, Build reported %s", d, p.Arch, p.Digest)
				}
				cfg, err := im.ConfigFile()
				if err != nil {
					t.Fatal(err)
				}
				checkConfig(t, b.Image, p.Arch, cfg, version)
				files := extract(t, im)
				checkFilesystem(t, b.Image, cfg, files, first.CACerts)
				bin := fileData(t, files, b.Image.Entrypoint())
				checkStatic(t, bin, p.Arch)
				bins[b.Image.Name][p.Arch] = bin
				out := runVersion(t, bin, p.Arch)
				want := fmt.Sprintf("%s %s (go", b.Image.Name, version)
				if !strings.HasPrefix(out, want) || !strings.Contains(out, " linux/"+p.Arch) {
					t.Errorf("%s --version = %q, want %q... linux/%s", b.Image.Entrypoint(), out, want, p.Arch)
				}
				if b.Image.EmbedsImager {
					checkEmbeddedImager(t, bin, out, bins[ociimage.Imager.Name][ociimage.ServerArch])
				}
			})
		}
	}

	t.Run("push", func(t *testing.T) { testPush(t, ctx, first, version) })
	t.Run("dockerfiles", func(t *testing.T) { testDockerfiles(t, root, top, first) })
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// checkIndex: the layout's one entry is a multi-arch OCI index named as the
// chart expects, annotated like the images' labels.
func checkIndex(t *testing.T, b ociimage.Built, ix v1.ImageIndex, tag, version string) {
	if tag != version {
		t.Errorf("layout tag %q, want the chart's appVersion %q", tag, version)
	}
	top := topDescriptor(t, b.Layout)
	want, err := b.Image.Reference(ociimage.DefaultRegistry, version)
	if err != nil {
		t.Fatal(err)
	}
	// The chart's default image is this reference (test/chart checks the
	// rendered Deployment): what `ctr images import` names the image.
	if got := top.Annotations[ociimage.AnnotationImageRef]; got != want.String() {
		t.Errorf("%s = %q, want %q", ociimage.AnnotationImageRef, got, want)
	}
	if top.Digest != b.Digest {
		t.Errorf("layout index %s, Build reported %s", top.Digest, b.Digest)
	}
	m, err := ix.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s", m.MediaType)
	}
	var archs []string
	for _, d := range m.Manifests {
		if d.MediaType != types.OCIManifestSchema1 || d.Platform == nil || d.Platform.OS != "linux" {
			t.Errorf("index entry %+v: want an OCI linux image manifest", d)
			continue
		}
		archs = append(archs, d.Platform.Architecture)
	}
	if !slices.Equal(archs, ociimage.Platforms) {
		t.Errorf("platforms %v, want %v", archs, ociimage.Platforms)
	}
	if !maps.Equal(m.Annotations, wantLabels(b.Image, version)) {
		t.Errorf("index annotations %v, want %v", m.Annotations, wantLabels(b.Image, version))
	}
}

// topDescriptor is the layout's index.json entry.
func topDescriptor(t *testing.T, dir string) v1.Descriptor {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	ii, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("%s/index.json has %d entries, want 1", dir, len(m.Manifests))
	}
	return m.Manifests[0]
}

func platformImage(t *testing.T, ix v1.ImageIndex, arch string) v1.Image {
	t.Helper()
	m, err := ix.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.Architecture == arch {
			im, err := ix.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return im
		}
	}
	t.Fatalf("no linux/%s image in the index", arch)
	return nil
}

func wantLabels(img ociimage.Image, version string) map[string]string {
	return map[string]string{
		ociimage.LabelTitle:       img.Title,
		ociimage.LabelDescription: img.Description,
		ociimage.LabelSource:      "https://github.com/karpenter-scaleway-em/karpenter-scaleway-em",
		ociimage.LabelVersion:     version,
		ociimage.LabelRevision:    testRevision,
		ociimage.LabelLicenses:    "Apache-2.0",
		ociimage.LabelCreated:     "2026-01-01T00:00:00Z",
	}
}

func checkConfig(t *testing.T, img ociimage.Image, arch string, cfg *v1.ConfigFile, version string) {
	t.Helper()
	if cfg.OS != "linux" || cfg.Architecture != arch {
		t.Errorf("config platform %s/%s, want linux/%s", cfg.OS, cfg.Architecture, arch)
	}
	if want := []string{"/" + img.Name}; !slices.Equal(cfg.Config.Entrypoint, want) || len(cfg.Config.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want %q and no cmd", cfg.Config.Entrypoint, cfg.Config.Cmd, want)
	}
	uid, gid := parseUser(t, cfg.Config.User)
	if uid == 0 || gid == 0 || uid != 65532 {
		t.Errorf("user %q, want the non-root 65532:65532", cfg.Config.User)
	}
	if !maps.Equal(cfg.Config.Labels, wantLabels(img, version)) {
		t.Errorf("labels %v, want %v", cfg.Config.Labels, wantLabels(img, version))
	}
	if !cfg.Created.Time.Equal(time.Unix(testEpoch, 0)) {
		t.Errorf("created %s, want SOURCE_DATE_EPOCH %d", cfg.Created.Time, testEpoch)
	}
	for _, h := range cfg.History {
		if !h.Created.Time.Equal(time.Unix(testEpoch, 0)) {
			t.Errorf("history %q created %s, want SOURCE_DATE_EPOCH", h.CreatedBy, h.Created.Time)
		}
	}
}

// parseUser reads a numeric "uid:gid" (Kubernetes' runAsNonRoot can only
// check a numeric user).
func parseUser(t *testing.T, user string) (int, int) {
	t.Helper()
	u, g, ok := strings.Cut(user, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("user %q is not numeric uid:gid", user)
	}
	return uid, gid
}

type entry struct {
	hdr  *tar.Header
	data []byte
}

// extract flattens the image's layers as a runtime would.
func extract(t *testing.T, im v1.Image) map[string]*entry {
	t.Helper()
	rc := mutate.Extract(im)
	defer rc.Close()
	files := map[string]*entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[path.Clean("/"+h.Name)] = &entry{hdr: h, data: data}
	}
}

func checkFilesystem(t *testing.T, img ociimage.Image, cfg *v1.ConfigFile, files map[string]*entry, caCerts int) {
	t.Helper()
	// No shell, no other program: the binary is the only executable and
	// nothing is a link (a busybox would be sh by link).
	var execs []string
	for p, e := range files {
		switch {
		case e.hdr.Typeflag == tar.TypeSymlink || e.hdr.Typeflag == tar.TypeLink:
			t.Errorf("%s is a link to %s", p, e.hdr.Linkname)
		case e.hdr.Typeflag == tar.TypeReg && e.hdr.Mode&0o111 != 0:
			execs = append(execs, p)
		}
		if b := path.Base(p); slices.Contains([]string{"sh", "bash", "ash", "dash", "busybox"}, b) {
			t.Errorf("%s: a shell", p)
		}
		if !e.hdr.ModTime.Equal(time.Unix(testEpoch, 0)) {
			t.Errorf("%s mtime %s, want SOURCE_DATE_EPOCH", p, e.hdr.ModTime)
		}
	}
	if want := []string{img.Entrypoint()}; !slices.Equal(execs, want) {
		t.Errorf("executables %v, want only %v", execs, want)
	}
	if e := files[img.Entrypoint()]; e == nil || e.hdr.Uid != 0 || e.hdr.Mode&0o022 != 0 {
		t.Errorf("%s must exist, root-owned and not writable by the user it runs as", img.Entrypoint())
	}

	// The config's user is in passwd and group, with its home.
	uid, gid := parseUser(t, cfg.Config.User)
	passwd := string(fileData(t, files, "/etc/passwd"))
	var home string
	for _, line := range strings.Split(strings.TrimSpace(passwd), "\n") {
		f := strings.Split(line, ":")
		if len(f) == 7 && f[2] == strconv.Itoa(uid) && f[3] == strconv.Itoa(gid) {
			home = f[5]
		}
	}
	if home == "" {
		t.Fatalf("/etc/passwd has no %d:%d user:\n%s", uid, gid, passwd)
	}
	if !strings.Contains(string(fileData(t, files, "/etc/group")), ":x:"+strconv.Itoa(gid)+":") {
		t.Errorf("/etc/group has no group %d", gid)
	}
	if h := files[home]; h == nil || h.hdr.Typeflag != tar.TypeDir || h.hdr.Uid != uid {
		t.Errorf("home %s missing or not owned by %d", home, uid)
	}
	if tmp := files["/tmp"]; tmp == nil || tmp.hdr.Mode&0o1777 != 0o1777 {
		t.Errorf("/tmp missing or not 1777")
	}

	// Every certificate of Debian's package, parseable.
	pool := x509.NewCertPool()
	bundle := fileData(t, files, ociimage.CABundlePath)
	if !pool.AppendCertsFromPEM(bundle) || strings.Count(string(bundle), "BEGIN CERTIFICATE") != caCerts || caCerts == 0 {
		t.Errorf("%s: want %d certificates", ociimage.CABundlePath, caCerts)
	}
	if !slices.Contains(cfg.Config.Env, "SSL_CERT_FILE="+ociimage.CABundlePath) {
		t.Errorf("env %v lacks SSL_CERT_FILE", cfg.Config.Env)
	}
}

func fileData(t *testing.T, files map[string]*entry, p string) []byte {
	t.Helper()
	e := files[p]
	if e == nil || e.hdr.Typeflag != tar.TypeReg {
		t.Fatalf("%s missing", p)
	}
	return e.data
}

// checkStatic: an ELF executable for arch with no interpreter and no
// dynamic section, i.e. it needs nothing from the image but itself.
func checkStatic(t *testing.T, bin []byte, arch string) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("not ELF: %v", err)
	}
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != machine || f.Type != elf.ET_EXEC {
		t.Errorf("ELF %s %s, want %s executable", f.Machine, f.Type, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("program header %s: dynamically linked", p.Type)
		}
	}
	for _, s := range []string{".interp", ".dynamic"} {
		if f.Section(s) != nil {
			t.Errorf("section %s: dynamically linked", s)
		}
	}
}

// runVersion runs bin --version natively or, for the other architecture,
// under qemu-user (Debian's qemu-user, installed by make deps).
func runVersion(t *testing.T, bin []byte, arch string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "entrypoint")
	if err := os.WriteFile(p, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p, "--version")
	if arch != runtime.GOARCH {
		qemu := map[string]string{"amd64": "qemu-x86_64", "arm64": "qemu-aarch64"}[arch]
		q, err := exec.LookPath(qemu)
		if err != nil {
			t.Fatalf("%s is needed to run the linux/%s binary here: install Debian's qemu-user (make deps): %v", qemu, arch, err)
		}
		cmd = exec.Command(q, p, "--version")
	}
	cmd.Env = []string{} // it must need nothing from the environment
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", arch, err, out)
	}
	return strings.TrimSpace(string(out))
}

// checkEmbeddedImager: the controller holds, byte for byte, the em-imager
// the em-imager image ships for the servers' architecture, and says so.
func checkEmbeddedImager(t *testing.T, controller []byte, version string, imager []byte) {
	t.Helper()
	if imager == nil {
		t.Fatal("no em-imager binary for the servers' architecture was extracted")
	}
	if n := bytes.Count(controller, imager); n != 1 {
		t.Errorf("the controller holds the em-imager image's linux/%s binary %d times, want once", ociimage.ServerArch, n)
	}
	sum := sha256.Sum256(imager)
	if want := "em-imager sha256:" + hex.EncodeToString(sum[:]); !strings.Contains(version, want) {
		t.Errorf("controller --version %q, want %q", version, want)
	}
}

func fileSHA256(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
