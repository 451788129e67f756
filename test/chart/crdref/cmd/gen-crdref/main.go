// Command gen-crdref writes the Markdown reference of a CRD (package crdref).
//
//	go run ./test/chart/crdref/cmd/gen-crdref -crd controller/apis/crds/<file>.yaml -out docs/nodeclass-reference.md
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/chart/crdref"
)

func main() {
	in := flag.String("crd", "", "CRD YAML file")
	out := flag.String("out", "", "Markdown file to write (default: stdout)")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "gen-crdref:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	if in == "" {
		return fmt.Errorf("-crd is required")
	}
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	crd, err := crdref.Parse(data)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	md, err := crdref.Markdown(crd)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if out == "" {
		_, err = os.Stdout.Write(md)
		return err
	}
	return os.WriteFile(out, md, 0o644)
}
