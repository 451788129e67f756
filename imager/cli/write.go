package cli

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/blockdev"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/decompress"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/diskprobe"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/diskwrite"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/source"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/terminal"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/units"
)

type writeFlags struct {
	imageFlags
	disk, progress, sysroot string
	concurrency, retries    int
	readback, allowVirtual  bool
	dryRun, yes, wipeOthers bool
	stallTimeout, timeout   time.Duration
}

func newWriteFlagSet(w *writeFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("em-imager write", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&w.manifest, "manifest", "", "the image's manifest (em-imager publish's manifest.json): https URL, http URL with --manifest-sha256, or a local file; gives the image URL, format, raw size and raw SHA-256")
	fs.StringVar(&w.manifestSHA, "manifest-sha256", "", "SHA-256 of the manifest file itself: required for a plain http --manifest, checked whenever given")
	fs.StringVar(&w.image, "image", "", "image URL (http, https, file:// or a local path); a presigned URL's query is never printed. With --manifest: one of its files, fetched from this URL")
	fs.StringVar(&w.sha, "sha256", "", "expected SHA-256 of the raw (decompressed) image, 64 hex digits (not needed with --manifest)")
	fs.StringVar(&w.disk, "disk", "auto", "target disk: a block device or a link to one (/dev/disk/by-id/...), an existing regular file, or auto")
	fs.BoolVar(&w.allowVirtual, "allow-virtual", false, "let --disk name a loop, nbd, dm, md or RAM device (auto never picks one)")
	fs.BoolVar(&w.wipeOthers, "wipe-other-disks", false, "once the image is verified, erase the partition tables and filesystem/RAID/LVM signatures of every other disk (not virtual, removable, USB or read-only); a busy one fails the run before anything is written")
	fs.BoolVar(&w.dryRun, "dry-run", false, "make every check up to the first byte (disk, format, sector size, size: the image's first MiB is fetched), say what would happen, write nothing; exit status 0 when the real run would start")
	fs.BoolVar(&w.yes, "yes", false, "do not ask before writing (on a terminal, write asks, naming the disk and what it holds)")
	fs.BoolVar(&w.yes, "y", false, "short for --yes")
	fs.StringVar(&w.format, "format", "auto", "auto (from the magic bytes), xz, zstd, gzip or raw; with --manifest: which of its files (auto: zstd, else xz)")
	fs.StringVar(&w.progress, "progress", progressHuman, "progress on stderr: human (on a terminal one line redrawn in place, else a line per second), json (report.Progress lines) or none")
	fs.StringVar(&w.sysroot, "sysroot", "", "read /sys, /dev and /proc under DIR (tests, simulated hosts; env "+hostroot.EnvVar+")")
	fs.Int64Var(&w.imageSize, "image-size", 0, "raw image size in bytes (the manifest's; implied by --manifest): --disk auto picks the smallest disk that fits it, as inspect does; smaller disks are refused before downloading")
	fs.IntVar(&w.concurrency, "concurrency", 0, "decoder workers (0 = number of CPUs)")
	fs.IntVar(&w.retries, "retries", 8, "download attempts after an error before giving up (each resume after progress starts again)")
	fs.BoolVar(&w.readback, "verify-readback", false, "after writing, read the image back from the disk with O_DIRECT and compare")
	fs.DurationVar(&w.connectTimeout, "connect-timeout", 15*time.Second, "TCP connect + TLS handshake timeout, per attempt")
	fs.DurationVar(&w.stallTimeout, "stall-timeout", 30*time.Second, "longest wait for the next byte before reconnecting")
	fs.DurationVar(&w.timeout, "timeout", 0, "give up the whole download after this long (0 = no limit)")
	return fs
}

// streams are the process's standard streams, and whether a person is at
// them.
type streams struct {
	stdin  io.Reader
	stderr io.Writer
	// stderrTTY: stderr is a terminal (status line, inspect's tables).
	stderrTTY bool
	// interactive: stdin and stderr are terminals, so write may ask.
	interactive bool
}

// errNoImage marks a write given no image (bare `write`) with human
// progress: Main prints the usage on stderr.
var errNoImage = errors.New("no image")

func runWrite(ctx context.Context, args []string, std streams) (*report.Report, error) {
	started := time.Now()
	r := &report.Report{Command: "write", Timings: &report.Timings{StartedAt: started.UTC()}}
	var w writeFlags
	if stop, err := parseWriteFlags(&w, args, r); stop {
		return r, err
	}
	prog := newProgress(std.stderr, w.progress, std.stderrTTY, started)
	// A refused dry run is a dry run too: its report says so, and it
	// prints no progress line (nothing was to be written).
	r.DryRun = w.dryRun
	spec, ferr := resolveImage(ctx, w.imageFlags, true)
	if ferr != nil {
		r.Error = ferr
		return finish(r, prog, started), nil
	}
	spec.describe(r, w.concurrency)
	root := hostroot.Resolve(w.sysroot)
	r.NICs, r.Warnings = nics(root, r.Warnings)
	choice, others, ok := chooseDisks(ctx, root, &w, spec, r)
	if !ok || !confirmWrite(ctx, std, &w, &spec, choice, r, prog) {
		return finish(r, prog, started), nil
	}
	stream(ctx, &w, &spec, choice, r, prog)
	if r.OK {
		if err := wipeOthers(ctx, root, others, r); err != nil {
			fail(r, wipeCode(ctx, err), "the image is written and verified on %s, but %v", choice.Disk.Path, err)
		}
	}
	return finish(r, prog, started), nil
}

// parseWriteFlags reads write's flags into w; stop says the run ends here
// with r (refused), and err is what the process exits with.
func parseWriteFlags(w *writeFlags, args []string, r *report.Report) (stop bool, err error) {
	if err := parseFlags(newWriteFlagSet(w), args); err != nil {
		fail(r, report.CodeInvalidArgument, "%v", err)
		return true, nil
	}
	if w.image == "" && w.manifest == "" {
		fail(r, report.CodeInvalidArgument, "--image or --manifest is required (the image's URL, or the manifest em-imager publish wrote)")
		if w.progress == progressHuman { // not a program reading stderr
			return true, errNoImage
		}
		return true, nil
	}
	if w.progress != progressHuman && w.progress != progressJSON && w.progress != progressNone {
		fail(r, report.CodeInvalidArgument, "--progress must be human, json or none, got %q", w.progress)
		return true, nil
	}
	if w.concurrency <= 0 {
		w.concurrency = runtime.GOMAXPROCS(0)
	}
	return false, nil
}

// chooseDisks picks the disk to write and, with --wipe-other-disks, the
// others to wipe; ok is false when r records why nothing can be written.
// The disk is chosen and checked before anything is downloaded, from what
// is known up front (the manifest's size, --image-size), with the rule
// inspect uses: how the image is served changes nothing. The other disks
// are checked before anything is written too (a dry run refuses a busy one
// as the real run would).
func chooseDisks(ctx context.Context, root hostroot.Root, w *writeFlags, spec imageSpec, r *report.Report) (blockdev.Choice, []blockdev.Info, bool) {
	choice, err := blockdev.Choose(root, blockdev.Request{Disk: w.disk, ImageSize: spec.size, AllowVirtual: w.allowVirtual})
	r.Disk, r.RejectedDisks = choice.Disk, choice.Rejected
	hostDisks(root, r)
	if err != nil {
		fail(r, diskCode(err), "%v; nothing was written to any disk", err)
		return choice, nil, false
	}
	if ss := spec.sectorSize; ss > 0 && choice.Disk.Transport != "file" && ss != choice.Disk.LogicalSectorSize {
		fail(r, report.CodeDiskUnsuitable, "%s: the manifest's image is laid out for %d-byte sectors, the disk has %d-byte logical sectors; nothing was written to the disk", diskwrite.ErrSectorSize, ss, choice.Disk.LogicalSectorSize)
		return choice, nil, false
	}
	if !w.wipeOthers {
		return choice, nil, true
	}
	others, err := wipePlan(root, choice.Disk, r)
	if err != nil {
		fail(r, wipeCode(ctx, err), "--wipe-other-disks: %v; nothing was written to any disk", err)
		return choice, nil, false
	}
	return choice, others, true
}

// confirmWrite prints the dry run's or the question's preflight and asks
// on a terminal; it says whether to write. A dry run ends here, OK.
func confirmWrite(ctx context.Context, std streams, w *writeFlags, spec *imageSpec, choice blockdev.Choice, r *report.Report, prog *progress) bool {
	ask := std.interactive && !w.yes && !w.dryRun
	if !w.dryRun && !ask {
		return true
	}
	p, perr := preflight(ctx, w, spec, choice, r, prog)
	if perr != nil {
		r.Error = perr
		return false
	}
	prog.say("%s", p)
	if w.dryRun {
		prog.say("Dry run: nothing was written. The real run would start (exit status 0).")
		r.OK = true
		return false
	}
	yes, err := terminal.Confirm(ctx, std.stdin, std.stderr, fmt.Sprintf("Erase %s and write this image onto it? [y/N] ", choice.Disk.Path))
	switch {
	case err != nil:
		fail(r, report.CodeInterrupted, "interrupted at the question; nothing was written to the disk")
		return false
	case !yes:
		fail(r, report.CodeNotConfirmed, "%s was not confirmed (answer y to write, or pass --yes); nothing was written to the disk", choice.Disk.Path)
		return false
	}
	return true
}

// opened is the image, downloading and decoding.
type opened struct {
	src     *source.Reader
	dec     io.ReadCloser
	rawSize int64 // known raw size, 0 when not known yet
	cancel  context.CancelFunc
}

func (o *opened) Close() {
	o.dec.Close()
	o.src.Close()
	o.cancel()
}

// open starts the download and the decoder, and checks what the
// compressed file's first bytes and metadata tell (format, raw size)
// against the flags, the manifest and the disk.
func open(ctx context.Context, w *writeFlags, spec *imageSpec, disk *report.Disk, r *report.Report, prog *progress, concurrency int) (*opened, *report.Error) {
	fail := func(code, format string, args ...any) (*opened, *report.Error) {
		return nil, &report.Error{Code: code, Message: fmt.Sprintf(format, args...)}
	}
	srcCtx, srcCancel := context.WithCancel(ctx)
	src, err := source.Open(srcCtx, spec.url, source.Options{
		ConnectTimeout: w.connectTimeout,
		StallTimeout:   w.stallTimeout,
		HeaderTimeout:  w.stallTimeout,
		Timeout:        w.timeout,
		MaxAttempts:    w.retries + 1,
		Log:            lineLogger(func(line string) { prog.message("%s", line) }),
	})
	if err != nil {
		srcCancel()
		return fail(errorCode(ctx, err), "%v", err)
	}
	o := &opened{src: src, cancel: srcCancel}
	br := bufio.NewReaderSize(src, 1<<20)
	header, err := br.Peek(64)
	bad := func(code, format string, args ...any) (*opened, *report.Error) {
		src.Close()
		srcCancel()
		return fail(code, format, args...)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return bad(errorCode(ctx, err), "reading the image: %v", err)
	}
	if len(header) == 0 {
		return bad(report.CodeTruncatedInput, "the image is empty")
	}
	format := decompress.Detect(header)
	r.Image.Format = string(format)
	if spec.format != "" && spec.format != format {
		return bad(report.CodeUnsupportedFormat, "--format %s, but the data is %s (detected from its first bytes)", spec.format, format)
	}
	if e := spec.matchFile(format, src.Size()); e != nil {
		src.Close()
		srcCancel()
		return nil, e
	}
	// The compressed file's metadata may tell the raw size (the xz index,
	// a zstd frame header, a raw file's length): only to refuse a disk too
	// small before writing, never to choose one.
	o.rawSize = spec.size
	if o.rawSize <= 0 {
		if n, err := decompress.RawSize(format, header, src, src.Size()); err == nil {
			o.rawSize = n
		}
	}
	if o.rawSize > disk.SizeBytes {
		return bad(report.CodeDiskTooSmall, "the image has %d bytes, %s only %d; nothing was written to the disk", o.rawSize, disk.Path, disk.SizeBytes)
	}
	o.dec, err = decompress.NewReader(br, format, concurrency)
	if err != nil {
		return bad(errorCode(ctx, err), "%v", err)
	}
	return o, nil
}

func diskOptions(w *writeFlags, spec *imageSpec, choice blockdev.Choice, rawSize int64) diskwrite.Options {
	return diskwrite.Options{
		Path:           choice.OpenPath,
		Capacity:       choice.Disk.SizeBytes,
		SectorSize:     choice.Disk.LogicalSectorSize,
		ImageSize:      rawSize,
		ExpectedSHA256: spec.sha,
		Readback:       w.readback,
	}
}

// preflight makes every check of a real run up to its first byte (the
// disk's exclusive open, the image's first MiB against the device's own
// size and sector size) and returns what the run would do, in words.
func preflight(ctx context.Context, w *writeFlags, spec *imageSpec, choice blockdev.Choice, r *report.Report, prog *progress) (string, *report.Error) {
	prog.say("em-imager: checking %s and the image's first MiB…", choice.Disk.Path)
	// One decoder: only the first MiB is wanted.
	o, e := open(ctx, w, spec, choice.Disk, r, prog, 1)
	if e != nil {
		return "", e
	}
	defer o.Close()
	r.Image.CompressedBytes = max(o.src.Size(), 0)
	r.Image.RawBytes = o.rawSize
	head := make([]byte, diskwrite.HeadSize)
	n, err := io.ReadFull(o.dec, head)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return "", &report.Error{Code: errorCode(ctx, err), Message: fmt.Sprintf("reading the image's first MiB: %v; nothing was written to the disk", err)}
	}
	target, needs, err := diskwrite.Check(head[:n], diskOptions(w, spec, choice, o.rawSize))
	if err != nil {
		return "", &report.Error{Code: errorCode(ctx, err), Message: err.Error() + "; nothing was written to the disk"}
	}
	return plan(spec, r, choice, target, needs), nil
}

// plan says what the run will do, for the dry run and the question.
func plan(spec *imageSpec, r *report.Report, choice blockdev.Choice, t diskwrite.Target, n diskwrite.Needs) string {
	d := choice.Disk
	img := r.Image
	s := "Image  " + img.URL + "\n"
	if spec.fetched != nil {
		m := spec.fetched.Manifest
		s += fmt.Sprintf("       Talos %s (%s, schematic %.12s…), from %s\n", m.TalosVersion, m.Arch, m.SchematicID, spec.fetched.Location)
	}
	in := img.Format
	if img.CompressedBytes > 0 {
		in += ", " + units.Bytes(img.CompressedBytes)
	}
	raw := "raw size known once written"
	if img.RawBytes > 0 {
		raw = fmt.Sprintf("raw %s (%d bytes)", units.Bytes(img.RawBytes), img.RawBytes)
	}
	s += fmt.Sprintf("       %s; %s, SHA-256 %s\n", in, raw, img.ExpectedSHA256)
	s += fmt.Sprintf("Disk   %s\n", diskLine(d))
	s += fmt.Sprintf("       chosen: %s\n", d.Reason)
	s += fmt.Sprintf("       holds now: %s\n", diskHolds(choice.OpenPath, t.SectorSize))
	layout := "no GPT in the image's first MiB"
	if n.SectorSize > 0 {
		layout = fmt.Sprintf("the image's GPT is for %d-byte sectors", n.SectorSize)
	}
	s += fmt.Sprintf("Checks passed: the disk opens exclusively; %s, the disk has %d-byte sectors; the image needs %s of the disk's %s\n",
		layout, t.SectorSize, units.Bytes(n.Bytes), units.Bytes(t.Capacity))
	s += fmt.Sprintf("Writing erases everything on %s.", d.Path)
	return s
}

// diskLine: /dev/nvme0n1, SAMSUNG MZQL21T9HCJR-00A07, serial S64GNE0R123456, 1.92 TB, nvme SSD, 512-byte sectors
func diskLine(d *report.Disk) string {
	s := d.Path
	if d.Model != "" {
		s += ", " + d.Model
	}
	if d.Serial != "" {
		s += ", serial " + d.Serial
	}
	s += ", " + units.Bytes(d.SizeBytes)
	if d.Transport != "" && d.Transport != "file" {
		s += ", " + d.Transport + " " + media(d)
	}
	return s + fmt.Sprintf(", %d-byte sectors", d.LogicalSectorSize)
}

func media(d *report.Disk) string {
	if d.Rotational {
		return "HDD"
	}
	return "SSD"
}

// diskHolds says what is on the disk now, or why that is unknown.
func diskHolds(path string, sectorSize int) string {
	c, err := diskprobe.Probe(path, sectorSize)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return c.String()
}

// stream is the real run: download, decode and write, the disk's first MiB
// last.
func stream(ctx context.Context, w *writeFlags, spec *imageSpec, choice blockdev.Choice, r *report.Report, prog *progress) {
	o, e := open(ctx, w, spec, choice.Disk, r, prog, w.concurrency)
	if e != nil {
		r.Error = e
		return
	}
	defer o.Close()
	prog.src.Store(o.src)
	counters := &diskwrite.Counters{}
	prog.counters.Store(counters)
	prog.start()
	opts := diskOptions(w, spec, choice, o.rawSize)
	opts.Counters = counters
	opts.Log = lineLogger(func(line string) {
		r.Warnings = append(r.Warnings, line)
		prog.message("%s", line)
	})
	opts.Abort = o.cancel
	res, err := diskwrite.Write(ctx, o.dec, opts)
	r.Image.CompressedBytes = o.src.Offset()
	r.Image.Resumes = o.src.Resumes()
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
		fail(r, errorCode(ctx, err), "%s", msg)
		return
	}
	r.OK = true
}

func finish(r *report.Report, prog *progress, started time.Time) *report.Report {
	total := time.Since(started).Seconds()
	r.Timings.TotalSeconds = total
	if r.Image != nil && total > 0 && !r.DryRun {
		r.Timings.RawMBps = float64(r.Image.RawBytes) / 1e6 / total
		r.Timings.DownloadMBps = float64(r.Image.CompressedBytes) / 1e6 / total
	}
	prog.stop(r)
	return r
}
