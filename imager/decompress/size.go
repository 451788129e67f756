package decompress

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/klauspost/compress/zstd"
)

// ErrSizeUnknown is returned when the compressed file does not record its decompressed size.
var ErrSizeUnknown = errors.New("decompressed size not recorded")

// RawSize returns the decompressed size of a compressed file of the given
// total size without decoding it: from the index at the end of an .xz file
// (one stream, read through r) or from a zstd frame header (header holds the
// file's first bytes; single-frame files only). Raw files are their size.
func RawSize(f Format, header []byte, r io.ReaderAt, size int64) (int64, error) {
	switch f {
	case FormatRaw:
		if size < 0 {
			return 0, ErrSizeUnknown
		}
		return size, nil
	case FormatZstd:
		var h zstd.Header
		if err := h.Decode(header); err != nil || !h.HasFCS {
			return 0, ErrSizeUnknown
		}
		return int64(h.FrameContentSize), nil
	case FormatXZ:
		if r == nil || size < 32 {
			return 0, ErrSizeUnknown
		}
		return xzRawSize(r, size)
	}
	return 0, ErrSizeUnknown
}

func xzRawSize(r io.ReaderAt, size int64) (int64, error) {
	backward, err := xzIndexSize(r, size)
	if err != nil {
		return 0, err
	}
	records, err := readXZIndex(r, size, backward)
	if err != nil {
		return 0, err
	}
	raw, blocks, err := sumIndexRecords(records)
	if err != nil {
		return 0, err
	}
	// One stream exactly: header + blocks + index + footer make up the file.
	if 12+blocks+backward+12 != size {
		return 0, ErrSizeUnknown
	}
	return raw, nil
}

// xzIndexSize reads the stream footer at the file's end and returns the index size it records
// (its Backward Size), refusing an index over 64 MiB or larger than the file allows.
func xzIndexSize(r io.ReaderAt, size int64) (int64, error) {
	var foot [12]byte
	if _, err := r.ReadAt(foot[:], size-12); err != nil {
		return 0, fmt.Errorf("%w: reading the xz footer: %v", ErrSizeUnknown, err)
	}
	if foot[10] != 'Y' || foot[11] != 'Z' || crc32.ChecksumIEEE(foot[4:10]) != binary.LittleEndian.Uint32(foot[0:4]) {
		// Stream padding or something else at the end: not worth guessing.
		return 0, ErrSizeUnknown
	}
	backward := (int64(binary.LittleEndian.Uint32(foot[4:8])) + 1) * 4
	if backward > 64<<20 || backward > size-24 {
		return 0, ErrSizeUnknown
	}
	return backward, nil
}

// readXZIndex reads the index before the footer, checks its indicator byte and CRC, and returns
// what lies between them: the record count, the records and the padding.
func readXZIndex(r io.ReaderAt, size, backward int64) ([]byte, error) {
	idx := make([]byte, backward)
	if _, err := r.ReadAt(idx, size-12-backward); err != nil {
		return nil, fmt.Errorf("%w: reading the xz index: %v", ErrSizeUnknown, err)
	}
	if idx[0] != 0 || crc32.ChecksumIEEE(idx[:len(idx)-4]) != binary.LittleEndian.Uint32(idx[len(idx)-4:]) {
		return nil, ErrSizeUnknown
	}
	return idx[1 : len(idx)-4], nil
}

// sumIndexRecords adds up the index's records: the uncompressed size of all blocks, and the
// bytes the blocks take in the file (each padded to four bytes). Only zero padding may follow.
func sumIndexRecords(p []byte) (raw, blocks int64, err error) {
	count, n, err := readVarint(p)
	if err != nil {
		return 0, 0, ErrSizeUnknown
	}
	p = p[n:]
	for i := int64(0); i < count; i++ {
		u, n1, err := readVarint(p)
		if err != nil {
			return 0, 0, ErrSizeUnknown
		}
		s, n2, err := readVarint(p[n1:])
		if err != nil {
			return 0, 0, ErrSizeUnknown
		}
		p = p[n1+n2:]
		raw += s
		blocks += u + padLen(u)
	}
	if len(bytes.Trim(p, "\x00")) != 0 {
		return 0, 0, ErrSizeUnknown
	}
	return raw, blocks, nil
}
