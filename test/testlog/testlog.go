// Package testlog gives tests a logr.Logger that writes to the test's log
// until the test ends and drops what comes later.
//
// controller-runtime's manager keeps logging from goroutines of its stop
// procedure after Start has returned ("Stopping and waiting for warmup
// runnables"); through testr that is a t.Log after the test completed, which
// panics and fails the whole package.
package testlog

import (
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
)

// New returns a logger writing to t's log while t runs.
func New(t *testing.T) logr.Logger {
	g := &guard{t: t}
	t.Cleanup(g.close)
	return testr.NewWithInterface(g, testr.Options{})
}

// guard forwards to the test's log until close; the lock makes close wait for
// a line being written, so none is written after the test ends.
type guard struct {
	t interface {
		Helper()
		Log(args ...any)
	}
	mu     sync.RWMutex
	closed bool
}

func (g *guard) Helper() { g.t.Helper() }

func (g *guard) Log(args ...any) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if !g.closed {
		g.t.Log(args...)
	}
}

func (g *guard) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}
