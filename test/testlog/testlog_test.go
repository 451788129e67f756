package testlog

import (
	"fmt"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
)

type lines struct{ got []string }

func (l *lines) Helper()         {}
func (l *lines) Log(args ...any) { l.got = append(l.got, fmt.Sprint(args...)) }

func TestLinesAfterTheEndAreDropped(t *testing.T) {
	rec := &lines{}
	g := &guard{t: rec}
	log := testr.NewWithInterface(g, testr.Options{})
	log.Info("during")
	g.close()
	log.Info("after")
	if len(rec.got) != 1 || !strings.Contains(rec.got[0], "during") {
		t.Fatalf("logged %q, want only the line written before the end", rec.got)
	}
}

// Capture keeps the lines up to its verbosity, and Count finds them by any
// part of their message or values.
func TestCaptureCountsLinesUpToItsVerbosity(t *testing.T) {
	log, lines := Capture(1)
	log.WithName("catalog").Info("refreshed", "zone", "fr-par-2")
	log.V(1).Info("refreshed", "zone", "nl-ams-1")
	log.V(2).Info("refreshed", "zone", "pl-waw-2")
	log.Error(nil, "refresh failed", "zone", "fr-par-2")
	if n := lines.Count(`"msg"="refreshed"`); n != 2 {
		t.Errorf("%d lines of refreshed, want 2 (V(2) is above the verbosity):\n%s", n, lines)
	}
	if n := lines.Count(`"zone"="fr-par-2"`); n != 2 {
		t.Errorf("%d lines with fr-par-2, want 2:\n%s", n, lines)
	}
	if n := lines.Count("catalog"); n != 1 {
		t.Errorf("%d lines named catalog, want 1:\n%s", n, lines)
	}
}
