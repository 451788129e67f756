package diskwrite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
)

// segs builds a buffer from a pattern: 'd' a segment of data, '0' a
// segment of zeros, 't' a short data tail, 'z' a short zero tail.
func segs(pattern string) []byte {
	var b []byte
	for _, c := range pattern {
		switch c {
		case 'd':
			b = append(b, bytes.Repeat([]byte{7}, segment)...)
		case '0':
			b = append(b, make([]byte, segment)...)
		case 't':
			b = append(b, bytes.Repeat([]byte{7}, 512)...)
		case 'z':
			b = append(b, make([]byte, 512)...)
		}
	}
	return b
}

// TestNextRun: the zero-run splitter cuts a chunk into runs of data and of
// whole zero segments; a segment cut short by the end is data.
func TestNextRun(t *testing.T) {
	type run struct {
		segs float64 // length in segments
		zero bool
	}
	for _, tc := range []struct {
		pattern string
		want    []run
	}{
		{"d", []run{{1, false}}},
		{"0", []run{{1, true}}},
		{"dd00d", []run{{2, false}, {2, true}, {1, false}}},
		{"00dd", []run{{2, true}, {2, false}}},
		{"0d0d", []run{{1, true}, {1, false}, {1, true}, {1, false}}},
		{"00z", []run{{2, true}, {512.0 / segment, false}}},
		{"d0t", []run{{1, false}, {1, true}, {512.0 / segment, false}}},
		{"z", []run{{512.0 / segment, false}}},
		{"", nil},
	} {
		p := segs(tc.pattern)
		var got []run
		for s := 0; s < len(p); {
			e, zero := nextRun(p, s)
			if e <= s {
				t.Fatalf("%q: run at %d ends at %d", tc.pattern, s, e)
			}
			got = append(got, run{float64(e-s) / segment, zero})
			s = e
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%q: runs %v, want %v", tc.pattern, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("%q: runs %v, want %v", tc.pattern, got, tc.want)
			}
		}
	}
}

// TestImageWriterJoinsZeroRuns: zero runs that meet across chunks become
// one range, zeroed once, when the next data run (or the end) comes; the
// data is written where it belongs.
func TestImageWriterJoinsZeroRuns(t *testing.T) {
	disk := newDisk(t, 4<<20, 0xAA)
	tg, err := openTarget(Options{Path: disk, Capacity: 4 << 20, SectorSize: 512, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.f.Close()
	var progress atomic.Int64
	w := &imageWriter{t: tg, handled: HeadSize, progress: &progress}
	first, second := segs("d00"), segs("0dd0")
	if err := w.put(first, HeadSize); err != nil {
		t.Fatal(err)
	}
	if !w.zeroing || w.zeroFrom != HeadSize+segment || w.zeroTo != HeadSize+3*segment {
		t.Fatalf("after the first chunk: pending zeros %v [%d, %d)", w.zeroing, w.zeroFrom, w.zeroTo)
	}
	if err := w.put(second, HeadSize+int64(len(first))); err != nil {
		t.Fatal(err)
	}
	// The three zero segments were zeroed as one range when data came;
	// the last one waits for what follows.
	if w.skipped != 3*segment || !w.zeroing || w.zeroFrom != HeadSize+6*segment || w.zeroTo != HeadSize+7*segment {
		t.Fatalf("after the second chunk: %d skipped, pending zeros %v [%d, %d)", w.skipped, w.zeroing, w.zeroFrom, w.zeroTo)
	}
	if err := w.flushZeros(); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte(nil), first...), second...)
	if w.handled != HeadSize+int64(len(want)) || progress.Load() != w.handled {
		t.Fatalf("handled %d, progress %d", w.handled, progress.Load())
	}
	if w.skipped != 4*segment {
		t.Fatalf("skipped %d, want %d (holes on this filesystem)", w.skipped, 4*segment)
	}
	if got := readDisk(t, disk)[HeadSize : HeadSize+len(want)]; !bytes.Equal(got, want) {
		t.Fatal("the disk does not hold the chunks")
	}
}

// TestStagesStopOnFailure: a failing source stops the read stage with its
// error, the verify stage closes its output, and Abort is called.
func TestStagesStopOnFailure(t *testing.T) {
	disk := newDisk(t, 8<<20, 0)
	tg, err := openTarget(Options{Path: disk, Capacity: 8 << 20, SectorSize: 512, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.f.Close()
	boom := errors.New("connection reset")
	aborted := make(chan struct{})
	src := &failAfter{r: bytes.NewReader(segs("dddddddddddddddddddddddddddddddddddddddd")), n: 2 << 20, err: boom}
	o := Options{ChunkSize: 1 << 20, Abort: func() { close(aborted) }}.withDefaults()
	w := &imageWriter{t: tg, handled: HeadSize, progress: &o.Counters.Out}
	if err := stream(context.Background(), src, sha256.New(), w, o); !errors.Is(err, boom) {
		t.Fatalf("stream: %v", err)
	}
	<-aborted
	// The writer stops at the first error: somewhere between the head and
	// where the source failed.
	if w.handled < HeadSize || w.handled > HeadSize+2<<20 {
		t.Fatalf("handled %d before the failure", w.handled)
	}
}
