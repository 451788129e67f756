// Command soak runs seeded chaos schedules against the real controller and
// Karpenter core on the simulated world and checks the money invariants over
// the simulated Scaleway's ledger (package test/soak; make soak SEEDS=a-b).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/soak"
)

func main() {
	// The world's envtest logs through controller-runtime; its lines would
	// bury the soak's, and the components' logs are in -dir.
	ctrllog.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := soak.Main(ctx, os.Args[1:], os.Stdout, soak.Run)
	stop()
	os.Exit(code)
}
