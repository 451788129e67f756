package ociimage_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/build/ociimage"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

// TestBuildRefuses: bad input fails before anything is compiled (go is
// "false" here, so reaching a build would fail differently), with a message
// that says what to change.
func TestBuildRefuses(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	emptyDir := t.TempDir()
	notPEM := t.TempDir()
	if err := os.WriteFile(filepath.Join(notPEM, "a.crt"), []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	keyPEM := t.TempDir()
	if err := os.WriteFile(filepath.Join(keyPEM, "a.crt"), []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*ociimage.Options)
		want string
	}{
		{"tag with +", func(o *ociimage.Options) { o.Version = "0.1.0+build.1" }, `version "0.1.0+build.1" is not a valid image tag`},
		{"no registry host", func(o *ociimage.Options) { o.Registry = "team" }, `registry "team"`},
		{"upper-case repository", func(o *ociimage.Options) { o.Registry = "ghcr.io/Team" }, `registry "ghcr.io/Team"`},
		{"unknown platform", func(o *ociimage.Options) { o.Platforms = []string{"amd64", "s390x"} }, `platform "s390x"`},
		{"platform twice", func(o *ociimage.Options) { o.Platforms = []string{"arm64", "arm64"} }, `platform "arm64" given twice`},
		{"no revision", func(o *ociimage.Options) { o.Revision = "" }, "Revision is required"},
		{"negative epoch", func(o *ociimage.Options) { o.SourceDateEpoch = -1 }, "negative"},
		{"no certificates", func(o *ociimage.Options) { o.CACerts = emptyDir }, "install Debian's ca-certificates"},
		{"not PEM", func(o *ociimage.Options) { o.CACerts = notPEM }, "a.crt: not a PEM certificate file"},
		{"a key, not a certificate", func(o *ociimage.Options) { o.CACerts = keyPEM }, `"PRIVATE KEY", want CERTIFICATE`},
		{"no chart", func(o *ociimage.Options) { o.Root, o.Version = emptyDir, "" }, "default version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ociimage.Options{Root: root, Out: t.TempDir(), Revision: testRevision, Go: "false"}
			tc.edit(&o)
			_, err := ociimage.Build(t.Context(), o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Build: %v, want an error containing %q", err, tc.want)
			}
			if entries, _ := os.ReadDir(o.Out); len(entries) != 0 {
				t.Errorf("refused build wrote %d entries to %s", len(entries), o.Out)
			}
		})
	}
}

// TestBuildReportsCompileErrors: a package that does not compile fails the
// build with the compiler's message, and no layout is written.
func TestBuildReportsCompileErrors(t *testing.T) {
	root := t.TempDir()
	for name, content := range map[string]string{
		"go.mod":                       "module github.com/karpenter-scaleway-em/karpenter-scaleway-em\n\ngo 1.26\n",
		"imager/cmd/em-imager/main.go": "package main\n\nfunc main() { undefinedCall() }\n",
		"charts/karpenter-scaleway-em/Chart.yaml": "appVersion: \"9.9.9\"\n",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "out")
	_, err := ociimage.Build(t.Context(), ociimage.Options{Root: root, Out: out, Revision: testRevision})
	if err == nil || !strings.Contains(err.Error(), "go build ./imager/cmd/em-imager for linux/amd64") || !strings.Contains(err.Error(), "undefined: undefinedCall") {
		t.Fatalf("Build: %v, want go build's error", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("failed build created %s (%v)", out, err)
	}
}
