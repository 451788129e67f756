package publish

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// Encoders for --reencode (and for the formats the input does not come in).
//
// Both encoders cut the raw image into blocks of --block-size raw bytes that
// decode independently, which is what lets em-imager decode on all cores:
//
//   - zstd: one zstd frame per block, each with its content size in the frame
//     header, encoded in parallel with klauspost/compress. Concatenated frames
//     are a standard zstd file (`zstd -d` reads it).
//   - xz: Debian's `xz -T<n> --block-size=<n>` when an `xz` binary is on PATH
//     (--xz-encoder=auto|external): it writes the compressed and uncompressed
//     size into every block header, which imager/decompress needs to hand
//     blocks to parallel workers. Without it (--xz-encoder=go) the pure-Go
//     ulikunitz/xz writer makes independent blocks of the same size, but
//     without sizes in the headers, so they decode sequentially; it is also
//     single-threaded and slower. Publish records the encoder in the manifest.

type encoder interface {
	io.Writer
	// Close flushes and waits; the output is complete when it returns nil.
	Close() error
	// Abort stops early after a failure elsewhere.
	Abort()
	Name() string
}

// zstdFrames writes one zstd frame per blockSize raw bytes, encoding up to
// `workers` frames at once and writing them in order.
type zstdFrames struct {
	out       io.Writer
	blockSize int
	enc       *zstd.Encoder
	buf       []byte
	jobs      chan *frameJob // to the workers
	order     chan *frameJob // to the writer, in submission order
	wg        sync.WaitGroup
	done      chan struct{}
	closeOnce sync.Once

	mu      sync.Mutex
	err     error
	aborted bool
}

type frameJob struct {
	in  []byte
	out []byte
	ok  chan struct{}
}

func newZstdFrames(out io.Writer, blockSize, workers int) (*zstdFrames, error) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	// EncodeAll is safe for concurrent use; one encoder serves every worker.
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedBetterCompression),
		zstd.WithEncoderConcurrency(workers),
		zstd.WithEncoderCRC(true),
		zstd.WithWindowSize(windowFor(blockSize)),
	)
	if err != nil {
		return nil, err
	}
	z := &zstdFrames{
		out: out, blockSize: blockSize, enc: enc,
		jobs:  make(chan *frameJob, workers),
		order: make(chan *frameJob, workers*2),
		done:  make(chan struct{}),
	}
	for range workers {
		z.wg.Add(1)
		go func() {
			defer z.wg.Done()
			for j := range z.jobs {
				j.out = enc.EncodeAll(j.in, make([]byte, 0, len(j.in)/2))
				close(j.ok)
			}
		}()
	}
	go z.writeInOrder()
	return z, nil
}

// windowFor returns the smallest valid zstd window covering one frame, so a
// decoder needs no more memory per frame than the frame's size.
func windowFor(blockSize int) int {
	w := zstd.MinWindowSize
	for w < blockSize && w < zstd.MaxWindowSize {
		w <<= 1
	}
	return w
}

func (z *zstdFrames) writeInOrder() {
	defer close(z.done)
	for j := range z.order {
		<-j.ok
		z.mu.Lock()
		skip := z.err != nil || z.aborted
		z.mu.Unlock()
		if skip {
			continue
		}
		if _, err := z.out.Write(j.out); err != nil {
			z.mu.Lock()
			z.err = err
			z.mu.Unlock()
		}
	}
}

func (z *zstdFrames) Name() string { return "klauspost/compress zstd" }

func (z *zstdFrames) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if z.buf == nil {
			z.buf = make([]byte, 0, z.blockSize)
		}
		k := min(z.blockSize-len(z.buf), len(p))
		z.buf = append(z.buf, p[:k]...)
		p, n = p[k:], n+k
		if len(z.buf) == z.blockSize {
			if err := z.submit(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// submit hands the current block to the workers. It blocks while
// 2*workers blocks are in flight, which bounds memory.
func (z *zstdFrames) submit() error {
	z.mu.Lock()
	err := z.err
	z.mu.Unlock()
	if err != nil {
		return err
	}
	j := &frameJob{in: z.buf, ok: make(chan struct{})}
	z.buf = nil
	z.order <- j
	z.jobs <- j
	return nil
}

func (z *zstdFrames) finish() error {
	z.closeOnce.Do(func() {
		close(z.jobs)
		close(z.order)
		<-z.done
		z.wg.Wait()
		_ = z.enc.Close()
	})
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.err
}

func (z *zstdFrames) Close() error {
	z.mu.Lock()
	aborted := z.aborted
	z.mu.Unlock()
	if aborted {
		return errors.New("zstd encoder aborted")
	}
	if len(z.buf) > 0 {
		if err := z.submit(); err != nil {
			z.Abort()
			return err
		}
	}
	return z.finish()
}

func (z *zstdFrames) Abort() {
	z.mu.Lock()
	z.aborted = true
	z.mu.Unlock()
	_ = z.finish()
}

// xzExternal pipes the raw bytes through Debian's xz.
type xzExternal struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stderr  bytes.Buffer
	version string
	cancel  context.CancelFunc
}

func newXZExternal(ctx context.Context, bin string, out io.Writer, blockSize, threads int) (*xzExternal, error) {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	ctx, cancel := context.WithCancel(ctx)
	x := &xzExternal{cancel: cancel, version: xzVersion(bin)}
	x.cmd = exec.CommandContext(ctx, bin, "-6", "-T"+strconv.Itoa(threads),
		"--block-size="+strconv.Itoa(blockSize), "--check=crc64", "-c", "-q")
	x.cmd.Stdout = out
	x.cmd.Stderr = &x.stderr
	stdin, err := x.cmd.StdinPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	x.stdin = stdin
	if err := x.cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	return x, nil
}

func xzVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "xz"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}

func (x *xzExternal) Name() string { return x.version }

func (x *xzExternal) Write(p []byte) (int, error) { return x.stdin.Write(p) }

func (x *xzExternal) Close() error {
	defer x.cancel()
	if err := x.stdin.Close(); err != nil {
		return err
	}
	if err := x.cmd.Wait(); err != nil {
		return fmt.Errorf("xz: %w: %s", err, strings.TrimSpace(x.stderr.String()))
	}
	return nil
}

func (x *xzExternal) Abort() {
	x.cancel()
	_ = x.stdin.Close()
	_ = x.cmd.Wait()
}

// xzGo is the pure-Go fallback.
type xzGo struct{ w *xz.Writer }

func newXZGo(out io.Writer, blockSize int) (*xzGo, error) {
	w, err := xz.WriterConfig{BlockSize: int64(blockSize), CheckSum: xz.CRC64}.NewWriter(out)
	if err != nil {
		return nil, err
	}
	return &xzGo{w: w}, nil
}

func (x *xzGo) Name() string                { return "ulikunitz/xz" }
func (x *xzGo) Write(p []byte) (int, error) { return x.w.Write(p) }
func (x *xzGo) Close() error                { return x.w.Close() }
func (x *xzGo) Abort()                      {}

// findXZ resolves --xz-encoder to a binary path, or "" for the Go encoder.
func findXZ(mode string) (string, error) {
	switch mode {
	case "go":
		return "", nil
	case "external":
		p, err := exec.LookPath("xz")
		if err != nil {
			return "", fmt.Errorf("--xz-encoder=external: no xz on PATH (install xz-utils, or use --xz-encoder=go)")
		}
		return p, nil
	case "auto", "":
		p, err := exec.LookPath("xz")
		if err != nil {
			return "", nil
		}
		return p, nil
	}
	return "", fmt.Errorf("--xz-encoder: %q: want auto, external or go", mode)
}
