// Package cli implements em-imager's subcommands (write, inspect, version):
// flag parsing, the download -> decompress -> disk pipeline, progress on
// stderr and the one JSON report on stdout. imager/cmd/em-imager calls Main.
package cli

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/blockdev"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/decompress"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/diskwrite"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hwinfo"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/source"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/version"
)

// Usage is printed for help and for an unknown subcommand.
const Usage = `em-imager writes a (compressed) raw disk image from a URL onto a disk, verified.

  em-imager write   --image URL --sha256 HEX [--disk PATH|auto] [--image-size BYTES] [--format auto|xz|zstd|gzip|raw] [flags]
  em-imager inspect [--disk PATH|auto] [--image-size BYTES]
                    disks and NICs, and the disk write would take with the same flags; writes nothing
  em-imager write-config --disk PATH < config.yaml   machine config -> metal-iso partition
  em-imager publish ...   prepare and upload an image + manifest
  em-imager version

write and inspect print exactly one JSON report on stdout; progress goes to stderr.
Run "em-imager write -h" for the flags. Exit status: 0 ok, 2 bad arguments, 3 download,
4 image data (digest, corrupt, truncated, format), 5 disk, 6 write/verify, 130 interrupted, 1 other.
`

// Main runs one subcommand (args without the program name) and returns the exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, Usage)
		return 2
	}
	for _, a := range args[1:] {
		if a == "-h" || a == "-help" || a == "--help" {
			var w writeFlags
			fs := newWriteFlagSet(stdout, &w)
			if args[0] == "inspect" {
				fmt.Fprintln(stdout, "usage: em-imager inspect [--disk PATH|auto] [--image-size BYTES] [--allow-virtual] [--sysroot DIR]")
				return 0
			}
			fmt.Fprintln(stdout, "usage: em-imager write --image URL --sha256 HEX [flags]")
			fs.PrintDefaults()
			return 0
		}
	}
	switch args[0] {
	case "write":
		return emit(stdout, runWrite(ctx, args[1:], stderr))
	case "inspect":
		return emit(stdout, runInspect(args[1:], stderr))
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "em-imager %s (%s %s/%s, report schema v%d)\n", version.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH, report.Version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, Usage)
		return 0
	}
	fmt.Fprintf(stderr, "em-imager: unknown command %q\n\n%s", args[0], Usage)
	return 2
}

func emit(stdout io.Writer, r *report.Report) int {
	r.Version = report.Version
	r.Imager = version.Version
	if r.NICs == nil {
		r.NICs = []report.NIC{}
	}
	code := ""
	if r.Error != nil {
		code = r.Error.Code
		r.OK = false
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	fmt.Fprintf(stdout, "%s\n", b)
	return report.ExitCode(code)
}

func fail(r *report.Report, code, format string, args ...any) *report.Report {
	r.OK = false
	r.Error = &report.Error{Code: code, Message: fmt.Sprintf(format, args...)}
	return r
}

type writeFlags struct {
	image, sha, disk, format, progress, sysroot string
	imageSize                                   int64
	concurrency, retries                        int
	readback, allowVirtual, wipeOthers          bool
	connectTimeout, stallTimeout, timeout       time.Duration
}

func newWriteFlagSet(stderr io.Writer, w *writeFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("em-imager write", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&w.image, "image", "", "image URL (http, https, file:// or a local path); a presigned URL's query is never printed")
	fs.StringVar(&w.sha, "sha256", "", "expected SHA-256 of the raw (decompressed) image, 64 hex digits")
	fs.StringVar(&w.disk, "disk", "auto", "target disk: a block device or a link to one (/dev/disk/by-id/...), an existing regular file, or auto")
	fs.BoolVar(&w.allowVirtual, "allow-virtual", false, "let --disk name a loop, nbd, dm, md or RAM device (auto never picks one)")
	fs.BoolVar(&w.wipeOthers, "wipe-other-disks", false, "once the image is verified, erase the partition tables and filesystem/RAID/LVM signatures of every other disk (not virtual, removable, USB or read-only); a busy one fails the run before anything is written")
	fs.StringVar(&w.format, "format", "auto", "auto (from the magic bytes), xz, zstd, gzip or raw")
	fs.StringVar(&w.progress, "progress", "human", "progress on stderr: human (a line per second), json (report.Progress lines) or none")
	fs.StringVar(&w.sysroot, "sysroot", "", "read /sys, /dev and /proc under DIR (tests, simulated hosts; env "+hostroot.EnvVar+")")
	fs.Int64Var(&w.imageSize, "image-size", 0, "raw image size in bytes (the manifest's): --disk auto picks the smallest disk that fits it, as inspect --image-size does; smaller disks are refused before downloading")
	fs.IntVar(&w.concurrency, "concurrency", 0, "decoder workers (0 = number of CPUs)")
	fs.IntVar(&w.retries, "retries", 8, "download attempts after an error before giving up (each resume after progress starts again)")
	fs.BoolVar(&w.readback, "verify-readback", false, "after writing, read the image back from the disk with O_DIRECT and compare")
	fs.DurationVar(&w.connectTimeout, "connect-timeout", 15*time.Second, "TCP connect + TLS handshake timeout, per attempt")
	fs.DurationVar(&w.stallTimeout, "stall-timeout", 30*time.Second, "longest wait for the next byte before reconnecting")
	fs.DurationVar(&w.timeout, "timeout", 0, "give up the whole download after this long (0 = no limit)")
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	// Errors go into the report, not onto stderr (which carries progress).
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

func runInspect(args []string, stderr io.Writer) *report.Report {
	r := &report.Report{Command: "inspect"}
	fs := flag.NewFlagSet("em-imager inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	disk := fs.String("disk", "auto", "disk to describe, or auto for the one write --disk auto would pick")
	sysroot := fs.String("sysroot", "", "read /sys, /dev and /proc under DIR (env "+hostroot.EnvVar+")")
	imageSize := fs.Int64("image-size", 0, "raw image size, as given to write: the same disk is chosen")
	allowVirtual := fs.Bool("allow-virtual", false, "as write --allow-virtual")
	if err := parseFlags(fs, args); err != nil {
		return fail(r, report.CodeInvalidArgument, "%v", err)
	}
	if *imageSize < 0 {
		return fail(r, report.CodeInvalidArgument, "--image-size must not be negative")
	}
	root := hostroot.Resolve(*sysroot)
	r.NICs, r.Warnings = nics(root, r.Warnings)
	c, err := blockdev.Choose(root, blockdev.Request{Disk: *disk, ImageSize: *imageSize, AllowVirtual: *allowVirtual})
	r.Disk, r.RejectedDisks = c.Disk, c.Rejected
	hostDisks(root, r)
	if err != nil && *disk != "auto" {
		return fail(r, diskCode(err), "%v", err)
	}
	if err != nil {
		// inspect reports what it found; an empty choice is not a failure.
		r.Warnings = append(r.Warnings, err.Error())
	}
	r.OK = true
	return r
}

func nics(root hostroot.Root, warnings []string) ([]report.NIC, []string) {
	n, err := hwinfo.NICs(root)
	if err != nil {
		return []report.NIC{}, append(warnings, "listing network interfaces: "+err.Error())
	}
	return n, warnings
}

func diskCode(err error) string {
	switch {
	case errors.Is(err, blockdev.ErrBusy), errors.Is(err, diskwrite.ErrBusy):
		return report.CodeDiskBusy
	case errors.Is(err, blockdev.ErrTooSmall), errors.Is(err, diskwrite.ErrTooSmall):
		return report.CodeDiskTooSmall
	case errors.Is(err, blockdev.ErrUnsuitable), errors.Is(err, diskwrite.ErrSectorSize):
		return report.CodeDiskUnsuitable
	case errors.Is(err, blockdev.ErrNotFound):
		return report.CodeDiskNotFound
	}
	return ""
}

// errorCode maps any error of the write pipeline to its report code.
func errorCode(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		return report.CodeInterrupted
	}
	if c := diskCode(err); c != "" {
		return c
	}
	switch {
	case errors.Is(err, source.ErrRejected):
		return report.CodeSourceRejected
	case errors.Is(err, source.ErrChanged):
		return report.CodeSourceChanged
	case errors.Is(err, source.ErrStalled), errors.Is(err, source.ErrTimeout):
		return report.CodeStalled
	case errors.Is(err, source.ErrUnreachable):
		return report.CodeSourceUnreachable
	case errors.Is(err, diskwrite.ErrDigestMismatch):
		return report.CodeDigestMismatch
	case decompress.ReportCode(err) != "":
		return decompress.ReportCode(err)
	case errors.Is(err, diskwrite.ErrReadback):
		return report.CodeVerifyFailed
	case errors.Is(err, diskwrite.ErrWrite):
		return report.CodeWriteFailed
	}
	return report.CodeInternal
}

func runWrite(ctx context.Context, args []string, stderr io.Writer) *report.Report {
	started := time.Now()
	r := &report.Report{Command: "write", Timings: &report.Timings{StartedAt: started.UTC()}}
	var w writeFlags
	fs := newWriteFlagSet(stderr, &w)
	if err := parseFlags(fs, args); err != nil {
		return fail(r, report.CodeInvalidArgument, "%v", err)
	}
	w.sha = strings.ToLower(strings.TrimSpace(w.sha))
	switch {
	case w.image == "":
		return fail(r, report.CodeInvalidArgument, "--image is required (the URL of the image)")
	case w.sha == "":
		return fail(r, report.CodeInvalidArgument, "--sha256 is required (the SHA-256 of the raw image)")
	}
	if b, err := hex.DecodeString(w.sha); err != nil || len(b) != 32 {
		return fail(r, report.CodeInvalidArgument, "--sha256 must be 64 hex digits, got %d characters", len(w.sha))
	}
	wantFormat, err := decompress.ParseFormat(w.format)
	if err != nil {
		return fail(r, report.CodeInvalidArgument, "--format: %v", err)
	}
	if w.progress != "human" && w.progress != "json" && w.progress != "none" {
		return fail(r, report.CodeInvalidArgument, "--progress must be human, json or none, got %q", w.progress)
	}
	if w.imageSize < 0 {
		return fail(r, report.CodeInvalidArgument, "--image-size must not be negative")
	}
	if w.concurrency <= 0 {
		w.concurrency = runtime.GOMAXPROCS(0)
	}
	r.Image = &report.Image{URL: source.RedactURL(w.image), ExpectedSHA256: w.sha, DecodeConcurrency: w.concurrency}
	prog := newProgress(stderr, w.progress, started)
	root := hostroot.Resolve(w.sysroot)
	r.NICs, r.Warnings = nics(root, r.Warnings)

	// The disk is chosen and checked before anything is downloaded, from
	// what is known up front (the manifest's size through --image-size),
	// with the rule inspect uses: how the image is served changes nothing.
	choice, err := blockdev.Choose(root, blockdev.Request{Disk: w.disk, ImageSize: w.imageSize, AllowVirtual: w.allowVirtual})
	r.Disk, r.RejectedDisks = choice.Disk, choice.Rejected
	hostDisks(root, r)
	if err != nil {
		return finish(r, prog, started, fail(r, diskCode(err), "%v; nothing was written to any disk", err))
	}
	disk := choice.Disk
	var others []blockdev.Info
	if w.wipeOthers {
		if others, err = wipePlan(root, disk, r); err != nil {
			return finish(r, prog, started, fail(r, wipeCode(ctx, err), "--wipe-other-disks: %v; nothing was written to any disk", err))
		}
	}

	srcCtx, srcCancel := context.WithCancel(ctx)
	defer srcCancel()
	src, err := source.Open(srcCtx, w.image, source.Options{
		ConnectTimeout: w.connectTimeout,
		StallTimeout:   w.stallTimeout,
		HeaderTimeout:  w.stallTimeout,
		Timeout:        w.timeout,
		MaxAttempts:    w.retries + 1,
		Log:            prog.message,
	})
	if err != nil {
		return finish(r, prog, started, fail(r, errorCode(ctx, err), "%v", err))
	}
	defer src.Close()
	prog.src.Store(src)

	br := bufio.NewReaderSize(src, 1<<20)
	header, err := br.Peek(64)
	if err != nil && !errors.Is(err, io.EOF) {
		return finish(r, prog, started, fail(r, errorCode(ctx, err), "reading the image: %v", err))
	}
	if len(header) == 0 {
		return finish(r, prog, started, fail(r, report.CodeTruncatedInput, "the image is empty"))
	}
	format := decompress.Detect(header)
	r.Image.Format = string(format)
	if wantFormat != "" && wantFormat != format {
		return finish(r, prog, started, fail(r, report.CodeUnsupportedFormat, "--format %s, but the data is %s (detected from its first bytes)", wantFormat, format))
	}
	// The compressed file's metadata may tell the raw size (the xz index,
	// a zstd frame header, a raw file's length): only to refuse a disk too
	// small before writing, never to choose one.
	rawSize := w.imageSize
	if rawSize <= 0 {
		if n, err := decompress.RawSize(format, header, src, src.Size()); err == nil {
			rawSize = n
		}
	}
	if rawSize > disk.SizeBytes {
		return finish(r, prog, started, fail(r, report.CodeDiskTooSmall, "the image has %d bytes, %s only %d; nothing was written to the disk", rawSize, disk.Path, disk.SizeBytes))
	}
	dec, err := decompress.NewReader(br, format, w.concurrency)
	if err != nil {
		return finish(r, prog, started, fail(r, errorCode(ctx, err), "%v", err))
	}
	defer dec.Close()

	counters := &diskwrite.Counters{}
	prog.counters.Store(counters)
	prog.start()
	res, err := diskwrite.Write(ctx, dec, diskwrite.Options{
		Path:           choice.OpenPath,
		Capacity:       disk.SizeBytes,
		SectorSize:     disk.LogicalSectorSize,
		ImageSize:      rawSize,
		ExpectedSHA256: w.sha,
		Readback:       w.readback,
		Counters:       counters,
		Log: func(format string, args ...any) {
			msg := fmt.Sprintf(format, args...)
			r.Warnings = append(r.Warnings, msg)
			prog.message("%s", msg)
		},
		Abort: srcCancel,
	})
	r.Image.CompressedBytes = src.Offset()
	r.Image.Resumes = src.Resumes()
	r.Image.RawBytes = res.RawBytes
	r.Image.RawSHA256 = res.SHA256
	r.Image.ZeroBytesSkipped = res.ZeroBytesSkipped
	r.Image.Verified = res.Verified
	r.Image.ReadbackVerified = res.ReadbackVerified
	r.Image.DirectIO = res.Direct
	r.Timings.WriteSeconds = res.WriteSeconds
	r.Timings.SyncSeconds = res.SyncSeconds
	if err != nil {
		msg := err.Error()
		switch {
		case res.Wiped:
			msg += "; the disk's partition table areas were wiped, it will not boot"
		case !res.Written:
			msg += "; nothing was written to the disk"
		}
		return finish(r, prog, started, fail(r, errorCode(ctx, err), "%s", msg))
	}
	if err := wipeOthers(ctx, root, others, r); err != nil {
		return finish(r, prog, started, fail(r, wipeCode(ctx, err), "the image is written and verified on %s, but %v", disk.Path, err))
	}
	r.OK = true
	return finish(r, prog, started, r)
}

func finish(r *report.Report, prog *progress, started time.Time, _ *report.Report) *report.Report {
	total := time.Since(started).Seconds()
	r.Timings.TotalSeconds = total
	if r.Image != nil && total > 0 {
		r.Timings.RawMBps = float64(r.Image.RawBytes) / 1e6 / total
		r.Timings.DownloadMBps = float64(r.Image.CompressedBytes) / 1e6 / total
	}
	prog.stop(r)
	return r
}

// progress prints a line per second on stderr while writing.
type progress struct {
	w       io.Writer
	mode    string
	started time.Time
	// Set as the run goes on; read by the ticker and by messages that the
	// source and the decoder's goroutines log.
	src      atomic.Pointer[source.Reader]
	counters atomic.Pointer[diskwrite.Counters]
	mu       sync.Mutex
	done     chan struct{}
	wg       sync.WaitGroup
}

func newProgress(w io.Writer, mode string, started time.Time) *progress {
	return &progress{w: w, mode: mode, started: started}
}

func (p *progress) start() {
	if p.mode == "none" {
		return
	}
	p.done = make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.line("")
			case <-p.done:
				return
			}
		}
	}()
}

func (p *progress) stop(r *report.Report) {
	if p.done != nil {
		close(p.done)
		p.wg.Wait()
		p.done = nil
	}
	if p.mode == "none" {
		return
	}
	phase := "done"
	if r.Error != nil {
		phase = "failed"
	}
	p.line(phase)
}

func (p *progress) snapshot(phase string) report.Progress {
	el := time.Since(p.started).Seconds()
	pr := report.Progress{Phase: "download", ElapsedSeconds: el}
	if src := p.src.Load(); src != nil {
		pr.BytesIn = src.Offset()
		if s := src.Size(); s > 0 {
			pr.TotalIn = s
		}
	}
	if c := p.counters.Load(); c != nil {
		pr.BytesOut = c.Out.Load()
		if ph, ok := c.Phase.Load().(string); ok {
			pr.Phase = ph
		}
	}
	if phase != "" {
		pr.Phase = phase
	}
	if el > 0 {
		pr.RawMBps = float64(pr.BytesOut) / 1e6 / el
	}
	if pr.TotalIn > 0 && pr.BytesIn > 0 && pr.BytesIn < pr.TotalIn {
		pr.ETASeconds = el * float64(pr.TotalIn-pr.BytesIn) / float64(pr.BytesIn)
	}
	return pr
}

func (p *progress) line(phase string) {
	pr := p.snapshot(phase)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == "json" {
		b, _ := json.Marshal(pr)
		fmt.Fprintf(p.w, "%s\n", b)
		return
	}
	in := fmt.Sprintf("%.1f MB in", float64(pr.BytesIn)/1e6)
	if pr.TotalIn > 0 {
		in = fmt.Sprintf("%.1f/%.1f MB in (%.0f%%)", float64(pr.BytesIn)/1e6, float64(pr.TotalIn)/1e6, 100*float64(pr.BytesIn)/float64(pr.TotalIn))
	}
	eta := ""
	if pr.ETASeconds > 0 {
		eta = fmt.Sprintf(", ETA %.0fs", pr.ETASeconds)
	}
	fmt.Fprintf(p.w, "em-imager: %-8s %s, %.1f MB written, %.1f MB/s, %.0fs elapsed%s\n", pr.Phase, in, float64(pr.BytesOut)/1e6, pr.RawMBps, pr.ElapsedSeconds, eta)
}

// message reports a warning or retry notice in the progress stream's format.
func (p *progress) message(format string, args ...any) {
	if p.mode == "none" {
		return
	}
	msg := fmt.Sprintf(format, args...)
	pr := p.snapshot("")
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == "json" {
		pr.Message = msg
		b, _ := json.Marshal(pr)
		fmt.Fprintf(p.w, "%s\n", b)
		return
	}
	fmt.Fprintf(p.w, "em-imager: %s\n", msg)
}
