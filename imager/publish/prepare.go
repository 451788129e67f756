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
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/kernelargs"
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
		Log:    log,
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
	inFmt, err := peekFormat(br)
	if err != nil {
		return nil, err
	}
	log.Info("input", "format", inFmt)
	p := &prepared{inputFormat: string(inFmt)}
	inCount := newCounter()
	keep, err := keepInput(o, inFmt, workdir)
	if err != nil {
		return nil, err
	}
	defer keep.close()
	tee := io.TeeReader(br, io.MultiWriter(inCount, keep))
	dec, err := decompress.NewReader(tee, inFmt, o.Concurrency)
	if err != nil {
		return nil, inputError(err)
	}
	defer dec.Close()
	encs, err := openEncoders(ctx, o, log, workdir, keep.format)
	if err != nil {
		return nil, err
	}

	start := time.Now()
	rawCount, sig := newCounter(), &bootSignature{}
	found, readErr, err := copyRaw(ctx, o, workdir, dec, tee, inFmt, append(append([]io.Writer{rawCount}, encs.writers()...), sig))
	if err != nil {
		encs.abort()
		return nil, err
	}
	p.inputSize, p.inputSHA256 = inCount.n, inCount.sum()
	p.raw = manifest.Digest{Size: rawCount.n, SHA256: rawCount.sum()}
	log.Info("input verified", "rawSize", p.raw.Size, "rawSHA256", p.raw.SHA256, "inputSize", p.inputSize, "took", time.Since(start).Round(time.Millisecond))
	if err := p.checkBoot(o, sig, found, readErr, log); err != nil {
		encs.abort()
		return nil, err
	}
	if p.files, err = keep.stage(p); err != nil {
		encs.abort()
		return nil, err
	}
	files, err := encs.finish(o, p.raw)
	if err != nil {
		return nil, err
	}
	p.files = append(p.files, files...)
	return p, nil
}

// peekFormat detects the input's format from its first bytes, refusing an empty input.
func peekFormat(br *bufio.Reader) (decompress.Format, error) {
	head, err := br.Peek(decompress.HeaderLen)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", &Error{Code: CodeInputUnreachable, Err: fmt.Errorf("input: %w", err)}
	}
	if len(head) == 0 {
		return "", &Error{Code: CodeCorruptInput, Err: errors.New("input is empty")}
	}
	return decompress.Detect(head), nil
}

// keptInput is the copy of an input already in a wanted format, written to the work dir as it
// streams by, so what is uploaded is exactly what was verified. With no file it discards.
type keptInput struct {
	format string
	f      *os.File
}

// keepInput keeps the input when it is xz or zstd and one of the wanted formats, unless
// --reencode.
func keepInput(o *Options, inFmt decompress.Format, workdir string) (*keptInput, error) {
	if o.Reencode || (inFmt != decompress.FormatXZ && inFmt != decompress.FormatZstd) || !contains(o.Formats, string(inFmt)) {
		return &keptInput{}, nil
	}
	f, err := os.Create(filepath.Join(workdir, "input."+string(inFmt)))
	if err != nil {
		return nil, &Error{Code: CodeInternal, Err: err}
	}
	return &keptInput{format: string(inFmt), f: f}, nil
}

func (k *keptInput) Write(p []byte) (int, error) {
	if k.f == nil {
		return len(p), nil
	}
	return k.f.Write(p)
}

func (k *keptInput) close() {
	if k.f != nil {
		k.f.Close()
	}
}

// stage closes the kept copy and lists it as the first file to upload (none when nothing was
// kept).
func (k *keptInput) stage(p *prepared) ([]staged, error) {
	if k.f == nil {
		return nil, nil
	}
	if err := k.f.Close(); err != nil {
		return nil, &Error{Code: CodeInternal, Err: err}
	}
	return []staged{{format: k.format, path: k.f.Name(), size: p.inputSize, sha256: p.inputSHA256, encoder: "upstream"}}, nil
}

// encoding is one output format being encoded into its file in the work dir.
type encoding struct {
	format string
	e      encoder
	f      *os.File
	c      *counter
}

type encodings []*encoding

// openEncoders starts an encoder per wanted format, but the one the input is kept in.
func openEncoders(ctx context.Context, o *Options, log *slog.Logger, workdir, keepFormat string) (encodings, error) {
	var encs encodings
	for _, format := range o.Formats {
		if format == keepFormat {
			continue
		}
		e, err := openEncoding(ctx, o, workdir, format)
		if err != nil {
			encs.abort()
			return nil, err
		}
		encs = append(encs, e)
		log.Info("encoding", "format", format, "encoder", e.e.Name(), "blockSize", o.BlockSize)
	}
	return encs, nil
}

// openEncoding creates format's output file and its encoder: zstd frames, or xz through the
// xz binary when one was found, else in Go.
func openEncoding(ctx context.Context, o *Options, workdir, format string) (*encoding, error) {
	ext, _ := manifest.Extension(format)
	f, err := os.Create(filepath.Join(workdir, "out.raw."+ext))
	if err != nil {
		return nil, &Error{Code: CodeInternal, Err: err}
	}
	c := newCounter()
	w := io.MultiWriter(f, c)
	var e encoder
	switch {
	case format == manifest.FormatZstd:
		e, err = newZstdFrames(w, o.BlockSize, o.Concurrency)
	case format == manifest.FormatXZ && o.xzBin != "":
		e, err = newXZExternal(ctx, o.xzBin, w, o.BlockSize, o.Concurrency)
	case format == manifest.FormatXZ:
		e, err = newXZGo(w, o.BlockSize)
	}
	if err != nil {
		f.Close()
		return nil, &Error{Code: CodeInternal, Err: fmt.Errorf("%s encoder: %w", format, err)}
	}
	return &encoding{format: format, e: e, f: f, c: c}, nil
}

func (encs encodings) writers() []io.Writer {
	out := make([]io.Writer, len(encs))
	for i, e := range encs {
		out[i] = e.e
	}
	return out
}

// abort stops every encoder and closes its file.
func (encs encodings) abort() {
	for _, e := range encs {
		e.e.Abort()
		e.f.Close()
	}
}

// finish closes each encoder and its file, verifying the output against raw when asked, and
// lists the files to upload; on a failure it aborts the encoders not closed yet.
func (encs encodings) finish(o *Options, raw manifest.Digest) ([]staged, error) {
	var files []staged
	for i, e := range encs {
		if err := e.e.Close(); err != nil {
			encs[i+1:].abort()
			e.f.Close()
			return nil, &Error{Code: CodeInternal, Err: fmt.Errorf("%s encoder: %w", e.format, err)}
		}
		if err := e.f.Close(); err != nil {
			return nil, &Error{Code: CodeInternal, Err: err}
		}
		s := staged{format: e.format, path: e.f.Name(), size: e.c.n, sha256: e.c.sum(), blockSize: int64(o.BlockSize), encoder: e.e.Name()}
		if o.VerifyOutput {
			if err := verifyFile(s, raw, o.Concurrency); err != nil {
				return nil, &Error{Code: CodeInternal, Err: err}
			}
		}
		files = append(files, s)
	}
	return files, nil
}

// copyRaw decodes the input into the writers and a capture of the EFI system partition, then
// checks nothing of the input is left unread: decompress verified the end of the stream (for
// raw input the copy read it all). It returns what the ESP holds for the boot.
func copyRaw(ctx context.Context, o *Options, workdir string, dec io.Reader, tee io.Reader, inFmt decompress.Format, writers []io.Writer) (kernelargs.Found, error, error) {
	esp, err := newESPCapture(filepath.Join(workdir, "esp.raw"), o.SectorSize)
	if err != nil {
		return kernelargs.Found{}, nil, &Error{Code: CodeInternal, Err: err}
	}
	if _, err := io.Copy(io.MultiWriter(append(writers, esp)...), dec); err != nil {
		esp.abort()
		if ctx.Err() != nil {
			return kernelargs.Found{}, nil, &Error{Code: CodeInterrupted, Err: ctx.Err()}
		}
		return kernelargs.Found{}, nil, inputError(err)
	}
	found, readErr := esp.finish()
	if n, _ := io.Copy(io.Discard, tee); n > 0 {
		return kernelargs.Found{}, nil, &Error{Code: CodeCorruptInput, Err: fmt.Errorf("input: %d bytes after the end of the %s stream", n, inFmt)}
	}
	return found, readErr, nil
}

// checkBoot refuses a raw image that is no whole number of sectors or has no boot signature,
// then settles the boot (kernel arguments and their source).
func (p *prepared) checkBoot(o *Options, sig *bootSignature, found kernelargs.Found, readErr error, log *slog.Logger) error {
	if p.raw.Size%int64(o.SectorSize) != 0 {
		return &Error{Code: CodeCorruptInput, Err: fmt.Errorf("raw image: %d bytes is not a whole number of %d-byte sectors (truncated?)", p.raw.Size, o.SectorSize)}
	}
	if !sig.ok() {
		return &Error{Code: CodeNotDiskImage, Err: errors.New("raw image: no MBR/GPT boot signature (0x55AA at byte 510): not a Talos metal disk image")}
	}
	var err error
	if p.boot, err = bootOf(found, readErr, o.KernelArgs, o.MaintenanceAPI, log); err != nil {
		return err
	}
	log.Info("boot", "kernelArgs", p.boot.KernelArgs, "source", p.boot.Source, "metalISO", p.boot.MetalISO)
	return nil
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
