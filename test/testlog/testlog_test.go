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
