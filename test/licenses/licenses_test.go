package licenses

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/build/ociimage"
)

const repoRoot = "../.."

// repoModules and testClassifier are built once: go list and the
// classifier's licence index take seconds each on a loaded machine.
var (
	repoModules    = sync.OnceValues(func() ([]Module, error) { return Modules(context.Background(), repoRoot) })
	testClassifier = sync.OnceValues(Classifier)
)

// TestEveryModuleHasALicence is `make licenses` in `make test`: a new
// dependency without a recognisable licence fails CI.
func TestEveryModuleHasALicence(t *testing.T) {
	all, err := repoModules()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 50 {
		t.Fatalf("go list found only %d modules", len(all))
	}
	mods := append([]Module(nil), all...)
	c, err := testClassifier()
	if err != nil {
		t.Fatal(err)
	}
	for i := range mods {
		if err := Identify(c, &mods[i]); err != nil {
			t.Error(err)
		}
	}
	// The xz decoder em-imager is built on, by name.
	for _, m := range mods {
		if m.Path == "github.com/ulikunitz/xz" && !contains(m.Licenses, "BSD-3-Clause") {
			t.Errorf("ulikunitz/xz: licences %v, want BSD-3-Clause", m.Licenses)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func write(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestIdentifyFailsWithoutLicence plants a module that depends on two local
// modules, one without a licence file and one whose LICENSE is no licence,
// and checks the audit names both and accepts the third, ISC (go-spew's LICENSE), one.
func TestIdentifyFailsWithoutLicence(t *testing.T) {
	root := t.TempDir()
	isc, err := os.ReadFile(filepath.Join(mustModuleDir(t, "github.com/davecgh/go-spew"), "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, root, map[string]string{
		"go.mod": "module example.com/app\n\ngo 1.26\n\nrequire (\n\texample.com/nolicence v0.0.0\n\texample.com/notalicence v0.0.0\n\texample.com/isc v0.0.0\n)\n\n" +
			"replace example.com/nolicence => ./nolicence\n\nreplace example.com/notalicence => ./notalicence\n\nreplace example.com/isc => ./isc\n",
		"main.go":                 "package main\n\nimport (\n\t_ \"example.com/isc\"\n\t_ \"example.com/nolicence\"\n\t_ \"example.com/notalicence\"\n)\n\nfunc main() {}\n",
		"nolicence/go.mod":        "module example.com/nolicence\n\ngo 1.26\n",
		"nolicence/a.go":          "package nolicence\n",
		"notalicence/go.mod":      "module example.com/notalicence\n\ngo 1.26\n",
		"notalicence/a.go":        "package notalicence\n",
		"notalicence/LICENSE.txt": "Use it if you like it, tell nobody.\n",
		"isc/go.mod":              "module example.com/isc\n\ngo 1.26\n",
		"isc/a.go":                "package isc\n",
		"isc/LICENSE":             string(isc),
	})
	mods, err := Modules(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	c, err := testClassifier()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for i := range mods {
		if err := Identify(c, &mods[i]); err != nil {
			got[mods[i].Path] = err.Error()
		} else {
			got[mods[i].Path] = "ok " + strings.Join(mods[i].Licenses, ",")
		}
	}
	want := map[string]string{
		"example.com/nolicence":   "no licence file",
		"example.com/notalicence": "holds no licence the classifier knows",
		"example.com/isc":         "ok ISC",
	}
	for path, w := range want {
		if !strings.Contains(got[path], w) {
			t.Errorf("%s: %q, want %q", path, got[path], w)
		}
	}
}

func mustModuleDir(t *testing.T, path string) string {
	t.Helper()
	mods, err := repoModules()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		if m.Path == path {
			return m.Dir
		}
	}
	t.Fatalf("%s is not a dependency", path)
	return ""
}

// TestRepositoryHasNoForeignNotices: every line here is the project's own.
func TestRepositoryHasNoForeignNotices(t *testing.T) {
	found, err := ForeignNotices(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range found {
		t.Error(n)
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "LICENSE")); err != nil {
		t.Errorf("no LICENSE at the repository root: %v", err)
	}
}

// TestForeignNoticesFindsPlantedFiles shows the check above can fail: a
// tree with a copied file's header, a vendored LICENSE and a NOTICE.
func TestForeignNoticesFindsPlantedFiles(t *testing.T) {
	root := t.TempDir()
	// Assembled here so that this file itself holds no such line.
	c := "Copy" + "right"
	write(t, root, map[string]string{
		"LICENSE":                   "Apache License\nVersion 2.0\n" + c + " [yyyy] [name of copyright owner]\n",
		"pkg/copied.go":             "// " + c + " 2014-2022 Jane Doe. All rights reserved.\n// Use of this source code is governed by a BSD-style\n\npackage pkg\n",
		"pkg/spdx.go":               "// SPDX-File" + c + "Text: © 2014 Jane Doe\n\npackage pkg\n",
		"pkg/symbol.sh":             "#!/bin/sh\n# " + c + " (c) Acme Corp\n",
		"pkg/own.go":                "/*\n" + c + " The karpenter-scaleway-em Authors.\n*/\n\npackage pkg\n",
		"pkg/prose.md":              "Images are subject to " + strings.ToLower(c) + " law; ask your lawyer.\n",
		"third_party/x/LICENSE.txt": "MIT License\n",
		"docs/NOTICE":               "This product includes software developed by others.\n",
		"COPYING":                   "GPL\n",
	})
	found, err := ForeignNotices(root)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, n := range found {
		got[n.Path] = true
	}
	for _, want := range []string{"pkg/copied.go", "pkg/spdx.go", "pkg/symbol.sh", "third_party/x/LICENSE.txt", "docs/NOTICE", "COPYING"} {
		if !got[want] {
			t.Errorf("%s not reported; found %v", want, found)
		}
	}
	for _, clean := range []string{"LICENSE", "pkg/own.go", "pkg/prose.md"} {
		if got[clean] {
			t.Errorf("%s reported; found %v", clean, found)
		}
	}
}

// TestChartsAndImagesDeclareTheLicence: the licence travels with the
// charts (Artifact Hub's annotation) and the container images (OCI label,
// set by build/ociimage).
func TestChartsAndImagesDeclareTheLicence(t *testing.T) {
	charts, _ := filepath.Glob(filepath.Join(repoRoot, "charts", "*", "Chart.yaml"))
	if len(charts) == 0 {
		t.Fatal("no charts found")
	}
	for _, p := range charts {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var chart struct {
			Annotations map[string]string `json:"annotations"`
		}
		if err := yaml.Unmarshal(b, &chart); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if got := chart.Annotations["artifacthub.io/license"]; got != "Apache-2.0" {
			t.Errorf("%s: artifacthub.io/license = %q, want Apache-2.0", p, got)
		}
	}
	// build/ociimage writes the images' org.opencontainers.image.licenses label.
	if ociimage.Licenses != "Apache-2.0" {
		t.Errorf("the images' licences label is %q, want Apache-2.0", ociimage.Licenses)
	}
}
