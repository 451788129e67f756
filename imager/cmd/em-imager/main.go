// Command em-imager is the in-rescue image writer: see imager/README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/cli"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/publish"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/schematic"
)

// memoryLimit and gcPercent keep the Go heap, and so RSS, bounded: decoding
// allocates per xz block and the GC would otherwise let garbage grow to
// twice the live heap. The big buffers hold no pointers, so collecting more
// often costs little CPU. The limit sits below em-imager's 160 MiB RSS bound
// because the heap goal is reached before a collection, and RSS also counts
// the binary and the runtime: with xz -6 -T0 images (24 MiB blocks) a
// 160 MiB limit gave 162 MiB of RSS, 144 MiB gives 146 (imager/README.md).
// GOMEMLIMIT and GOGC in the environment override them.
const (
	memoryLimit = 144 << 20
	gcPercent   = 30
)

func main() {
	// SIGINT/SIGTERM cancel the write: the disk is wiped and the report
	// says "interrupted" (exit 130).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	args := helpAlias(os.Args[1:])
	if run, ok := operatorCommands[firstArg(args)]; ok {
		code := run(ctx, args[1:])
		stop()
		os.Exit(code)
	}
	// write, inspect, write-config, erase, version and help. publish runs
	// elsewhere, with encoders that want more memory.
	limitMemory()
	code := cli.Main(ctx, args, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// operatorCommands run on an operator's machine, not in rescue: they keep
// Go's memory defaults.
var operatorCommands = map[string]func(ctx context.Context, args []string) int{
	"schematic": func(_ context.Context, args []string) int { return schematic.Main(args, os.Stdout, os.Stderr) },
	"presign": func(ctx context.Context, args []string) int {
		return publish.PresignMain(ctx, args, os.Stdout, os.Stderr)
	},
	"publish": func(ctx context.Context, args []string) int { return publish.Main(ctx, args, os.Stdout, os.Stderr) },
}

// helpAlias turns "help <operator command>" into "<command> -h": those
// commands print their own flags.
func helpAlias(args []string) []string {
	if len(args) == 2 && args[0] == "help" {
		if _, ok := operatorCommands[args[1]]; ok {
			return []string{args[1], "-h"}
		}
	}
	return args
}

// firstArg is the command word, "" when there is none.
func firstArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

// limitMemory keeps em-imager within the rescue system's RAM unless the
// environment sets the limits itself.
func limitMemory() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}
