// Command karpenter-scaleway-em runs Karpenter with the Scaleway Elastic Metal provider.
package main

import (
	"fmt"
	"os"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/operator"
)

func main() {
	if err := operator.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "karpenter-scaleway-em:", err)
		os.Exit(1)
	}
}
