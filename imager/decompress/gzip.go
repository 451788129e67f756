package decompress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
)

// gzipReader reads concatenated gzip members one at a time so that bytes
// after the last member are reported as trailing data, not as a bad header.
type gzipReader struct {
	src *countingReader
	br  *bufio.Reader
	zr  *gzip.Reader
	err error
}

func newGzipReader(r io.Reader) (io.ReadCloser, error) {
	src := &countingReader{r: r}
	g := &gzipReader{src: src, br: bufio.NewReaderSize(src, 1<<20)}
	zr, err := gzip.NewReader(g.br)
	if err != nil {
		return nil, g.classify(err)
	}
	zr.Multistream(false)
	g.zr = zr
	return g, nil
}

func (g *gzipReader) Read(p []byte) (int, error) {
	for {
		if g.err != nil {
			return 0, g.err
		}
		n, err := g.zr.Read(p)
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, io.EOF) {
			g.err = g.classify(err)
			return n, g.err
		}
		// End of one member: EOF, another member, or trailing garbage.
		next, perr := g.br.Peek(len(magicGzip))
		switch {
		case len(next) == 0 && perr == io.EOF:
			g.err = io.EOF
		case bytes.Equal(next, magicGzip):
			if rerr := g.zr.Reset(g.br); rerr != nil {
				g.err = g.classify(rerr)
			} else {
				g.zr.Multistream(false)
			}
		case perr != nil && perr != io.EOF:
			g.err = g.classify(perr)
		default:
			g.err = fmt.Errorf("%w: gzip: non-gzip data after %d input bytes", ErrTrailingData, g.src.n-int64(g.br.Buffered()))
		}
		if n > 0 {
			return n, nil
		}
	}
}

func (g *gzipReader) classify(err error) error {
	switch {
	case g.src.err != nil:
		return fmt.Errorf("gzip: reading input: %w", g.src.err)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return fmt.Errorf("%w: gzip: input ends inside a member", ErrTruncated)
	}
	return fmt.Errorf("%w: gzip: %v", ErrCorrupt, err)
}

func (g *gzipReader) Close() error { return nil }
