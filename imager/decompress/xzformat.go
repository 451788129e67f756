package decompress

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"io"

	"github.com/ulikunitz/xz/lzma"
)

// This file parses the .xz container (xz-file-format-1.2.0): stream header,
// block headers, index, footer, padding. Decoding the blocks is xz.go's job.

var crc64Table = crc64.MakeTable(crc64.ECMA)

// truncOr turns an EOF inside the container into ErrTruncated.
func truncOr(err error, what string, off int64) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: xz: input ends inside %s at offset %d", ErrTruncated, what, off)
	}
	return fmt.Errorf("xz: reading %s at offset %d: %w", what, off, err)
}

func (x *xzReader) parse() error {
	for {
		if err := x.parseStream(); err != nil {
			return err
		}
		more, err := x.skipPadding()
		if err != nil || !more {
			return err
		}
	}
}

// skipPadding skips stream padding, groups of four zero bytes, and reports whether another
// stream follows (false at EOF).
func (x *xzReader) skipPadding() (bool, error) {
	for {
		b, err := x.br.Peek(4)
		if len(b) == 0 && err == io.EOF {
			return false, nil
		}
		if len(b) >= 1 && b[0] != 0 {
			return true, x.checkStreamHeader()
		}
		if len(b) < 4 && err == io.EOF && allZero(b) {
			// A download cut inside the padding, not bad data.
			return false, fmt.Errorf("%w: xz: input ends inside stream padding at offset %d", ErrTruncated, x.offset())
		}
		if len(b) < 4 || !bytes.Equal(b, []byte{0, 0, 0, 0}) {
			return false, fmt.Errorf("%w: stream padding at offset %d is not a multiple of four zero bytes", ErrTrailingData, x.offset())
		}
		x.br.Discard(4)
	}
}

// checkStreamHeader checks that what follows the padding starts another stream, telling an input
// cut inside the stream header from data that is no xz at all.
func (x *xzReader) checkStreamHeader() error {
	h, herr := x.br.Peek(len(magicXZ))
	if bytes.Equal(h, magicXZ) {
		return nil
	}
	if herr == io.EOF && bytes.HasPrefix(magicXZ, h) {
		return fmt.Errorf("%w: xz: input ends inside a stream header at offset %d", ErrTruncated, x.offset())
	}
	return fmt.Errorf("%w: %d bytes of non-xz data at offset %d", ErrTrailingData, x.br.Buffered(), x.offset())
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
	raw          []byte // the header as read, CRC32 included
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
	h := blockHeader{raw: buf, headerSize: size, compressed: -1, uncompressed: -1, offset: off}
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
	h.dictCap = int(dict)
	return h, nil
}

func padLen(n int64) int64 { return (4 - n%4) % 4 }

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
