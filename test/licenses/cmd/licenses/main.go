// Command licenses prints the licence of every Go module the project builds
// or tests with, read from the module cache, and exits 1 when one has none
// (`make licenses`).
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/licenses"
)

func main() {
	mods, err := licenses.Modules(context.Background(), ".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "licenses:", err)
		os.Exit(2)
	}
	c, err := licenses.Classifier()
	if err != nil {
		fmt.Fprintln(os.Stderr, "licenses:", err)
		os.Exit(2)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "MODULE\tVERSION\tLICENCE\tFILES")
	var bad []string
	for i := range mods {
		m := &mods[i]
		if err := licenses.Identify(c, m); err != nil {
			bad = append(bad, err.Error())
		}
		lic := strings.Join(m.Licenses, ", ")
		if lic == "" {
			lic = "NONE"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", m.Path, m.Version, lic, strings.Join(m.Files, ", "))
	}
	w.Flush()
	fmt.Printf("\n%d modules, %d without a recognised licence\n", len(mods), len(bad))
	for _, b := range bad {
		fmt.Println("  ", b)
	}
	if len(bad) > 0 {
		os.Exit(1)
	}
}
