package decompress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"

	"github.com/ulikunitz/xz/lzma"
	"golang.org/x/sync/semaphore"
)

// The xz reader parses the .xz container itself (xzformat.go) and decodes
// each block's LZMA2 data with github.com/ulikunitz/xz/lzma's public
// Reader2. Blocks whose header records their sizes (what `xz -T` writes) are
// decoded by a pool of workers and delivered in order; other blocks, and
// blocks too big for the memory budget, are decoded streaming, in order, by
// the parsing goroutine.
//
// Memory: every byte the reader holds for a block is charged to one budget
// (decodeBudget) before it is allocated: a parallel block's compressed
// bytes, its decoder dictionary and its decoded bytes; a streaming block's
// dictionary and its chunk buffers. So the bound holds whatever the block
// and dictionary sizes (xz -0 1 MiB blocks, xz -6 -T0 24 MiB, xz -9 -T0
// 192 MiB with a 64 MiB dictionary); a dictionary that cannot fit is
// refused as unsupported rather than allocated.

const (
	// decodeBudget bounds the bytes held by blocks in flight.
	decodeBudget = 68 << 20
	// streamChunk is the piece size of streaming blocks, and streamSlots
	// how many pieces a streaming block may have in flight (one being
	// decoded, the others queued or being consumed).
	streamChunk = 1 << 20
	streamSlots = 3
	// zeroKeyMax: blocks whose compressed form is at most this long are
	// remembered when they decode to zeros (see zeroBlocks).
	zeroKeyMax = 64 << 10
	// zeroKeysMax bounds how many such blocks are remembered.
	zeroKeysMax = 16
)

// budgetFor is the charge of a block decoded in memory: its compressed
// bytes (with padding and check), its dictionary and its decoded bytes.
func budgetFor(h blockHeader) (comp, dict, out int64) {
	return h.compressed + padLen(h.compressed) + int64(h.checkSize), int64(h.dictCap), h.uncompressed
}

type xzJob struct {
	index  int
	header blockHeader

	// Parallel blocks: the worker sets out/err, then closes done.
	comp []byte // block data + padding + check
	out  []byte
	err  error
	done chan struct{}

	// A block known to decode to zeros: zeros bytes left to deliver.
	isZero bool
	zeros  int64

	// Streaming blocks: decoded pieces, closed at the end; errPtr is set
	// before. Consumed pieces go back to free.
	chunks chan []byte
	free   chan []byte
	errPtr *error
	held   []byte // the whole piece pending points into

	charge  int64  // budget still held, released when the block is consumed
	pending []byte // consumer side: the undelivered rest of out or of a piece
}

type xzReader struct {
	ctx    context.Context
	cancel context.CancelFunc
	src    *countingReader
	br     *bufio.Reader
	queue  chan *xzJob // every block, in order, for the consumer
	work   chan *xzJob // parallel blocks, for the workers
	budget *budget
	zeros  *zeroBlocks
	wg     sync.WaitGroup

	cur *xzJob
	err error
}

// countingReader counts input bytes and remembers the input's own failure
// (anything but EOF), so a network error is not reported as corrupt data.
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && err != io.EOF && c.err == nil {
		c.err = err
	}
	return n, err
}

// budget is a weighted semaphore that also records its high-water mark, so
// tests can check the bound and benchmarks can report it.
type budget struct {
	sem  *semaphore.Weighted
	mu   sync.Mutex
	used int64
	peak int64
}

func newBudget(n int64) *budget { return &budget{sem: semaphore.NewWeighted(n)} }

func (b *budget) acquire(ctx context.Context, n int64) error {
	if err := b.sem.Acquire(ctx, n); err != nil {
		return err
	}
	b.mu.Lock()
	b.used += n
	b.peak = max(b.peak, b.used)
	b.mu.Unlock()
	return nil
}

func (b *budget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	b.sem.Release(n)
}

func newXZReader(r io.Reader, concurrency int) *xzReader {
	ctx, cancel := context.WithCancel(context.Background())
	src := &countingReader{r: r}
	x := &xzReader{
		ctx:    ctx,
		cancel: cancel,
		src:    src,
		br:     bufio.NewReaderSize(src, 1<<20),
		queue:  make(chan *xzJob, 4*concurrency+4),
		work:   make(chan *xzJob, concurrency),
		budget: newBudget(decodeBudget),
		zeros:  &zeroBlocks{},
	}
	for i := 0; i < concurrency; i++ {
		x.wg.Add(1)
		go x.worker()
	}
	go x.produce()
	return x
}

// offset is the position in the compressed input of the next unparsed byte.
func (x *xzReader) offset() int64 { return x.src.n - int64(x.br.Buffered()) }

func (x *xzReader) Read(p []byte) (int, error) {
	if x.err != nil {
		return 0, x.err
	}
	n := 0
	for n < len(p) {
		if x.cur == nil {
			if n > 0 && len(x.queue) == 0 {
				return n, nil // do not block with data in hand
			}
			j, err := x.nextJob()
			if errors.Is(err, io.EOF) && n > 0 {
				return n, nil
			}
			if err != nil {
				return n, err
			}
			x.cur = j
		}
		k, err := x.readJob(x.cur, p[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// nextJob waits for the next block in stream order and, for a block
// decoded in parallel, for its decoding; io.EOF once the queue is closed.
func (x *xzReader) nextJob() (*xzJob, error) {
	j, ok := <-x.queue
	if !ok {
		x.err = io.EOF
		return nil, io.EOF
	}
	if j.done != nil {
		<-j.done
		if j.err != nil {
			return nil, x.fail(j.err)
		}
		j.pending = j.out
	}
	return j, nil
}

// readJob copies what block j has ready into p: zeros for a run of zeros,
// the next streamed chunk, or the decoded bytes; it finishes j when j has
// nothing more.
func (x *xzReader) readJob(j *xzJob, p []byte) (int, error) {
	switch {
	case j.isZero:
		k := int(min(int64(len(p)), j.zeros))
		clear(p[:k])
		j.zeros -= int64(k)
		if j.zeros == 0 {
			x.finish(j)
		}
		return k, nil
	case j.chunks != nil && len(j.pending) == 0:
		return 0, x.nextChunk(j)
	default:
		k := copy(p, j.pending)
		j.pending = j.pending[k:]
		if j.chunks == nil && len(j.pending) == 0 {
			outBufs.put(j.out)
			j.out = nil
			x.finish(j)
		}
		return k, nil
	}
}

// nextChunk hands the chunk j's reader was holding back to its decoder and
// takes the next one; at the end of the block's chunks it finishes j, or
// fails with the decoder's error.
func (x *xzReader) nextChunk(j *xzJob) error {
	if j.held != nil {
		j.free <- j.held
		j.held = nil
	}
	c, ok := <-j.chunks
	if !ok {
		if *j.errPtr != nil {
			return x.fail(*j.errPtr)
		}
		x.finish(j)
		return nil
	}
	j.held, j.pending = c[:cap(c)], c
	return nil
}

// finish releases what a fully delivered block still holds.
func (x *xzReader) finish(j *xzJob) {
	for len(j.free) > 0 {
		chunkBufs.put(<-j.free)
	}
	x.budget.release(j.charge)
	j.charge = 0
	x.cur = nil
}

func (x *xzReader) fail(err error) error {
	x.err = err
	x.cancel()
	return err
}

func (x *xzReader) Close() error {
	x.cancel()
	// Drain so the producer and workers notice cancellation and exit.
	go func() {
		for range x.queue {
		}
	}()
	return nil
}

func (x *xzReader) worker() {
	defer x.wg.Done()
	for j := range x.work {
		j.out, j.err = decodeBlock(j)
		if j.err == nil {
			x.zeros.learn(j.header.raw, j.comp, j.out)
		}
		// The compressed bytes and the dictionary are done with; only the
		// decoded bytes wait for the consumer.
		comp, dict, _ := budgetFor(j.header)
		compBufs.put(j.comp)
		j.comp = nil
		x.budget.release(comp + dict)
		j.charge -= comp + dict
		close(j.done)
	}
}

// enqueue puts a job on the ordered queue unless the reader was closed.
func (x *xzReader) enqueue(j *xzJob) bool {
	select {
	case x.queue <- j:
		return true
	case <-x.ctx.Done():
		return false
	}
}

func (x *xzReader) produce() {
	err := x.parse()
	if err != nil && !errors.Is(err, errStop) && x.ctx.Err() == nil {
		if x.src.err != nil && !errors.Is(err, x.src.err) {
			// The input failed (network...): say so rather than blame the data.
			err = fmt.Errorf("xz: reading input at offset %d: %w", x.offset(), x.src.err)
		}
		// Deliver the error in order, after the blocks already queued.
		j := &xzJob{done: make(chan struct{}), err: err}
		close(j.done)
		x.enqueue(j)
	}
	close(x.work)
	x.wg.Wait()
	close(x.queue)
}

// errStop ends parsing after an error was already delivered in order.
var errStop = errors.New("stop")

// dispatchBlock reads one block: whole, for a worker, when its sizes are
// known and it fits twice in the budget (so two blocks can be in flight);
// otherwise it decodes it streaming, here.
func (x *xzReader) dispatchBlock(h blockHeader, index int, off int64) (record, error) {
	if h.compressed <= 0 || h.uncompressed < 0 {
		return x.streamBlock(h, index)
	}
	comp, dict, out := budgetFor(h)
	if comp+dict+out > decodeBudget/2 {
		return x.streamBlock(h, index)
	}
	charge := comp + dict + out
	if err := x.budget.acquire(x.ctx, charge); err != nil {
		return record{}, err
	}
	buf := compBufs.get(int(comp))
	if _, err := io.ReadFull(x.br, buf); err != nil {
		x.budget.release(charge)
		return record{}, truncOr(err, fmt.Sprintf("block %d", index), x.offset())
	}
	rec := record{int64(h.headerSize) + h.compressed + int64(h.checkSize), h.uncompressed}
	j := &xzJob{index: index, header: h, comp: buf, charge: charge}
	if x.zeros.known(h.raw, buf) {
		compBufs.put(buf)
		x.budget.release(charge)
		j.comp, j.charge, j.isZero, j.zeros = nil, 0, true, h.uncompressed
		if !x.enqueue(j) {
			return record{}, context.Canceled
		}
		return rec, nil
	}
	j.done = make(chan struct{})
	if !x.enqueue(j) {
		return record{}, context.Canceled
	}
	select {
	case x.work <- j:
	case <-x.ctx.Done():
		return record{}, context.Canceled
	}
	return rec, nil
}

// decodeBlock decodes a whole in-memory block and checks sizes and check.
func decodeBlock(j *xzJob) ([]byte, error) {
	h := j.header
	data := j.comp[:h.compressed]
	pad := j.comp[h.compressed : h.compressed+padLen(h.compressed)]
	sum := j.comp[h.compressed+padLen(h.compressed):]
	where := fmt.Sprintf("xz block %d at offset %d", j.index, h.offset)
	for _, b := range pad {
		if b != 0 {
			return nil, fmt.Errorf("%w: %s: non-zero block padding", ErrCorrupt, where)
		}
	}
	br := bytes.NewReader(data)
	frames := newLZMA2Frames(br)
	lr, err := lzma.Reader2Config{DictCap: h.dictCap}.NewReader2(frames)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, where, err)
	}
	out := outBufs.get(int(h.uncompressed))
	n, err := io.ReadFull(lr, out)
	if err != nil {
		outBufs.put(out)
		return nil, fmt.Errorf("%w: %s: LZMA2 data: %v (after %d of %d bytes)", ErrCorrupt, where, err, n, h.uncompressed)
	}
	// The LZMA2 end marker must come right after the last byte and use up
	// exactly the compressed size.
	var one [1]byte
	if k, err := lr.Read(one[:]); k != 0 || !errors.Is(err, io.EOF) || !lr.EOS() {
		outBufs.put(out)
		return nil, fmt.Errorf("%w: %s: LZMA2 data longer than the recorded size", ErrCorrupt, where)
	}
	if br.Len() != 0 {
		outBufs.put(out)
		return nil, fmt.Errorf("%w: %s: %d compressed bytes left after the LZMA2 end marker", ErrCorrupt, where, br.Len())
	}
	if err := frames.end(int64(n)); err != nil {
		outBufs.put(out)
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, where, err)
	}
	if c := newCheck(h.check); c != nil {
		c.Write(out)
		if !checkEqual(c, h.check, sum) {
			outBufs.put(out)
			return nil, fmt.Errorf("%w: %s: %s mismatch", ErrCorrupt, where, checkName(h.check))
		}
	}
	return out, nil
}

// bufPool recycles buffers: Talos images have ~1400 blocks of 1 MiB, each
// otherwise a fresh, zeroed allocation and, once delivered, garbage that
// raises peak RSS until the next GC. Compressed and decoded buffers have
// their own pools since their sizes differ.
type bufPool struct{ p sync.Pool }

var compBufs, outBufs, chunkBufs bufPool

func (b *bufPool) get(n int) []byte {
	if v, ok := b.p.Get().(*[]byte); ok && cap(*v) >= n {
		return (*v)[:n]
	}
	return make([]byte, n)
}

func (b *bufPool) put(v []byte) {
	if cap(v) > 0 {
		b.p.Put(&v)
	}
}

// zeroBlocks remembers small compressed blocks that decoded to zeros. A disk
// image is mostly empty space, and `xz -T` compresses every empty block of
// the same size to the same bytes; LZMA2 decoding is a pure function of the
// block header and data, so a block byte-identical (header, data, padding
// and check) to one that decoded and verified to zeros decodes and verifies
// to zeros too, and need not be decoded again. ulikunitz/xz spends most of
// its time on such runs (a match at distance 1 is copied a byte per call).
type zeroBlocks struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

func zeroKey(header, comp []byte) string { return string(header) + string(comp) }

func (z *zeroBlocks) known(header, comp []byte) bool {
	if len(comp) > zeroKeyMax {
		return false
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	_, ok := z.keys[zeroKey(header, comp)]
	return ok
}

// learn remembers a verified block if it is small and decoded to zeros.
func (z *zeroBlocks) learn(header, comp, out []byte) {
	if len(comp) > zeroKeyMax || !allZero(out) {
		return
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if len(z.keys) >= zeroKeysMax {
		return
	}
	if z.keys == nil {
		z.keys = map[string]struct{}{}
	}
	z.keys[zeroKey(header, comp)] = struct{}{}
}

var zeroPage [64 << 10]byte

func allZero(b []byte) bool {
	for len(b) > 0 {
		k := min(len(b), len(zeroPage))
		if !bytes.Equal(b[:k], zeroPage[:k]) {
			return false
		}
		b = b[k:]
	}
	return true
}

// streamBlock decodes a block in order without holding it whole.
func (x *xzReader) streamBlock(h blockHeader, index int) (record, error) {
	where := fmt.Sprintf("xz block %d at offset %d", index, h.offset)
	j, err := x.startStream(h, index, where)
	if err != nil {
		return record{}, err
	}
	start := x.offset()
	c := newCheck(h.check)
	total, err := x.pumpBlock(j, h, c, where)
	if err != nil {
		return record{}, x.failStream(j, where, err)
	}
	compressed, err := x.endBlock(h, start, total, c, where)
	if err != nil {
		return record{}, x.failStream(j, where, err)
	}
	close(j.chunks)
	return record{int64(h.headerSize) + compressed + int64(h.checkSize), total}, nil
}

// startStream charges the block's dictionary and chunk buffers to the
// decoding budget and queues its job, in stream order, for the consumer.
func (x *xzReader) startStream(h blockHeader, index int, where string) (*xzJob, error) {
	charge := int64(h.dictCap) + streamSlots*streamChunk
	if charge > decodeBudget {
		return nil, fmt.Errorf("%w: %s: an LZMA2 dictionary of %d MiB does not fit em-imager's decoding memory bound of %d MiB",
			ErrUnsupported, where, h.dictCap>>20, decodeBudget>>20)
	}
	if err := x.budget.acquire(x.ctx, charge); err != nil {
		return nil, err
	}
	var jobErr error
	j := &xzJob{index: index, header: h, chunks: make(chan []byte, streamSlots), free: make(chan []byte, streamSlots),
		errPtr: &jobErr, charge: charge}
	for i := 0; i < streamSlots; i++ {
		j.free <- chunkBufs.get(streamChunk)
	}
	if !x.enqueue(j) {
		x.budget.release(charge)
		return nil, context.Canceled
	}
	return j, nil
}

// failStream delivers err through j, naming the input's own error when
// reading the input is what failed, and stops the parsing quietly.
func (x *xzReader) failStream(j *xzJob, where string, err error) error {
	if x.src.err != nil && !errors.Is(err, x.src.err) {
		err = fmt.Errorf("xz: reading input in %s: %w", where, x.src.err)
	}
	*j.errPtr = err
	close(j.chunks)
	return errStop
}

// pumpBlock decodes the block's LZMA2 data into j's chunks, feeding check c
// (nil: none), and returns how many bytes it decoded.
func (x *xzReader) pumpBlock(j *xzJob, h blockHeader, c hash.Hash, where string) (int64, error) {
	var in io.Reader = x.br
	if h.compressed > 0 {
		in = io.LimitReader(x.br, h.compressed)
	}
	frames := newLZMA2Frames(in)
	lr, err := lzma.Reader2Config{DictCap: h.dictCap}.NewReader2(frames)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %v", ErrCorrupt, where, err)
	}
	var total int64
	for done := false; !done; {
		if done, err = x.pumpChunk(j, lr, c, h, &total, where); err != nil {
			return total, err
		}
	}
	if err := frames.end(total); err != nil {
		return total, fmt.Errorf("%w: %s: %v", ErrCorrupt, where, err)
	}
	return total, nil
}

// pumpChunk decodes into one free buffer of j and hands it on; done at the
// end of the LZMA2 stream.
func (x *xzReader) pumpChunk(j *xzJob, lr *lzma.Reader2, c hash.Hash, h blockHeader, total *int64, where string) (done bool, _ error) {
	var buf []byte
	select {
	case buf = <-j.free:
	case <-x.ctx.Done():
		return false, context.Canceled
	}
	n, err := io.ReadFull(lr, buf)
	if n > 0 {
		*total += int64(n)
		if h.uncompressed >= 0 && *total > h.uncompressed {
			return false, fmt.Errorf("%w: %s: more data than the recorded size", ErrCorrupt, where)
		}
		if c != nil {
			c.Write(buf[:n])
		}
		j.chunks <- buf[:n] // never blocks: at most streamSlots buffers exist
	} else {
		j.free <- buf
	}
	if (err == io.EOF || err == io.ErrUnexpectedEOF) && lr.EOS() {
		return true, nil
	}
	if err == nil {
		return false, nil
	}
	if _, perr := x.br.Peek(1); perr == io.EOF {
		return false, fmt.Errorf("%w: xz: input ends inside %s", ErrTruncated, where)
	}
	return false, fmt.Errorf("%w: %s: LZMA2 data: %v", ErrCorrupt, where, err)
}

// endBlock checks the block's sizes against its header, reads its padding
// and check, and compares the check with c; it returns the compressed size.
func (x *xzReader) endBlock(h blockHeader, start, total int64, c hash.Hash, where string) (int64, error) {
	compressed := x.offset() - start
	if (h.compressed > 0 && compressed != h.compressed) || (h.uncompressed >= 0 && total != h.uncompressed) {
		return 0, fmt.Errorf("%w: %s: sizes differ from the block header", ErrCorrupt, where)
	}
	tail := make([]byte, padLen(compressed)+int64(h.checkSize))
	if _, err := io.ReadFull(x.br, tail); err != nil {
		return 0, truncOr(err, where, x.offset())
	}
	for _, b := range tail[:padLen(compressed)] {
		if b != 0 {
			return 0, fmt.Errorf("%w: %s: non-zero block padding", ErrCorrupt, where)
		}
	}
	if c != nil && !checkEqual(c, h.check, tail[padLen(compressed):]) {
		return 0, fmt.Errorf("%w: %s: %s mismatch", ErrCorrupt, where, checkName(h.check))
	}
	return compressed, nil
}
