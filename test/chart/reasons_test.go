package chart

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

var camelReason = regexp.MustCompile(`^[A-Z][A-Za-z]+$`)

// codeReasons finds the condition and event reasons the controller's code
// sets: string constants named Reason* or Event* (CamelCase values, not
// metric labels), and the reason literal of every publish(obj, type,
// reason, message) call. Reasons built at run time (Install<Phase>, a
// condition type as an event reason) are listed by hand in the test.
func codeReasons(t *testing.T) map[string]string {
	t.Helper()
	found := map[string]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(repoPath(t, "controller"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoPath(t, "."), path)
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if i >= len(n.Values) || !(strings.HasPrefix(name.Name, "Reason") || strings.HasPrefix(name.Name, "Event")) {
						continue
					}
					if v, ok := stringLit(n.Values[i]); ok && camelReason.MatchString(v) {
						found[v] = rel + ": " + name.Name
					}
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "publish" || len(n.Args) < 4 {
					return true
				}
				if v, ok := stringLit(n.Args[2]); ok {
					found[v] = rel + ": publish"
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func stringLit(e ast.Expr) (string, bool) {
	b, ok := e.(*ast.BasicLit)
	if !ok || b.Kind != token.STRING {
		return "", false
	}
	v, err := strconv.Unquote(b.Value)
	return v, err == nil
}

// Every reason an operator can meet in a condition or an event has a row in
// troubleshooting.md.
func TestTroubleshootingListsEveryReason(t *testing.T) {
	reasons := codeReasons(t)
	// Built at run time: "Install" + the phase (controller/install), and the
	// NodeClass's condition types as the reasons of their recovery events.
	for _, r := range []string{"InstallOrdered", "InstallRescue", "InstallImaging", "InstallBooting",
		"CredentialsReady", "ProjectReady", "ImageReady", "JoinConfigReady", "InstallsHealthy", "ClusterIdentityUnique"} {
		reasons[r] = "built at run time"
	}
	for _, must := range []string{"Ordered", "OrderRefused", "ProjectMismatch", "ImageDigestMismatch", "JoinSecretNotAllowed", "NotReady"} {
		if _, ok := reasons[must]; !ok {
			t.Errorf("the scan of controller/ missed %s: codeReasons no longer sees how reasons are set", must)
		}
	}
	names := make([]string, 0, len(reasons))
	for r := range reasons {
		names = append(names, r)
	}
	sort.Strings(names)
	docLists(t, "docs/troubleshooting.md", names, func(n string) string { return "`" + n + "`" }, func(n string) string { return reasons[n] })
}
