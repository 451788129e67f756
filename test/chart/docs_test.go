package chart

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	metricLiteral = regexp.MustCompile(`"(karpenter_(?:scaleway_em|cloudprovider)_[a-z0-9_]+)"`)
	prefixConst   = regexp.MustCompile(`metricPrefix\s*=\s*"(karpenter_scaleway_em_[a-z0-9_]*)"`)
	prefixUse     = regexp.MustCompile(`metricPrefix\s*\+\s*"([a-z0-9_]+)"`)
)

// providerMetrics finds the metric names the provider's code registers: full
// names in string literals, and metricPrefix + "suffix" where a file set the
// prefix.
func providerMetrics(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, dir := range []string{"controller", "catalog"} {
		err := filepath.WalkDir(repoPath(t, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			src := string(b)
			for _, m := range metricLiteral.FindAllStringSubmatch(src, -1) {
				if !strings.HasSuffix(m[1], "_") { // a prefix, not a name
					names = append(names, m[1])
				}
			}
			if p := prefixConst.FindStringSubmatch(src); p != nil {
				for _, m := range prefixUse.FindAllStringSubmatch(src, -1) {
					names = append(names, p[1]+m[1])
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func TestMetricsReferenceCoversEveryMetric(t *testing.T) {
	names := providerMetrics(t)
	// The scan itself must find the families the docs describe.
	for _, family := range []string{"karpenter_scaleway_em_api_", "karpenter_scaleway_em_catalog_", "karpenter_scaleway_em_install_",
		"karpenter_scaleway_em_leaked_", "karpenter_scaleway_em_spend_", "karpenter_cloudprovider_instance_type_offering_price_estimate"} {
		if !slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, family) }) {
			t.Errorf("no %s* metric found in the code; the scan is broken", family)
		}
	}
	docLists(t, "docs/metrics.md", names, func(n string) string { return "`" + n + "`" }, nil)
}

// docLists fails for every name whose mark (e.g. the name in backticks) the
// document lacks; where, if set, says where the code uses the name.
func docLists(t *testing.T, doc string, names []string, mark func(string) string, where func(string) string) {
	t.Helper()
	b, err := os.ReadFile(repoPath(t, doc))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.Contains(string(b), mark(n)) {
			continue
		}
		if where != nil {
			t.Errorf("%s does not list %s (%s)", doc, n, where(n))
		} else {
			t.Errorf("%s does not list %s, which the code has", doc, n)
		}
	}
}

// TestDocsLinksResolve: relative links in docs/, README.md and CHANGELOG.md
// point at files that exist.
func TestDocsLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	// Code (fenced blocks, inline spans) holds regexps, not links.
	code := regexp.MustCompile("(?s)```.*?```|`[^`\n]*`")
	files, err := filepath.Glob(repoPath(t, "docs/*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	// The pages a reader opens first link into docs/ and the examples too.
	files = append(files, repoPath(t, "README.md"), repoPath(t, "CHANGELOG.md"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(code.ReplaceAllString(string(b), ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", filepath.Base(f), target)
			}
		}
	}
}
