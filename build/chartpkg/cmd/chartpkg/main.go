// Command chartpkg writes the chart archives of `make chart-package`:
//
//	chartpkg -out bin/charts charts/karpenter-scaleway-em-crd charts/karpenter-scaleway-em
//
// then, for an OCI registry: helm push bin/charts/<name>-<version>.tgz oci://<registry>/<namespace>
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/build/chartpkg"
)

func main() {
	out := flag.String("out", "bin/charts", "directory of the chart archives")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: chartpkg [-out DIR] CHART_DIR...")
		flag.PrintDefaults()
	}
	flag.Parse()
	paths, err := chartpkg.Package(*out, flag.Args()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chartpkg:", err)
		os.Exit(1)
	}
	for _, p := range paths {
		fmt.Println(p)
	}
}
