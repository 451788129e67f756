package chartpkg

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"sigs.k8s.io/yaml"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/chart/helmrender"
)

var chartDirs = []string{"../../charts/karpenter-scaleway-em-crd", "../../charts/karpenter-scaleway-em"}

// archiveFiles reads a .tgz into path -> content.
func archiveFiles(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = b
	}
}

// TestPackageHoldsEachChartWhole packages both charts as `make
// chart-package` does and checks each archive: named <name>-<version>.tgz
// from its Chart.yaml, every file of the chart directory in it under
// <name>/ (templates, CRDs and the dashboard byte for byte), nothing else,
// and the archive loads and renders as Helm would install it.
func TestPackageHoldsEachChartWhole(t *testing.T) {
	out := t.TempDir()
	paths, err := Package(out, chartDirs...)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 2 {
		t.Fatalf("archives %v", paths)
	}
	for i, dir := range chartDirs {
		var meta struct{ Name, Version, KubeVersion string }
		raw, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(raw, &meta); err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(out, meta.Name+"-"+meta.Version+".tgz"); paths[i] != want {
			t.Errorf("archive %s, want %s", paths[i], want)
		}
		files := archiveFiles(t, paths[i])
		var want []string
		err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			name := meta.Name + "/" + filepath.ToSlash(rel)
			want = append(want, name)
			got, ok := files[name]
			if !ok {
				t.Errorf("%s lacks %s", filepath.Base(paths[i]), name)
				return nil
			}
			// Helm rewrites Chart.yaml from its parsed form; every other
			// file goes in as it is.
			if rel != "Chart.yaml" {
				src, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				if !bytes.Equal(src, got) {
					t.Errorf("%s: %s differs from the chart directory's", filepath.Base(paths[i]), name)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for name := range files {
			if !slices.Contains(want, name) {
				t.Errorf("%s holds %s, which the chart directory does not", filepath.Base(paths[i]), name)
			}
		}

		c, err := loader.Load(paths[i])
		if err != nil {
			t.Fatalf("load %s: %v", paths[i], err)
		}
		if c.Metadata.Version != meta.Version || c.Metadata.KubeVersion != meta.KubeVersion {
			t.Errorf("%s: version %s kubeVersion %q, Chart.yaml says %s %q", paths[i], c.Metadata.Version, c.Metadata.KubeVersion, meta.Version, meta.KubeVersion)
		}
		values := ""
		if meta.Name == "karpenter-scaleway-em" {
			values = "clusterName: c\nscaleway: {credentials: {existingSecret: s}}\n"
		}
		objs, err := helmrender.Render(c, []byte(values), helmrender.Release{Name: meta.Name, Namespace: "karpenter", KubeVersion: "v1.35.4"})
		if err != nil {
			t.Fatalf("render %s: %v", paths[i], err)
		}
		kinds := map[string]int{}
		for _, o := range objs {
			kinds[o.GetKind()]++
		}
		if meta.Name == "karpenter-scaleway-em" && kinds["Deployment"] != 1 || meta.Name == "karpenter-scaleway-em-crd" && kinds["CustomResourceDefinition"] != 5 {
			t.Errorf("%s renders %v", paths[i], kinds)
		}
	}
}

// TestPackageRefusesChartsOfDifferentVersions: the charts ship as one
// version; a bump of one chart alone is caught before anything is written.
func TestPackageRefusesChartsOfDifferentVersions(t *testing.T) {
	src := chartDirs[0]
	bumped := filepath.Join(t.TempDir(), "karpenter-scaleway-em-crd")
	if err := os.CopyFS(bumped, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(bumped, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct{ Version string }
	if err := yaml.Unmarshal(raw, &meta); err != nil {
		t.Fatal(err)
	}
	raw = []byte(strings.Replace(string(raw), "\nversion: "+meta.Version+"\n", "\nversion: 9.9.9\n", 1))
	if err := os.WriteFile(filepath.Join(bumped, "Chart.yaml"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if _, err := Package(out, bumped, chartDirs[1]); err == nil || !strings.Contains(err.Error(), "one version") {
		t.Fatalf("charts of versions 9.9.9 and %s packaged: %v", meta.Version, err)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("archives written despite the refusal: %v", entries)
	}
}
