// Command gen-refdocs writes the references generated from the code (make
// docs): docs/settings.md, docs/instance-type-labels.md and the values table
// of charts/karpenter-scaleway-em/README.md.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/chart/refdocs"
)

func main() {
	root := flag.String("root", ".", "repository root")
	flag.Parse()
	if err := run(*root); err != nil {
		fmt.Fprintln(os.Stderr, "gen-refdocs:", err)
		os.Exit(1)
	}
}

func run(root string) error {
	at := func(rel string) string { return filepath.Join(root, rel) }
	if err := os.WriteFile(at("docs/settings.md"), []byte(refdocs.SettingsMarkdown(refdocs.BuiltInSettings())), 0o644); err != nil {
		return err
	}
	labels, err := refdocs.LabelsMarkdown(at("catalog/labels.go"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(at("docs/instance-type-labels.md"), []byte(labels), 0o644); err != nil {
		return err
	}
	values, err := os.ReadFile(at("charts/karpenter-scaleway-em/values.yaml"))
	if err != nil {
		return err
	}
	documented, undocumented, err := refdocs.Values(values)
	if err != nil {
		return err
	}
	if len(undocumented) > 0 {
		return fmt.Errorf("values.yaml: no \"# --\" description for %v", undocumented)
	}
	readmePath := at("charts/karpenter-scaleway-em/README.md")
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		return err
	}
	out, err := refdocs.ReplaceValuesTable(string(readme), refdocs.ValuesTable(documented))
	if err != nil {
		return err
	}
	return os.WriteFile(readmePath, []byte(out), 0o644)
}
