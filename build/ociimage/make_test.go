package ociimage_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/testenv"
)

// TestMakeImageInstallsOnlyCACertificates: `make image` installs no Debian
// package but ca-certificates (the certificates it puts into the images), and
// docs/install.md says what it needs: that package and go.mod's Go version.
// It once depended on `deps`, the ~20 packages the tests use. `make -n`
// prints the recipes without running them.
func TestMakeImageInstallsOnlyCACertificates(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "--no-print-directory", "-n", "image")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n image: %v\n%s", err, out)
	}
	installs := aptInstalls(string(out))
	if len(installs) == 0 {
		t.Fatalf("make -n image runs no apt-get install; want one for ca-certificates when it is missing:\n%s", out)
	}
	for _, pkgs := range installs {
		if !slices.Equal(pkgs, []string{"ca-certificates"}) {
			t.Errorf("make image runs apt-get install %s, want only ca-certificates:\n%s", strings.Join(pkgs, " "), out)
		}
	}

	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(goMod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	install, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(install)
	if i := strings.Index(section, "\n## Container images"); i >= 0 {
		section = section[i:]
		if j := strings.Index(section[1:], "\n## "); j >= 0 {
			section = section[:j+1]
		}
	} else {
		t.Fatal("docs/install.md has no \"## Container images\" section")
	}
	for _, want := range []string{"Go " + string(m[1]), "`ca-certificates`", "no other package"} {
		if !strings.Contains(section, want) {
			t.Errorf("docs/install.md's Container images section does not say %q", want)
		}
	}
}

// aptInstalls lists the packages of each `apt-get install` in a shell text:
// the words after install, flags skipped, up to the first shell operator.
func aptInstalls(text string) [][]string {
	var all [][]string
	for _, seg := range strings.Split(text, "apt-get install")[1:] {
		var pkgs []string
		for _, w := range strings.Fields(seg) {
			if strings.ContainsAny(w[:1], ")&|>;<") {
				break
			}
			if strings.HasPrefix(w, "-") {
				continue
			}
			word := strings.TrimRight(w, ");&|")
			pkgs = append(pkgs, word)
			if word != w {
				break // the word ended the command
			}
		}
		all = append(all, pkgs)
	}
	return all
}
