package decompress

import (
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// maxZstdWindow bounds the decoder's history: zstd -18 uses 8 MiB, --ultra
// -22 128 MiB; anything larger would break em-imager's memory bound.
const maxZstdWindow = 128 << 20

type zstdReader struct {
	src *countingReader
	dec *zstd.Decoder
	out int64
	err error
}

func newZstdReader(r io.Reader, concurrency int) (io.ReadCloser, error) {
	src := &countingReader{r: r}
	dec, err := zstd.NewReader(src,
		zstd.WithDecoderConcurrency(concurrency),
		zstd.WithDecoderMaxWindow(maxZstdWindow),
		zstd.WithDecoderLowmem(false),
	)
	if err != nil {
		return nil, fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
	}
	return &zstdReader{src: src, dec: dec}, nil
}

func (z *zstdReader) Read(p []byte) (int, error) {
	if z.err != nil {
		return 0, z.err
	}
	n, err := z.dec.Read(p)
	z.out += int64(n)
	if err != nil && !errors.Is(err, io.EOF) {
		z.err = z.classify(err)
		return n, z.err
	}
	if errors.Is(err, io.EOF) {
		z.err = io.EOF
	}
	return n, err
}

func (z *zstdReader) classify(err error) error {
	at := fmt.Sprintf("after %d input bytes", z.src.n)
	switch {
	case z.src.err != nil:
		return fmt.Errorf("zstd: reading input %s: %w", at, z.src.err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: zstd: input ends inside a frame %s", ErrTruncated, at)
	case errors.Is(err, zstd.ErrMagicMismatch) && z.out > 0:
		// A complete frame was decoded; what follows is not another frame.
		return fmt.Errorf("%w: zstd: non-zstd data %s", ErrTrailingData, at)
	case errors.Is(err, zstd.ErrWindowSizeExceeded):
		return fmt.Errorf("%w: zstd: window larger than %d bytes: %v", ErrUnsupported, maxZstdWindow, err)
	case errors.Is(err, zstd.ErrCRCMismatch):
		return fmt.Errorf("%w: zstd: content checksum mismatch %s", ErrCorrupt, at)
	}
	return fmt.Errorf("%w: zstd: %v (%s)", ErrCorrupt, err, at)
}

func (z *zstdReader) Close() error {
	z.dec.Close()
	return nil
}
