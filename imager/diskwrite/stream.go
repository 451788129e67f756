package diskwrite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
)

// The image after its first MiB goes through three stages that overlap,
// each a goroutine that does one thing:
//
//	read   fills free buffers from the source, in order (readStage)
//	verify hashes each buffer into the image's digest (verifyStage)
//	write  splits each buffer into data and zero runs (nextRun), writes the
//	       data and has the device zero the zero runs (imageWriter)
//
// Buffers go round: free -> read -> verify -> write -> free, so at most
// Options.Buffers chunks are in memory.

type chunk struct {
	buf []byte // aligned, cap ChunkSize
	n   int
	off int64
}

// stream runs the three stages until the source ends or one of them fails.
// When the caller's context ended, its error is returned rather than the
// stage's (which is then only a consequence).
func stream(ctx context.Context, r io.Reader, h hash.Hash, w *imageWriter, o Options) error {
	g, gctx := errgroup.WithContext(ctx)
	go abortOnFailure(gctx, o.Abort)
	free := make(chan []byte, o.Buffers)
	for range o.Buffers {
		free <- alignedBuf(o.ChunkSize)
	}
	toVerify := make(chan chunk, o.Buffers)
	toWrite := make(chan chunk, o.Buffers)
	g.Go(func() error { return readStage(gctx, r, w.handled, w.t.capacity, free, toVerify) })
	g.Go(func() error { return verifyStage(gctx, h, toVerify, toWrite) })
	g.Go(func() error { return w.writeStage(toWrite, free) })
	err := g.Wait()
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// abortOnFailure calls abort (when set) as soon as a stage fails, so that a
// source blocked on the network is unblocked. The group's cause is its
// first error, or Canceled once Wait returned (or the caller cancelled):
// those need no abort.
func abortOnFailure(gctx context.Context, abort func()) {
	<-gctx.Done()
	if abort != nil && !errors.Is(context.Cause(gctx), context.Canceled) {
		abort()
	}
}

// readStage reads r from offset off into free buffers and sends them on,
// until r ends. An image reaching past capacity is refused as soon as it
// does.
func readStage(ctx context.Context, r io.Reader, off, capacity int64, free <-chan []byte, out chan<- chunk) error {
	defer close(out)
	for {
		var buf []byte
		select {
		case buf = <-free:
		case <-ctx.Done():
			return ctx.Err()
		}
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if off+int64(n) > capacity {
				return fmt.Errorf("%w: the image is larger than the disk's %d bytes", ErrTooSmall, capacity)
			}
			if err := send(ctx, out, chunk{buf, n, off}); err != nil {
				return err
			}
			off += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// verifyStage adds every chunk, in order, to the image's digest, which
// Write compares with the expected one before the head is written.
func verifyStage(ctx context.Context, h hash.Hash, in <-chan chunk, out chan<- chunk) error {
	defer close(out)
	for c := range in {
		h.Write(c.buf[:c.n])
		if err := send(ctx, out, c); err != nil {
			return err
		}
	}
	return nil
}

func send(ctx context.Context, out chan<- chunk, c chunk) error {
	select {
	case out <- c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// imageWriter is the write stage: it writes the data runs of each chunk
// (target.writeAt aligns them for O_DIRECT) and gathers the zero runs,
// across chunks, into one range the device zeroes itself when it can.
type imageWriter struct {
	t *target
	// zeroFrom, zeroTo: the zero range gathered and not yet zeroed, when
	// zeroing is set.
	zeroFrom, zeroTo int64
	zeroing          bool
	// handled is how far the image has been handled (written or zeroed).
	handled int64
	// skipped counts zero bytes the device zeroed without a write.
	skipped  int64
	progress *atomic.Int64
}

func (w *imageWriter) writeStage(in <-chan chunk, free chan<- []byte) error {
	for c := range in {
		if err := w.put(c.buf[:c.n], c.off); err != nil {
			return err
		}
		free <- c.buf
	}
	return w.flushZeros()
}

// put handles the chunk p, which belongs at off.
func (w *imageWriter) put(p []byte, off int64) error {
	for s := 0; s < len(p); {
		e, zero := nextRun(p, s)
		if zero {
			w.gatherZeros(off+int64(s), off+int64(e))
		} else {
			if err := w.flushZeros(); err != nil {
				return err
			}
			if err := w.t.writeAt(p[s:e], off+int64(s)); err != nil {
				return err
			}
		}
		s = e
	}
	w.handled = off + int64(len(p))
	w.progress.Store(w.handled)
	return nil
}

// gatherZeros adds [from, to) to the pending zero range; zero runs arrive
// in order, each starting where the pending range ends.
func (w *imageWriter) gatherZeros(from, to int64) {
	if !w.zeroing {
		w.zeroFrom, w.zeroing = from, true
	}
	w.zeroTo = to
}

// flushZeros zeroes the pending zero range, if any.
func (w *imageWriter) flushZeros() error {
	if !w.zeroing {
		return nil
	}
	from, to := w.zeroFrom, w.zeroTo
	w.zeroing = false
	punched, err := w.t.zeroRange(from, to-from)
	if punched {
		w.skipped += to - from
	}
	return err
}

// zeroSegment is a whole segment of zeros, to compare with.
var zeroSegment = make([]byte, segment)

// nextRun returns where the run that starts at s in p ends, and whether it
// is a run of whole zero segments (turned into a hole or zeroed range
// rather than written). A data run goes on until a whole zero segment
// begins; a segment cut short by the end of p is data, so the unaligned
// tail of an image is always written.
func nextRun(p []byte, s int) (end int, zero bool) {
	zero = isZeroSegment(p, s)
	end = min(s+segment, len(p))
	for end < len(p) && isZeroSegment(p, end) == zero {
		end = min(end+segment, len(p))
	}
	return end, zero
}

func isZeroSegment(p []byte, s int) bool {
	return len(p)-s >= segment && bytes.Equal(p[s:s+segment], zeroSegment)
}
