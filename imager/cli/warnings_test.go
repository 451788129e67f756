package cli

import (
	"errors"
	"sync"
	"testing"
)

func TestLineLogger(t *testing.T) {
	var lines []string
	log := lineLogger(func(line string) { lines = append(lines, line) })
	log.Warn("disk refuses O_DIRECT; writing through the page cache", "path", "/dev/sda", "error", errors.New("invalid argument"))
	log.Info("download interrupted; resuming", "byte", 42, "error", "stalled")
	log.With("disk", "sdb").WithGroup("g").Info("empty", "v", "")
	want := []string{
		`level=WARN msg="disk refuses O_DIRECT; writing through the page cache" path=/dev/sda error="invalid argument"`,
		`level=INFO msg="download interrupted; resuming" byte=42 error=stalled`,
		`level=INFO msg=empty disk=sdb g.v=""`,
	}
	if len(lines) != len(want) {
		t.Fatalf("lines %q, want %q", lines, want)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d: %q, want %q", i, lines[i], want[i])
		}
	}

	// The erase goroutines share one logger: the appends are serialised
	// (go test -race would catch a race).
	lines = nil
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { log.Info("x") })
	}
	wg.Wait()
	if len(lines) != 8 {
		t.Fatalf("%d lines, want 8", len(lines))
	}
}
