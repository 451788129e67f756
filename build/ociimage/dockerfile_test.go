package ociimage_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/build/ociimage"
)

// dockerfiles names the top-level Dockerfile of each image.
var dockerfiles = map[string]string{
	ociimage.Controller.Name: "Dockerfile",
	ociimage.Imager.Name:     "Dockerfile.imager",
}

// testDockerfiles builds the top-level Dockerfile and Dockerfile.imager with
// Debian's buildah (no daemon: chroot isolation, vfs storage in a temporary
// directory) from the context Build wrote, for every platform, as a user's
// CI would with `docker build .`, and checks that each image holds what
// `make image`'s does: the same files with the same owners, modes and bytes
// (so the same binary, by sha256), entrypoint, user, environment, working
// directory and labels. ctxRoot is the directory holding bin/image/context,
// standing for the repository's top level.
func testDockerfiles(t *testing.T, root, ctxRoot string, res *ociimage.Result) {
	buildah, err := exec.LookPath("buildah")
	if err != nil {
		t.Fatalf("the Dockerfiles are built with buildah: install Debian's buildah (make deps): %v", err)
	}
	if res.Context != filepath.Join(ctxRoot, "bin", "image", ociimage.ContextDir) {
		t.Fatalf("Build wrote the context to %s, want %s/bin/image/%s (where the Dockerfiles read it)", res.Context, ctxRoot, ociimage.ContextDir)
	}
	// The repository's .dockerignore decides what the context holds, as
	// it does for `docker build .` at the top level.
	ignore, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctxRoot, ".dockerignore"), ignore, 0o644); err != nil {
		t.Fatal(err)
	}
	buildArgs := readBuildArgs(t, filepath.Join(res.Context, ociimage.BuildArgsFile))
	store := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		global := []string{"--root", filepath.Join(store, "root"), "--runroot", filepath.Join(store, "run"), "--storage-driver", "vfs"}
		cmd := exec.Command(buildah, append(global, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("buildah %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, b := range res.Images {
		ix, _, err := ociimage.ReadLayout(b.Layout)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range b.Platforms {
			t.Run(dockerfiles[b.Image.Name]+"/linux-"+p.Arch, func(t *testing.T) {
				tag := "localhost/" + b.Image.Name + ":" + p.Arch
				args := []string{"bud", "--isolation", "chroot", "--platform", "linux/" + p.Arch,
					"--identity-label=false", "-f", filepath.Join(root, dockerfiles[b.Image.Name]), "-t", tag}
				for _, a := range buildArgs {
					args = append(args, "--build-arg", a)
				}
				run(append(args, ctxRoot)...)
				out := filepath.Join(t.TempDir(), "oci")
				run("push", tag, "oci:"+out)
				built := onlyImage(t, out)
				want := platformImage(t, ix, p.Arch)
				compareConfigs(t, configOf(t, built), configOf(t, want))
				compareFiles(t, extract(t, built), extract(t, want), b.Image.Entrypoint())
			})
		}
	}
}

func readBuildArgs(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var args []string
	for s := bufio.NewScanner(f); s.Scan(); {
		args = append(args, s.Text())
	}
	var keys []string
	for _, a := range args {
		k, _, _ := strings.Cut(a, "=")
		keys = append(keys, k)
	}
	if !slices.Equal(keys, []string{"VERSION", "REVISION", "CREATED"}) {
		t.Fatalf("%s holds %v, want VERSION, REVISION and CREATED", path, keys)
	}
	return args
}

// onlyImage opens the one image of the OCI layout buildah pushed.
func onlyImage(t *testing.T, dir string) v1.Image {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := p.Image(topDescriptor(t, dir).Digest)
	if err != nil {
		t.Fatal(err)
	}
	return im
}

func configOf(t *testing.T, im v1.Image) *v1.ConfigFile {
	t.Helper()
	cfg, err := im.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// compareConfigs: what a runtime uses from the config is the same. The
// creation time and history are the builder's own.
func compareConfigs(t *testing.T, got, want *v1.ConfigFile) {
	t.Helper()
	if got.OS != want.OS || got.Architecture != want.Architecture {
		t.Errorf("platform %s/%s, make image's %s/%s", got.OS, got.Architecture, want.OS, want.Architecture)
	}
	g, w := got.Config, want.Config
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"entrypoint", g.Entrypoint, w.Entrypoint},
		{"cmd", g.Cmd, w.Cmd},
		{"user", g.User, w.User},
		{"working directory", g.WorkingDir, w.WorkingDir},
		{"environment", g.Env, w.Env},
	} {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s %q, make image's %q", c.what, c.got, c.want)
		}
	}
	if !maps.Equal(g.Labels, w.Labels) {
		t.Errorf("labels %v, make image's %v", g.Labels, w.Labels)
	}
}

// compareFiles: the same paths, each with the same type, owner, mode and
// bytes. Timestamps are the builder's own.
func compareFiles(t *testing.T, got, want map[string]*entry, entrypoint string) {
	t.Helper()
	delete(got, "/") // a builder may record the root directory itself
	for _, p := range slices.Sorted(maps.Keys(want)) {
		w, g := want[p], got[p]
		if g == nil {
			t.Errorf("%s: missing (make image's has it)", p)
			continue
		}
		if g.hdr.Typeflag != w.hdr.Typeflag || g.hdr.Mode&0o7777 != w.hdr.Mode&0o7777 || g.hdr.Uid != w.hdr.Uid || g.hdr.Gid != w.hdr.Gid {
			t.Errorf("%s: type %c mode %o owner %d:%d, make image's type %c mode %o owner %d:%d", p,
				g.hdr.Typeflag, g.hdr.Mode&0o7777, g.hdr.Uid, g.hdr.Gid, w.hdr.Typeflag, w.hdr.Mode&0o7777, w.hdr.Uid, w.hdr.Gid)
		}
		if w.hdr.Typeflag == tar.TypeReg && !bytes.Equal(g.data, w.data) {
			t.Errorf("%s: sha256 %x, make image's %x", p, sha256.Sum256(g.data), sha256.Sum256(w.data))
		}
	}
	for _, p := range slices.Sorted(maps.Keys(got)) {
		if want[p] == nil {
			t.Errorf("%s: not in make image's image", p)
		}
	}
	if e := got[entrypoint]; e != nil {
		t.Logf("%s sha256 %x, as in make image's", entrypoint, sha256.Sum256(e.data))
	}
}
