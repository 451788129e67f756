package decompress

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// Format is a container format em-imager knows how to read.
type Format string

// The formats Detect recognises. Raw means "no container": the bytes are the image.
const (
	FormatXZ   Format = "xz"
	FormatZstd Format = "zstd"
	FormatGzip Format = "gzip"
	FormatRaw  Format = "raw"
)

// Sentinel errors. Every decoding error wraps exactly one of them so callers
// (em-imager write, publish) can map them to stable report codes.
var (
	// ErrCorrupt: a checksum, a header or the compressed data is wrong.
	ErrCorrupt = errors.New("corrupt input")
	// ErrTruncated: the input ended before the compressed stream did.
	ErrTruncated = errors.New("truncated input")
	// ErrTrailingData: bytes follow the end of the compressed stream.
	ErrTrailingData = errors.New("trailing data after compressed stream")
	// ErrUnsupported: a valid file using a feature this decoder does not
	// implement (an xz filter other than LZMA2, an unknown check type).
	ErrUnsupported = errors.New("unsupported compressed format feature")
)

// ReportCode maps a decoding error to its report error code, "" for an
// error that is not about the compressed data (the input's own failure).
func ReportCode(err error) string {
	switch {
	case errors.Is(err, ErrTruncated):
		return report.CodeTruncatedInput
	case errors.Is(err, ErrCorrupt), errors.Is(err, ErrTrailingData):
		return report.CodeCorruptInput
	case errors.Is(err, ErrUnsupported):
		return report.CodeUnsupportedFormat
	}
	return ""
}

var (
	magicXZ   = []byte{0xFD, '7', 'z', 'X', 'Z', 0x00}
	magicZstd = []byte{0x28, 0xB5, 0x2F, 0xFD}
	magicGzip = []byte{0x1F, 0x8B, 0x08}
)

// HeaderLen is the number of leading bytes Detect needs to tell all formats apart.
const HeaderLen = 6

// Detect names the format from the first bytes of a file (at most HeaderLen
// are looked at). Anything unknown, including a header too short to tell, is raw.
func Detect(header []byte) Format {
	switch {
	case bytes.HasPrefix(header, magicXZ):
		return FormatXZ
	case bytes.HasPrefix(header, magicZstd):
		return FormatZstd
	case len(header) >= 4 && header[0]&0xF0 == 0x50 && bytes.Equal(header[1:4], []byte{0x2A, 0x4D, 0x18}):
		// A zstd skippable frame (magic 0x184D2A50..5F, little endian) may lead a zstd file.
		return FormatZstd
	case bytes.HasPrefix(header, magicGzip):
		return FormatGzip
	}
	return FormatRaw
}

// ParseFormat turns a --format value into a Format; "auto" and "" give "".
func ParseFormat(s string) (Format, error) {
	switch s {
	case "", "auto":
		return "", nil
	case "xz":
		return FormatXZ, nil
	case "zstd", "zst":
		return FormatZstd, nil
	case "gzip", "gz":
		return FormatGzip, nil
	case "raw":
		return FormatRaw, nil
	}
	return "", fmt.Errorf("unknown format %q (want auto, xz, zstd, gzip or raw)", s)
}

// NewReader returns a reader of the decompressed bytes of r in format f.
// concurrency <= 0 means GOMAXPROCS. The reader returns io.EOF only after the
// whole stream, its checksums and the absence of trailing data were verified;
// any other failure wraps ErrCorrupt, ErrTruncated, ErrTrailingData or
// ErrUnsupported. Close stops background decoding; it does not close r.
func NewReader(r io.Reader, f Format, concurrency int) (io.ReadCloser, error) {
	if concurrency <= 0 {
		concurrency = runtime.GOMAXPROCS(0)
	}
	switch f {
	case FormatXZ:
		return newXZReader(r, concurrency), nil
	case FormatZstd:
		return newZstdReader(r, concurrency)
	case FormatGzip:
		return newGzipReader(r)
	case FormatRaw:
		return io.NopCloser(r), nil
	}
	return nil, fmt.Errorf("%w: unknown format %q", ErrUnsupported, f)
}
