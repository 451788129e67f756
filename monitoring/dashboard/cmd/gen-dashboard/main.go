// Command gen-dashboard writes the provider's Grafana dashboard (package
// dashboard) as JSON: go generate ./monitoring/... or make dashboards.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/monitoring/dashboard"
)

func main() {
	out := flag.String("out", "", "file to write (default: stdout)")
	flag.Parse()
	b, err := dashboard.JSON()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen-dashboard:", err)
		os.Exit(1)
	}
	if *out == "" {
		_, err = os.Stdout.Write(b)
	} else {
		err = os.WriteFile(*out, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen-dashboard:", err)
		os.Exit(1)
	}
}
