package publish

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/decompress"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/manifest"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/source"
)

// staged is one compressed file ready for upload.
type staged struct {
	format    string
	path      string
	size      int64
	sha256    string
	blockSize int64
	encoder   string
}

// prepared is the verified input and the files to upload.
type prepared struct {
	inputFormat string
	inputSize   int64
	inputSHA256 string
	raw         manifest.Digest
	boot        *manifest.Boot
	files       []staged
}

// counter is a hash + byte count over everything written.
type counter struct {
	h hash.Hash
	n int64
}

func newCounter() *counter { return &counter{h: sha256.New()} }

func (c *counter) Write(p []byte) (int, error) {
	c.h.Write(p)
	c.n += int64(len(p))
	return len(p), nil
}

func (c *counter) sum() string { return hex.EncodeToString(c.h.Sum(nil)) }

// openInput opens a local path or an http(s) URL through imager/source,
// which retries and resumes a broken download with Range requests.
func openInput(ctx context.Context, in string, client *http.Client, log *slog.Logger) (io.ReadCloser, error) {
	if st, err := os.Stat(in); err == nil && st.IsDir() {
		return nil, &Error{Code: CodeInvalidArgument, Err: fmt.Errorf("--input %s: is a directory", in)}
	}
	r, err := source.Open(ctx, in, source.Options{
		Client: client,
		Log:    func(format string, args ...any) { log.Warn(fmt.Sprintf(format, args...)) },
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, &Error{Code: CodeInterrupted, Err: ctx.Err()}
		}
		// source's errors never carry a URL query.
		return nil, &Error{Code: CodeInputUnreachable, Err: fmt.Errorf("input %s: %w", source.RedactURL(in), err)}
	}
	return r, nil
}

// prepare reads the input once: it detects the format from the magic bytes,
// decompresses while hashing the compressed and the raw bytes, feeds the
// encoders the formats need, and then checks every new file by decoding it
// again. Nothing is uploaded until it returns without error.
func prepare(ctx context.Context, o *Options, log *slog.Logger, workdir string) (*prepared, error) {
	in, err := openInput(ctx, o.Input, o.HTTPClient, log)
	if err != nil {
		return nil, err
	}
	defer in.Close()

	br := bufio.NewReaderSize(in, 1<<20)
	head, err := br.Peek(decompress.HeaderLen)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, &Error{Code: CodeInputUnreachable, Err: fmt.Errorf("input: %w", err)}
	}
	if len(head) == 0 {
		return nil, &Error{Code: CodeCorruptInput, Err: errors.New("input is empty")}
	}
	inFmt := decompress.Detect(head)
	log.Info("input", "format", inFmt)

	p := &prepared{inputFormat: string(inFmt)}
	inCount := newCounter()
	var inWriters = []io.Writer{inCount}

	// An input already in a wanted format is uploaded unchanged, unless
	// --reencode; it is copied to the work dir as it streams by, so what is
	// uploaded is exactly what was verified.
	var keep *os.File
	keepFormat := ""
	if !o.Reencode && (inFmt == decompress.FormatXZ || inFmt == decompress.FormatZstd) && contains(o.Formats, string(inFmt)) {
		keepFormat = string(inFmt)
		keep, err = os.Create(filepath.Join(workdir, "input."+keepFormat))
		if err != nil {
			return nil, &Error{Code: CodeInternal, Err: err}
		}
		defer keep.Close()
		inWriters = append(inWriters, keep)
	}

	tee := io.TeeReader(br, io.MultiWriter(inWriters...))
	dec, err := decompress.NewReader(tee, inFmt, o.Concurrency)
	if err != nil {
		return nil, inputError(err)
	}
	defer dec.Close()

	rawCount := newCounter()
	rawWriters := []io.Writer{rawCount}
	type enc struct {
		format string
		e      encoder
		f      *os.File
		c      *counter
	}
	var encs []*enc
	abortAll := func() {
		for _, e := range encs {
			e.e.Abort()
			e.f.Close()
		}
	}
	for _, format := range o.Formats {
		if format == keepFormat {
			continue
		}
		ext, _ := manifest.Extension(format)
		f, err := os.Create(filepath.Join(workdir, "out.raw."+ext))
		if err != nil {
			abortAll()
			return nil, &Error{Code: CodeInternal, Err: err}
		}
		c := newCounter()
		w := io.MultiWriter(f, c)
		var e encoder
		switch format {
		case manifest.FormatZstd:
			e, err = newZstdFrames(w, o.BlockSize, o.Concurrency)
		case manifest.FormatXZ:
			if o.xzBin != "" {
				e, err = newXZExternal(ctx, o.xzBin, w, o.BlockSize, o.Concurrency)
			} else {
				e, err = newXZGo(w, o.BlockSize)
			}
		}
		if err != nil {
			f.Close()
			abortAll()
			return nil, &Error{Code: CodeInternal, Err: fmt.Errorf("%s encoder: %w", format, err)}
		}
		encs = append(encs, &enc{format: format, e: e, f: f, c: c})
		rawWriters = append(rawWriters, e)
		log.Info("encoding", "format", format, "encoder", e.Name(), "blockSize", o.BlockSize)
	}

	start := time.Now()
	sig := &bootSignature{}
	esp, err := newESPCapture(filepath.Join(workdir, "esp.raw"), o.SectorSize)
	if err != nil {
		abortAll()
		return nil, &Error{Code: CodeInternal, Err: err}
	}
	rawWriters = append(rawWriters, sig, esp)
	if _, err := io.Copy(io.MultiWriter(rawWriters...), dec); err != nil {
		abortAll()
		esp.abort()
		if ctx.Err() != nil {
			return nil, &Error{Code: CodeInterrupted, Err: ctx.Err()}
		}
		return nil, inputError(err)
	}
	// decompress verified the end of the stream; make sure nothing of the
	// input is left unread (for raw input the copy above read it all).
	found, readErr := esp.finish()
	if n, _ := io.Copy(io.Discard, tee); n > 0 {
		abortAll()
		return nil, &Error{Code: CodeCorruptInput, Err: fmt.Errorf("input: %d bytes after the end of the %s stream", n, inFmt)}
	}
	p.inputSize, p.inputSHA256 = inCount.n, inCount.sum()
	p.raw = manifest.Digest{Size: rawCount.n, SHA256: rawCount.sum()}
	log.Info("input verified", "rawSize", p.raw.Size, "rawSHA256", p.raw.SHA256, "inputSize", p.inputSize, "took", time.Since(start).Round(time.Millisecond))

	if p.raw.Size%int64(o.SectorSize) != 0 {
		abortAll()
		return nil, &Error{Code: CodeCorruptInput, Err: fmt.Errorf("raw image: %d bytes is not a whole number of %d-byte sectors (truncated?)", p.raw.Size, o.SectorSize)}
	}
	if !sig.ok() {
		abortAll()
		return nil, &Error{Code: CodeNotDiskImage, Err: errors.New("raw image: no MBR/GPT boot signature (0x55AA at byte 510): not a Talos metal disk image")}
	}
	if p.boot, err = bootOf(found, readErr, o.KernelArgs, o.MaintenanceAPI, log); err != nil {
		abortAll()
		return nil, err
	}
	log.Info("boot", "kernelArgs", p.boot.KernelArgs, "source", p.boot.Source, "metalISO", p.boot.MetalISO)

	if keep != nil {
		if err := keep.Close(); err != nil {
			abortAll()
			return nil, &Error{Code: CodeInternal, Err: err}
		}
		p.files = append(p.files, staged{format: keepFormat, path: keep.Name(), size: p.inputSize, sha256: p.inputSHA256, encoder: "upstream"})
	}
	for i, e := range encs {
		if err := e.e.Close(); err != nil {
			for _, rest := range encs[i+1:] {
				rest.e.Abort()
				rest.f.Close()
			}
			e.f.Close()
			return nil, &Error{Code: CodeInternal, Err: fmt.Errorf("%s encoder: %w", e.format, err)}
		}
		if err := e.f.Close(); err != nil {
			return nil, &Error{Code: CodeInternal, Err: err}
		}
		s := staged{format: e.format, path: e.f.Name(), size: e.c.n, sha256: e.c.sum(), blockSize: int64(o.BlockSize), encoder: e.e.Name()}
		if o.VerifyOutput {
			if err := verifyFile(s, p.raw, o.Concurrency); err != nil {
				return nil, &Error{Code: CodeInternal, Err: err}
			}
		}
		p.files = append(p.files, s)
	}
	return p, nil
}

// verifyFile decodes a file publish wrote and compares it with the raw digest,
// so a manifest never vouches for a file that does not decode to the image.
func verifyFile(s staged, raw manifest.Digest, concurrency int) error {
	f, err := os.Open(s.path)
	if err != nil {
		return err
	}
	defer f.Close()
	dec, err := decompress.NewReader(bufio.NewReaderSize(f, 1<<20), decompress.Format(s.format), concurrency)
	if err != nil {
		return err
	}
	defer dec.Close()
	c := newCounter()
	if _, err := io.Copy(c, dec); err != nil {
		return fmt.Errorf("re-reading the %s file publish wrote: %w", s.format, err)
	}
	if c.n != raw.Size || c.sum() != raw.SHA256 {
		return fmt.Errorf("the %s file publish wrote decodes to %d bytes sha256 %s, want %d bytes %s", s.format, c.n, c.sum(), raw.Size, raw.SHA256)
	}
	return nil
}

// inputError maps a decoding error to a stable code.
func inputError(err error) error {
	switch {
	case errors.Is(err, decompress.ErrTruncated):
		return &Error{Code: CodeTruncatedInput, Err: err}
	case errors.Is(err, decompress.ErrCorrupt), errors.Is(err, decompress.ErrTrailingData):
		return &Error{Code: CodeCorruptInput, Err: err}
	case errors.Is(err, decompress.ErrUnsupported):
		return &Error{Code: CodeUnsupportedInput, Err: err}
	}
	return &Error{Code: CodeInputUnreachable, Err: fmt.Errorf("reading input: %w", err)}
}

// bootSignature watches bytes 510-511 of the raw stream.
type bootSignature struct {
	off int64
	b   [2]byte
}

func (s *bootSignature) Write(p []byte) (int, error) {
	for i := range p {
		pos := s.off + int64(i)
		if pos == 510 || pos == 511 {
			s.b[pos-510] = p[i]
		}
		if pos > 511 {
			break
		}
	}
	s.off += int64(len(p))
	return len(p), nil
}

func (s *bootSignature) ok() bool { return s.off >= 512 && s.b == [2]byte{0x55, 0xAA} }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
