package chart

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/operator"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/chart/refdocs"
)

// builtInSettings lists the settings with this test process's environment
// cleared of them, restoring it after the test.
func builtInSettings(t *testing.T) []operator.Setting {
	t.Helper()
	for _, s := range operator.Settings() {
		if v, ok := os.LookupEnv(s.Env); ok {
			t.Setenv(s.Env, v) // restored after the test
		}
	}
	return refdocs.BuiltInSettings()
}

func TestSettingsReferenceIsCurrent(t *testing.T) {
	want := refdocs.SettingsMarkdown(builtInSettings(t))
	got, err := os.ReadFile(repoPath(t, "docs/settings.md"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Error("docs/settings.md is stale: run `make docs`")
	}
}

var (
	// How the code reads the environment: os.Getenv/LookupEnv, a getenv
	// function, Karpenter's env.WithDefault* and BoolVarWithEnv, and the
	// Env* constants of the packages that read through them.
	envRead = []*regexp.Regexp{
		regexp.MustCompile(`(?:Getenv|LookupEnv|getenv)\("([A-Z][A-Z0-9_]+)"\)`),
		regexp.MustCompile(`env\.WithDefault[A-Za-z0-9]+\("([A-Z][A-Z0-9_]+)"`),
		regexp.MustCompile(`BoolVarWithEnv\([^,]+, "[^"]+", "([A-Z][A-Z0-9_]+)"`),
		regexp.MustCompile(`(?m)^\s*Env[A-Za-z]+\s*=\s*"([A-Z][A-Z0-9_]+)"`),
	}
)

// envVarsInCode finds the environment variables the controller's code (and
// Karpenter core's options) reads.
func envVarsInCode(t *testing.T) []string {
	t.Helper()
	files := []string{filepath.Join(moduleDirOf(t, "sigs.k8s.io/karpenter"), "pkg/operator/options/options.go")}
	err := filepath.WalkDir(repoPath(t, "controller"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, re := range envRead {
			for _, m := range re.FindAllStringSubmatch(string(b), -1) {
				names = append(names, m[1])
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func moduleDirOf(t *testing.T, path string) string {
	t.Helper()
	dir, err := moduleDir(path)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// Every variable the code reads is in docs/settings.md (and so in --help).
func TestSettingsReferenceCoversEveryVariable(t *testing.T) {
	names := envVarsInCode(t)
	for _, must := range []string{"SCW_SECRET_KEY", "S3_PRESIGN_ENDPOINT", "IMAGE_URL_EXPIRY", "KARPENTER_SCALEWAY_EM_API_RATE_LIMIT",
		"GC_GRACE_PERIOD", "BATCH_MAX_DURATION", "DISABLE_LEADER_ELECTION"} {
		if !slices.Contains(names, must) {
			t.Errorf("the scan of the code did not find %s: it is broken", must)
		}
	}
	docLists(t, "docs/settings.md", names, func(n string) string { return "| `" + n + "` |" }, nil)
}

func TestInstanceTypeLabelReferenceIsCurrent(t *testing.T) {
	want, err := refdocs.LabelsMarkdown(repoPath(t, "catalog/labels.go"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(repoPath(t, "docs/instance-type-labels.md"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Error("docs/instance-type-labels.md is stale: run `make docs`")
	}
}

// Every value of the chart is described, and the README's table is what
// the descriptions give.
func TestChartValuesAreDescribed(t *testing.T) {
	values, err := os.ReadFile(repoPath(t, controllerChart+"/values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	documented, undocumented, err := refdocs.Values(values)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range undocumented {
		t.Errorf("values.yaml: %s has no \"# --\" description (on it or on a map holding it)", path)
	}
	if len(documented) < 80 {
		t.Errorf("only %d documented values found: the parse is broken", len(documented))
	}
	readme, err := os.ReadFile(repoPath(t, controllerChart+"/README.md"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := refdocs.ReplaceValuesTable(string(readme), refdocs.ValuesTable(documented))
	if err != nil {
		t.Fatal(err)
	}
	if string(readme) != want {
		t.Errorf("%s/README.md's values table is stale: run `make docs`", controllerChart)
	}
}

// The check can fail: a value without a description is reported.
func TestUndescribedValueIsFound(t *testing.T) {
	_, undocumented, err := refdocs.Values([]byte("# -- described\na: 1\nb:\n  # -- described\n  c: x\n  d: y\ne: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(undocumented, []string{"b.d", "e"}) {
		t.Errorf("undocumented = %v, want [b.d e]", undocumented)
	}
}
