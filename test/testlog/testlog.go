// Package testlog gives tests a logr.Logger that writes to the test's log
// until the test ends and drops what comes later, and one that keeps its
// lines for a test to count.
//
// controller-runtime's manager keeps logging from goroutines of its stop
// procedure after Start has returned ("Stopping and waiting for warmup
// runnables"); through testr that is a t.Log after the test completed, which
// panics and fails the whole package.
package testlog

import (
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
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

// Lines is what a Capture logger wrote, one line per call.
type Lines struct {
	mu    sync.Mutex
	lines []string
}

// Capture returns a logger that keeps every line up to verbosity v (its
// message and key-value pairs as funcr formats them), for a test that
// counts what was logged.
func Capture(v int) (logr.Logger, *Lines) {
	l := &Lines{}
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, strings.TrimSpace(prefix+" "+args))
	}, funcr.Options{Verbosity: v}), l
}

// Count is how many lines contain substr.
func (l *Lines) Count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			n++
		}
	}
	return n
}

// String is every line, each ending with a newline.
func (l *Lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, s := range l.lines {
		b.WriteString(s + "\n")
	}
	return b.String()
}
