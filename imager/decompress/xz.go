package decompress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"io"
	"sync"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/decompress/internal/lzma"
	"golang.org/x/sync/semaphore"
)

// The xz reader parses the .xz container itself (stream header, block
// headers, index, footer) and hands each block to the LZMA2 decoder of
// github.com/ulikunitz/xz. Blocks whose header records their sizes (what
// `xz -T` writes) are decoded by a pool of workers and delivered in order;
// other blocks are decoded streaming, in order, by the parsing goroutine.

const (
	// maxParallelBlock caps the uncompressed size of a block decoded in
	// memory by a worker; larger blocks stream so memory stays bounded.
	maxParallelBlock = 64 << 20
	// maxInFlight bounds the compressed+uncompressed bytes held by queued
	// and decoding blocks (at least one block is always allowed).
	maxInFlight = 96 << 20
	// streamChunk is the piece size of streaming blocks.
	streamChunk = 1 << 20
)

var crc64Table = crc64.MakeTable(crc64.ECMA)

type xzJob struct {
	index   int
	header  blockHeader
	comp    []byte // block data + padding + check (parallel jobs)
	weight  int64
	out     []byte
	err     error
	done    chan struct{}
	chunks  chan []byte // streaming jobs: decoded pieces, closed at the end
	errPtr  *error      // streaming jobs: set before chunks is closed
	pending []byte      // consumer side: the undelivered rest of the current piece
}

type xzReader struct {
	ctx    context.Context
	cancel context.CancelFunc
	src    *countingReader
	br     *bufio.Reader
	queue  chan *xzJob
	work   chan *xzJob
	sem    *semaphore.Weighted
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

func newXZReader(r io.Reader, concurrency int) *xzReader {
	ctx, cancel := context.WithCancel(context.Background())
	src := &countingReader{r: r}
	x := &xzReader{
		ctx:    ctx,
		cancel: cancel,
		src:    src,
		br:     bufio.NewReaderSize(src, 1<<20),
		queue:  make(chan *xzJob, 2*concurrency+2),
		work:   make(chan *xzJob, concurrency),
		sem:    semaphore.NewWeighted(maxInFlight),
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
			j, ok := <-x.queue
			if !ok {
				x.err = io.EOF
				if n > 0 {
					return n, nil
				}
				return 0, io.EOF
			}
			if j.chunks == nil {
				<-j.done
				if j.err != nil {
					x.err = j.err
					x.cancel()
					return n, x.err
				}
				j.pending = j.out
			}
			x.cur = j
		}
		j := x.cur
		if j.chunks != nil && len(j.pending) == 0 {
			c, ok := <-j.chunks
			if !ok {
				if *j.errPtr != nil {
					x.err = *j.errPtr
					x.cancel()
					return n, x.err
				}
				x.cur = nil
				continue
			}
			j.pending = c
		}
		k := copy(p[n:], j.pending)
		j.pending = j.pending[k:]
		n += k
		if j.chunks == nil && len(j.pending) == 0 {
			x.sem.Release(j.weight)
			putBlockBuf(j.out)
			putBlockBuf(j.comp)
			j.out, j.comp = nil, nil
			x.cur = nil
		}
	}
	return n, nil
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

// truncOr turns an EOF inside the container into ErrTruncated.
func truncOr(err error, what string, off int64) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: xz: input ends inside %s at offset %d", ErrTruncated, what, off)
	}
	return fmt.Errorf("xz: reading %s at offset %d: %w", what, off, err)
}

func (x *xzReader) parse() error {
	for stream := 0; ; stream++ {
		if err := x.parseStream(); err != nil {
			return err
		}
		// Stream padding: groups of four zero bytes, then EOF or another stream.
		for {
			b, err := x.br.Peek(4)
			if len(b) == 0 && err == io.EOF {
				return nil
			}
			if len(b) >= 1 && b[0] != 0 {
				h, _ := x.br.Peek(len(magicXZ))
				if bytes.Equal(h, magicXZ) {
					break
				}
				return fmt.Errorf("%w: %d bytes of non-xz data at offset %d", ErrTrailingData, x.br.Buffered(), x.offset())
			}
			if len(b) < 4 || !bytes.Equal(b, []byte{0, 0, 0, 0}) {
				return fmt.Errorf("%w: stream padding at offset %d is not a multiple of four zero bytes", ErrTrailingData, x.offset())
			}
			x.br.Discard(4)
		}
	}
}

type record struct{ unpadded, uncompressed int64 }

func (x *xzReader) parseStream() error {
	start := x.offset()
	var hdr [12]byte
	if _, err := io.ReadFull(x.br, hdr[:]); err != nil {
		return truncOr(err, "stream header", start)
	}
	if !bytes.Equal(hdr[:6], magicXZ) {
		return fmt.Errorf("%w: xz: bad stream magic at offset %d", ErrCorrupt, start)
	}
	if crc32.ChecksumIEEE(hdr[6:8]) != binary.LittleEndian.Uint32(hdr[8:12]) {
		return fmt.Errorf("%w: xz: stream header CRC32 mismatch at offset %d", ErrCorrupt, start)
	}
	flags := hdr[6:8]
	if flags[0] != 0 || flags[1]&0xF0 != 0 {
		return fmt.Errorf("%w: xz: reserved stream flags set", ErrUnsupported)
	}
	check := flags[1] & 0x0F
	checkSize, ok := checkSizes[check]
	if !ok {
		return fmt.Errorf("%w: xz: check type %#x", ErrUnsupported, check)
	}
	var records []record
	for {
		off := x.offset()
		sizeByte, err := x.br.ReadByte()
		if err != nil {
			return truncOr(err, "block header", off)
		}
		if sizeByte == 0 {
			return x.parseIndex(records, flags)
		}
		h, err := x.readBlockHeader(sizeByte, off)
		if err != nil {
			return err
		}
		h.check, h.checkSize = check, checkSize
		rec, err := x.dispatchBlock(h, len(records), off)
		if err != nil {
			return err
		}
		records = append(records, rec)
	}
}

var checkSizes = map[byte]int{0x00: 0, 0x01: 4, 0x04: 8, 0x0A: 32}

func newCheck(check byte) hash.Hash {
	switch check {
	case 0x01:
		return crc32.NewIEEE()
	case 0x04:
		return crc64.New(crc64Table)
	case 0x0A:
		return sha256.New()
	}
	return nil
}

type blockHeader struct {
	headerSize   int
	compressed   int64 // -1 when absent
	uncompressed int64 // -1 when absent
	dictCap      int
	check        byte
	checkSize    int
	offset       int64
}

func readVarint(b []byte) (int64, int, error) {
	var v uint64
	for i := 0; i < len(b) && i < 9; i++ {
		v |= uint64(b[i]&0x7F) << (7 * i)
		if b[i]&0x80 == 0 {
			if i > 0 && b[i] == 0 {
				return 0, 0, errors.New("non-minimal integer")
			}
			if v > 1<<63-1 {
				return 0, 0, errors.New("integer overflow")
			}
			return int64(v), i + 1, nil
		}
	}
	return 0, 0, errors.New("bad integer")
}

func (x *xzReader) readBlockHeader(sizeByte byte, off int64) (blockHeader, error) {
	size := (int(sizeByte) + 1) * 4
	buf := make([]byte, size)
	buf[0] = sizeByte
	if _, err := io.ReadFull(x.br, buf[1:]); err != nil {
		return blockHeader{}, truncOr(err, "block header", off)
	}
	if crc32.ChecksumIEEE(buf[:size-4]) != binary.LittleEndian.Uint32(buf[size-4:]) {
		return blockHeader{}, fmt.Errorf("%w: xz: block header CRC32 mismatch at offset %d", ErrCorrupt, off)
	}
	h := blockHeader{headerSize: size, compressed: -1, uncompressed: -1, offset: off}
	flags := buf[1]
	if flags&0x3C != 0 {
		return h, fmt.Errorf("%w: xz: reserved block flags set at offset %d", ErrCorrupt, off)
	}
	p := buf[2 : size-4]
	bad := func(what string) error {
		return fmt.Errorf("%w: xz: block header at offset %d: %s", ErrCorrupt, off, what)
	}
	if flags&0x40 != 0 {
		v, n, err := readVarint(p)
		if err != nil || v == 0 {
			return h, bad("compressed size")
		}
		h.compressed, p = v, p[n:]
	}
	if flags&0x80 != 0 {
		v, n, err := readVarint(p)
		if err != nil {
			return h, bad("uncompressed size")
		}
		h.uncompressed, p = v, p[n:]
	}
	if nf := int(flags&0x03) + 1; nf != 1 {
		return h, fmt.Errorf("%w: xz: block at offset %d uses a filter chain of %d filters (only LZMA2 alone is supported)", ErrUnsupported, off, nf)
	}
	id, n, err := readVarint(p)
	if err != nil {
		return h, bad("filter id")
	}
	p = p[n:]
	if id != 0x21 {
		return h, fmt.Errorf("%w: xz: block at offset %d uses filter %#x (only LZMA2 is supported)", ErrUnsupported, off, id)
	}
	psize, n, err := readVarint(p)
	if err != nil || psize != 1 || len(p) < n+1 {
		return h, bad("LZMA2 properties")
	}
	dp := p[n]
	p = p[n+1:]
	if dp > 40 {
		return h, bad("LZMA2 dictionary size")
	}
	var dict int64 = 0xFFFFFFFF
	if dp < 40 {
		dict = int64(2|(dp&1)) << (dp/2 + 11)
	}
	for _, b := range p {
		if b != 0 {
			return h, bad("non-zero header padding")
		}
	}
	// A block never refers further back than its own start, so a block
	// smaller than the dictionary needs only a dictionary of its size.
	if h.uncompressed >= 0 && h.uncompressed < dict {
		dict = h.uncompressed
	}
	if dict < lzma.MinDictCap {
		dict = lzma.MinDictCap
	}
	if dict > 1<<30 {
		return h, fmt.Errorf("%w: xz: dictionary of %d bytes is larger than this decoder allows (1 GiB)", ErrUnsupported, dict)
	}
	h.dictCap = int(dict)
	return h, nil
}

func padLen(n int64) int64 { return (4 - n%4) % 4 }

// dispatchBlock reads one block: whole, for a worker, when its sizes are
// known and small enough; otherwise it decodes it streaming, here.
func (x *xzReader) dispatchBlock(h blockHeader, index int, off int64) (record, error) {
	if h.compressed > 0 && h.uncompressed >= 0 && h.uncompressed <= maxParallelBlock && h.compressed <= 2*maxParallelBlock {
		total := h.compressed + padLen(h.compressed) + int64(h.checkSize)
		weight := total + h.uncompressed
		if weight > maxInFlight {
			weight = maxInFlight
		}
		if err := x.sem.Acquire(x.ctx, weight); err != nil {
			return record{}, err
		}
		comp := getBlockBuf(int(total))
		if _, err := io.ReadFull(x.br, comp); err != nil {
			x.sem.Release(weight)
			return record{}, truncOr(err, fmt.Sprintf("block %d", index), x.offset())
		}
		j := &xzJob{index: index, header: h, comp: comp, weight: weight, done: make(chan struct{})}
		if !x.enqueue(j) {
			return record{}, context.Canceled
		}
		select {
		case x.work <- j:
		case <-x.ctx.Done():
			return record{}, context.Canceled
		}
		return record{int64(h.headerSize) + h.compressed + int64(h.checkSize), h.uncompressed}, nil
	}
	return x.streamBlock(h, index)
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
	lr, err := lzma.Reader2Config{DictCap: h.dictCap}.NewReader2(br)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, where, err)
	}
	out := getBlockBuf(int(h.uncompressed))
	n, err := io.ReadFull(lr, out)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: LZMA2 data: %v (after %d of %d bytes)", ErrCorrupt, where, err, n, h.uncompressed)
	}
	// The LZMA2 end marker must come right after the last byte and use up
	// exactly the compressed size.
	var one [1]byte
	if k, err := lr.Read(one[:]); k != 0 || err != io.EOF || !lr.EOS() {
		return nil, fmt.Errorf("%w: %s: LZMA2 data longer than the recorded size", ErrCorrupt, where)
	}
	if br.Len() != 0 {
		return nil, fmt.Errorf("%w: %s: %d compressed bytes left after the LZMA2 end marker", ErrCorrupt, where, br.Len())
	}
	if c := newCheck(h.check); c != nil {
		c.Write(out)
		if !checkEqual(c, h.check, sum) {
			return nil, fmt.Errorf("%w: %s: %s mismatch", ErrCorrupt, where, checkName(h.check))
		}
	}
	return out, nil
}

// blockBufs recycles the output buffers of parallel blocks: Talos images
// have ~1400 blocks of 1 MiB, each otherwise a fresh, zeroed allocation.
var blockBufs sync.Pool

func getBlockBuf(n int) []byte {
	if b, ok := blockBufs.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:n]
	}
	return make([]byte, n)
}

func putBlockBuf(b []byte) {
	if cap(b) > 0 {
		blockBufs.Put(&b)
	}
}

func checkName(c byte) string {
	switch c {
	case 0x01:
		return "CRC32"
	case 0x04:
		return "CRC64"
	case 0x0A:
		return "SHA-256"
	}
	return "check"
}

// checkEqual compares a computed check with the stored one; xz stores CRCs
// little endian while Go's hash.Sum gives them big endian.
func checkEqual(h hash.Hash, check byte, stored []byte) bool {
	sum := h.Sum(nil)
	if check == 0x01 || check == 0x04 {
		for i, j := 0, len(sum)-1; i < j; i, j = i+1, j-1 {
			sum[i], sum[j] = sum[j], sum[i]
		}
	}
	return bytes.Equal(sum, stored)
}

// streamBlock decodes a block in order without holding it whole.
func (x *xzReader) streamBlock(h blockHeader, index int) (record, error) {
	where := fmt.Sprintf("xz block %d at offset %d", index, h.offset)
	var jobErr error
	j := &xzJob{index: index, header: h, chunks: make(chan []byte, 2), errPtr: &jobErr}
	if !x.enqueue(j) {
		return record{}, context.Canceled
	}
	fail := func(err error) (record, error) {
		if x.src.err != nil && !errors.Is(err, x.src.err) {
			err = fmt.Errorf("xz: reading input in %s: %w", where, x.src.err)
		}
		jobErr = err
		close(j.chunks)
		// The error is delivered through the job; stop parsing quietly.
		return record{}, errStop
	}
	start := x.offset()
	var in io.Reader = x.br
	if h.compressed > 0 {
		in = io.LimitReader(x.br, h.compressed)
	}
	lr, err := lzma.Reader2Config{DictCap: h.dictCap}.NewReader2(in)
	if err != nil {
		return fail(fmt.Errorf("%w: %s: %v", ErrCorrupt, where, err))
	}
	c := newCheck(h.check)
	var total int64
	for {
		buf := make([]byte, streamChunk)
		n, err := io.ReadFull(lr, buf)
		if n > 0 {
			total += int64(n)
			if h.uncompressed >= 0 && total > h.uncompressed {
				return fail(fmt.Errorf("%w: %s: more data than the recorded size", ErrCorrupt, where))
			}
			if c != nil {
				c.Write(buf[:n])
			}
			select {
			case j.chunks <- buf[:n]:
			case <-x.ctx.Done():
				return fail(context.Canceled)
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			if lr.EOS() {
				break
			}
		}
		if err != nil {
			if _, perr := x.br.Peek(1); perr == io.EOF {
				return fail(fmt.Errorf("%w: xz: input ends inside %s", ErrTruncated, where))
			}
			return fail(fmt.Errorf("%w: %s: LZMA2 data: %v", ErrCorrupt, where, err))
		}
	}
	compressed := x.offset() - start
	if (h.compressed > 0 && compressed != h.compressed) || (h.uncompressed >= 0 && total != h.uncompressed) {
		return fail(fmt.Errorf("%w: %s: sizes differ from the block header", ErrCorrupt, where))
	}
	tail := make([]byte, padLen(compressed)+int64(h.checkSize))
	if _, err := io.ReadFull(x.br, tail); err != nil {
		return fail(truncOr(err, where, x.offset()))
	}
	for _, b := range tail[:padLen(compressed)] {
		if b != 0 {
			return fail(fmt.Errorf("%w: %s: non-zero block padding", ErrCorrupt, where))
		}
	}
	if c != nil && !checkEqual(c, h.check, tail[padLen(compressed):]) {
		return fail(fmt.Errorf("%w: %s: %s mismatch", ErrCorrupt, where, checkName(h.check)))
	}
	close(j.chunks)
	return record{int64(h.headerSize) + compressed + int64(h.checkSize), total}, nil
}

// errStop ends parsing after an error was already delivered in order.
var errStop = errors.New("stop")

func (x *xzReader) parseIndex(records []record, streamFlags []byte) error {
	off := x.offset() - 1
	crc := crc32.NewIEEE()
	crc.Write([]byte{0})
	readVar := func(what string) (int64, error) {
		var b [9]byte
		for i := 0; i < 9; i++ {
			c, err := x.br.ReadByte()
			if err != nil {
				return 0, truncOr(err, "index", x.offset())
			}
			b[i] = c
			if c&0x80 == 0 {
				crc.Write(b[:i+1])
				v, _, err := readVarint(b[:i+1])
				if err != nil {
					return 0, fmt.Errorf("%w: xz: index %s: %v", ErrCorrupt, what, err)
				}
				return v, nil
			}
		}
		return 0, fmt.Errorf("%w: xz: index %s too long", ErrCorrupt, what)
	}
	count, err := readVar("record count")
	if err != nil {
		return err
	}
	if count != int64(len(records)) {
		return fmt.Errorf("%w: xz: index lists %d blocks, the stream has %d", ErrCorrupt, count, len(records))
	}
	for i, r := range records {
		u, err := readVar("unpadded size")
		if err != nil {
			return err
		}
		s, err := readVar("uncompressed size")
		if err != nil {
			return err
		}
		if u != r.unpadded || s != r.uncompressed {
			return fmt.Errorf("%w: xz: index record %d does not match block %d", ErrCorrupt, i, i)
		}
	}
	size := x.offset() - off
	pad := make([]byte, padLen(size))
	if _, err := io.ReadFull(x.br, pad); err != nil {
		return truncOr(err, "index", x.offset())
	}
	for _, b := range pad {
		if b != 0 {
			return fmt.Errorf("%w: xz: non-zero index padding", ErrCorrupt)
		}
	}
	crc.Write(pad)
	size += int64(len(pad))
	var sum [4]byte
	if _, err := io.ReadFull(x.br, sum[:]); err != nil {
		return truncOr(err, "index", x.offset())
	}
	size += 4
	if crc.Sum32() != binary.LittleEndian.Uint32(sum[:]) {
		return fmt.Errorf("%w: xz: index CRC32 mismatch", ErrCorrupt)
	}
	var foot [12]byte
	if _, err := io.ReadFull(x.br, foot[:]); err != nil {
		return truncOr(err, "stream footer", x.offset())
	}
	if foot[10] != 'Y' || foot[11] != 'Z' {
		return fmt.Errorf("%w: xz: bad stream footer magic", ErrCorrupt)
	}
	if crc32.ChecksumIEEE(foot[4:10]) != binary.LittleEndian.Uint32(foot[0:4]) {
		return fmt.Errorf("%w: xz: stream footer CRC32 mismatch", ErrCorrupt)
	}
	if backward := (int64(binary.LittleEndian.Uint32(foot[4:8])) + 1) * 4; backward != size {
		return fmt.Errorf("%w: xz: footer backward size %d does not match the index size %d", ErrCorrupt, backward, size)
	}
	if !bytes.Equal(foot[8:10], streamFlags) {
		return fmt.Errorf("%w: xz: footer stream flags differ from the header", ErrCorrupt)
	}
	return nil
}
