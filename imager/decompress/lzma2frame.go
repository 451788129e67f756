package decompress

import (
	"errors"
	"fmt"
	"io"
)

// lzma2Frames sits between a block's compressed bytes and the LZMA2 decoder
// and checks the chunk framing the decoder leaves unchecked, as xz-utils
// does (xz-file-format and liblzma's lzma2_decoder): control bytes, a
// dictionary reset first, properties before the first LZMA chunk after a
// reset, valid lc/lp/pb, each range coder starting with a zero byte, and
// each chunk's compressed size used up exactly. Without it a damaged chunk
// header could decode to the same bytes and pass, where xz refuses it.
type lzma2Frames struct {
	r   io.Reader
	err error

	state     frameState
	control   byte
	hdr       [5]byte // header bytes after the control byte
	hdrLen    int     // how many hdr bytes this chunk has: 2, 4 or 5
	hdrGot    int
	left      int64 // data bytes of the current chunk still to come
	lzmaChunk bool  // current chunk is LZMA-compressed (its first data byte is the range coder's 0)
	first     bool  // next data byte is the first of an LZMA chunk

	needDictReset bool
	needProps     bool
	unpacked      int64 // sum of the chunks' uncompressed sizes
}

type frameState int

const (
	frameControl frameState = iota
	frameHeader
	frameData
	frameEnd
)

var errFrame = errors.New("LZMA2 chunk framing")

func newLZMA2Frames(r io.Reader) *lzma2Frames {
	return &lzma2Frames{r: r, needDictReset: true, needProps: true}
}

func (f *lzma2Frames) Read(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	if f.state == frameEnd {
		// The decoder reads nothing after the end marker; anything else
		// is a framing error.
		return 0, io.EOF
	}
	n, err := f.r.Read(p)
	for i := 0; i < n; {
		if f.state == frameData && !f.first {
			// Skip the rest of the chunk's data at once.
			k := int(min(f.left, int64(n-i)))
			f.left -= int64(k)
			i += k
			if f.left == 0 {
				f.state = frameControl
			}
			continue
		}
		if f.err = f.step(p[i]); f.err != nil {
			return 0, f.err
		}
		i++
	}
	return n, err
}

func (f *lzma2Frames) bad(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errFrame, fmt.Sprintf(format, a...))
}

func (f *lzma2Frames) step(b byte) error {
	switch f.state {
	case frameEnd:
		return f.bad("data after the end marker")
	case frameControl:
		return f.controlByte(b)
	case frameHeader:
		f.hdr[f.hdrGot] = b
		f.hdrGot++
		if f.hdrGot == f.hdrLen {
			return f.chunkStart()
		}
		return nil
	case frameData:
		return f.dataByte(b)
	}
	return nil
}

// controlByte reads a chunk's control byte: the end marker, or the kind of chunk (LZMA or
// uncompressed) and what it resets, which fixes the length of the header that follows.
func (f *lzma2Frames) controlByte(b byte) error {
	switch {
	case b == 0x00:
		f.state = frameEnd
		return nil
	case b >= 0xE0 || b == 0x01:
		f.needProps, f.needDictReset = true, false
	case f.needDictReset:
		return f.bad("first chunk does not reset the dictionary (control %#x)", b)
	}
	f.control, f.hdrGot, f.lzmaChunk = b, 0, b >= 0x80
	if f.lzmaChunk {
		f.hdrLen = 4
		if b >= 0xC0 {
			f.hdrLen, f.needProps = 5, false
		} else if f.needProps {
			return f.bad("LZMA chunk without properties after a dictionary reset (control %#x)", b)
		}
	} else {
		if b > 0x02 {
			return f.bad("invalid control byte %#x", b)
		}
		f.hdrLen = 2
	}
	f.state = frameHeader
	return nil
}

// dataByte counts one byte of a chunk's data; an LZMA chunk's range coder starts with a zero.
func (f *lzma2Frames) dataByte(b byte) error {
	if f.first {
		f.first = false
		if b != 0 {
			return f.bad("range coder does not start with a zero byte")
		}
	}
	f.left--
	if f.left == 0 {
		f.state = frameControl
	}
	return nil
}

// chunkStart runs once a chunk's header is complete.
func (f *lzma2Frames) chunkStart() error {
	control := f.control
	if !f.lzmaChunk {
		size := int64(f.hdr[0])<<8 | int64(f.hdr[1]) + 1
		f.unpacked += size
		f.left, f.first, f.state = size, false, frameData
		return nil
	}
	f.unpacked += int64(control&0x1F)<<16 | int64(f.hdr[0])<<8 | int64(f.hdr[1]) + 1
	packed := int64(f.hdr[2])<<8 | int64(f.hdr[3]) + 1
	if f.hdrLen == 5 {
		// lc/lp/pb as (pb*5+lp)*9+lc; LZMA2 allows lc+lp <= 4.
		last := f.hdr[4]
		if last > (4*5+4)*9+8 {
			return f.bad("properties byte %#x", last)
		}
		lc, lp := int(last)%9, int(last)/9%5
		if lc+lp > 4 {
			return f.bad("lc %d + lp %d > 4", lc, lp)
		}
	}
	f.left, f.first, f.state = packed, true, frameData
	return nil
}

// end checks, once the decoder reported the end of the block after
// decoded bytes, that the framing ended there too.
func (f *lzma2Frames) end(decoded int64) error {
	switch {
	case f.err != nil:
		return f.err
	case f.state != frameEnd:
		return f.bad("the decoder stopped inside a chunk: a chunk's compressed size does not match its data")
	case decoded != f.unpacked:
		return f.bad("%d bytes decoded, the chunk headers announce %d", decoded, f.unpacked)
	}
	return nil
}
