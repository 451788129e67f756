// Command em-imager is the in-rescue image writer: see imager/README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/cli"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/publish"
)

func main() {
	// SIGINT/SIGTERM cancel the write: the disk is wiped and the report
	// says "interrupted" (exit 130).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sub := ""
	if len(os.Args) > 1 {
		sub = os.Args[1]
	}
	switch sub {
	case "publish":
		code := publish.Main(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	default:
		code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
}
