// Command karpenter-scaleway-em runs Karpenter with the Scaleway Elastic Metal provider.
package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"runtime"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/imagerbin"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/operator"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/version"
)

func main() {
	// Before Karpenter's flag parsing, which knows no --version and would
	// want a cluster.
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-version") {
		fmt.Println(versionLine())
		return
	}
	// Karpenter's parser would print "Usage of karpenter" and only the flags.
	for _, a := range os.Args[1:] {
		if a == "-h" || a == "-help" || a == "--help" {
			operator.Usage(os.Stdout)
			return
		}
	}
	if err := operator.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "karpenter-scaleway-em:", err)
		os.Exit(1)
	}
}

// versionLine names the build and the em-imager it uploads to servers.
func versionLine() string {
	imager := "none embedded"
	if b := imagerbin.Binary(); b != nil {
		imager = fmt.Sprintf("sha256:%x", sha256.Sum256(b))
	}
	return fmt.Sprintf("karpenter-scaleway-em %s (%s %s/%s, em-imager %s)",
		version.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH, imager)
}
