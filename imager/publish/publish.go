package publish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/manifest"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/version"
)

// ToolName is recorded in every manifest publish writes.
const ToolName = "em-imager publish"

// DefaultBlockSize is the raw bytes per independent xz block / zstd frame:
// small enough that a 2-core rescue system keeps both cores decoding, large
// enough that the compression ratio stays within a few percent of one block.
const DefaultBlockSize = 4 << 20

// Options is a publish run. Main fills it from flags and the environment.
type Options struct {
	Input        string   // local path or http(s) URL of a raw, .raw.xz or .raw.zst image
	SchematicID  string   // Image Factory schematic ID
	TalosVersion string   // v1.12.0
	Arch         string   // amd64 (default) or arm64
	Prefix       string   // key prefix in the bucket
	Formats      []string // canonical: xz, zstd
	Reencode     bool     // re-encode even an input already in a wanted format
	BlockSize    int      // raw bytes per independent block/frame
	SectorSize   int      // 512 or 4096
	Public       bool     // recorded in the manifest
	KernelArgs   string   // the image's kernel command line, when it cannot be read from the image (else checked against it)
	// MaintenanceAPI publishes an image whose kernel arguments lack (or may
	// lack) talos.config=metal-iso, for NodeClasses with configDelivery:
	// MaintenanceAPI; without it such an image is refused before any upload.
	MaintenanceAPI bool
	Force          bool // overwrite a manifest describing another raw image
	VerifyOutput   bool // decode every file publish wrote before uploading
	// ImagerBinaries are em-imager builds (one per architecture) uploaded
	// under <prefix>/tools/ for operators in a rescue shell (tools.go).
	ImagerBinaries []string
	XZEncoder      string // auto | external | go
	Concurrency    int    // 0: GOMAXPROCS
	WorkDir        string // where compressed files are staged ("" = os.TempDir)
	S3             S3Config
	HTTPClient     *http.Client // input downloads (nil: imager/source's client with timeouts)
	// Now stamps the manifest (tests); nil = time.Now.
	Now func() time.Time

	xzBin string
	tools []Tool
}

// Object is one uploaded (or already present) image file.
type Object struct {
	Key    string `json:"key"`
	Format string `json:"format"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Action string `json:"action"` // uploaded | skipped (already there with the same size and sha256)
}

// Summary is the JSON object publish prints on stdout.
type Summary struct {
	OK             bool          `json:"ok"`
	Error          *SummaryError `json:"error,omitempty"`
	Endpoint       string        `json:"endpoint,omitempty"`
	Bucket         string        `json:"bucket,omitempty"`
	InputFormat    string        `json:"inputFormat,omitempty"`
	InputSize      int64         `json:"inputSize,omitempty"`
	InputSHA256    string        `json:"inputSHA256,omitempty"`
	Objects        []Object      `json:"objects,omitempty"`
	ManifestKey    string        `json:"manifestKey,omitempty"`
	ManifestAction string        `json:"manifestAction,omitempty"` // uploaded | skipped
	// ManifestSHA256 is the digest of manifest.json as stored: what
	// em-imager --manifest-sha256 pins (plain http needs it).
	ManifestSHA256 string             `json:"manifestSha256,omitempty"`
	Manifest       *manifest.Manifest `json:"manifest,omitempty"`
	// Tools are the em-imager builds in the bucket, with their digests.
	Tools      []Tool `json:"tools,omitempty"`
	DurationMS int64  `json:"durationMs"`
}

// SummaryError is the failure in a Summary.
type SummaryError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Main runs `em-imager publish args...` and returns the exit status.
// Unless told otherwise, it uploads the running em-imager itself as the
// build for its architecture.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	self, err := os.Executable()
	if err != nil {
		self = ""
	}
	return mainEnv(ctx, args, stdout, stderr, os.Getenv, self)
}

// mainEnv is Main with the environment and the running binary's path
// (self, "" for none) given.
func mainEnv(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string, self string) int {
	start := time.Now()
	log := slog.New(slog.NewTextHandler(stderr, nil))
	sum := &Summary{}
	o, err := parseFlags(args, stderr, getenv, self)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil {
		sum.Endpoint, sum.Bucket = o.S3.Endpoint, o.S3.Bucket
		var s *Summary
		s, err = Run(ctx, o, log)
		if err != nil && ctx.Err() != nil {
			// Whatever failed, the cause is the interruption (SIGINT/SIGTERM).
			err = &Error{Code: CodeInterrupted, Err: fmt.Errorf("interrupted: %w", err)}
		}
		if s != nil {
			sum = s
		}
	}
	sum.DurationMS = time.Since(start).Milliseconds()
	if err != nil {
		sum.OK = false
		sum.Error = &SummaryError{Code: CodeOf(err), Message: err.Error()}
		log.Error("publish failed", "code", sum.Error.Code, "error", err)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if werr := enc.Encode(sum); werr != nil && err == nil {
		return 1
	}
	if err != nil {
		return ExitCode(CodeOf(err))
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer, getenv func(string) string, self string) (*Options, error) {
	fs := flag.NewFlagSet("em-imager publish", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: em-imager publish --input FILE|URL --schematic ID --talos-version vX.Y.Z [flags]

Verifies a Talos metal image (raw, .raw.xz or .raw.zst), computes its digests,
uploads the compressed files and then manifest.json to
  <prefix>/<schematic>/<talos-version>/metal-<arch>.raw.{zst,xz}
Publishing the same image again uploads nothing. em-imager itself goes to
  <prefix>/tools/em-imager-linux-<arch> and its .sha256 file
(this binary, or the builds --imager-binary names: make imager-binaries).

Environment: %s (http://host:port), %s, %s (default %s),
             %s, %s, %s (optional)

Flags:
`, EnvEndpoint, EnvBucket, EnvRegion, DefaultRegion, EnvAccessKey, EnvSecretKey, EnvSessionToken)
		fs.PrintDefaults()
	}
	o := &Options{}
	var formats, bucket, endpoint string
	var blockSize string
	fs.StringVar(&o.Input, "input", "", "image to publish: local path or http(s) URL (raw, .raw.xz or .raw.zst; format from magic bytes)")
	fs.StringVar(&o.SchematicID, "schematic", "", "Image Factory schematic ID (64 hex digits)")
	fs.StringVar(&o.TalosVersion, "talos-version", "", "Talos version, e.g. v1.12.0")
	fs.StringVar(&o.Arch, "arch", "amd64", "architecture: amd64 or arm64")
	fs.StringVar(&o.Prefix, "prefix", "", "key prefix in the bucket")
	fs.StringVar(&formats, "formats", "zst,xz", "compressed formats to publish, comma separated: zst, xz")
	fs.BoolVar(&o.Reencode, "reencode", false, "re-encode an input already in a wanted format (independent blocks for parallel decode)")
	fs.StringVar(&blockSize, "block-size", "4MiB", "raw bytes per independently decodable xz block / zstd frame (KiB/MiB suffix)")
	fs.IntVar(&o.SectorSize, "sector-size", 512, "logical sector size the image is built for: 512 or 4096")
	fs.StringVar(&o.KernelArgs, "kernel-args", "", "the image's kernel command line: recorded when it cannot be read from the image's UKI (GRUB-only images), else must match it")
	fs.BoolVar(&o.MaintenanceAPI, "maintenance-api", false, "publish an image without talos.config=metal-iso (or whose kernel arguments cannot be read): only for NodeClasses with configDelivery: MaintenanceAPI")
	fs.BoolVar(&o.Public, "public", false, "record in the manifest that the objects are anonymously readable (publish sets no bucket policy)")
	fs.BoolVar(&o.Force, "force", false, "replace a manifest that describes a different raw image at the same keys")
	fs.BoolVar(&o.VerifyOutput, "verify-output", true, "decode every file publish encoded and compare with the raw digest before uploading")
	fs.StringVar(&o.XZEncoder, "xz-encoder", "auto", "xz encoder: auto (xz binary if on PATH, else go), external, go")
	fs.IntVar(&o.Concurrency, "concurrency", 0, "encoder/decoder threads (0: all cores)")
	fs.StringVar(&o.WorkDir, "workdir", "", "directory for staged files (default: system temp dir)")
	fs.StringVar(&bucket, "bucket", "", "bucket (default $"+EnvBucket+")")
	fs.StringVar(&endpoint, "endpoint", "", "S3 endpoint URL (default $"+EnvEndpoint+")")
	fs.Func("imager-binary", "a static em-imager build `FILE` to upload under <prefix>/tools/ for its architecture (repeat for amd64 and arm64; default: this em-imager)", func(p string) error {
		o.ImagerBinaries = append(o.ImagerBinaries, p)
		return nil
	})
	noImager := fs.Bool("no-imager", false, "upload no em-imager build")
	if err := parseFlagSet(fs, args); err != nil {
		return nil, err
	}
	switch {
	case *noImager && len(o.ImagerBinaries) > 0:
		return nil, &Error{Code: CodeInvalidArgument, Err: errors.New("--no-imager and --imager-binary contradict each other")}
	case !*noImager && len(o.ImagerBinaries) == 0 && self != "":
		o.ImagerBinaries = []string{self}
	}
	o.S3 = S3ConfigFromEnv(getenv)
	if bucket != "" {
		o.S3.Bucket = bucket
	}
	if endpoint != "" {
		o.S3.Endpoint = endpoint
	}
	formatList, err := parseFormats(formats)
	if err != nil {
		return nil, err
	}
	o.Formats = formatList
	bs, err := parseSize(blockSize)
	if err != nil {
		return nil, &Error{Code: CodeInvalidArgument, Err: fmt.Errorf("--block-size: %w", err)}
	}
	o.BlockSize = bs
	return o, nil
}

// parseFormats reads --formats: normalised names, each once, in order.
func parseFormats(formats string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(formats, ",") {
		if strings.TrimSpace(f) == "" {
			continue
		}
		c, err := manifest.NormalizeFormat(f)
		if err != nil {
			return nil, &Error{Code: CodeInvalidArgument, Err: fmt.Errorf("--formats: %w", err)}
		}
		if !contains(out, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

func parseSize(s string) (int, error) {
	mult := 1
	t := strings.TrimSpace(s)
	switch {
	case strings.HasSuffix(t, "MiB"):
		mult, t = 1<<20, strings.TrimSuffix(t, "MiB")
	case strings.HasSuffix(t, "KiB"):
		mult, t = 1<<10, strings.TrimSuffix(t, "KiB")
	}
	var n int
	if _, err := fmt.Sscanf(t, "%d", &n); err != nil || fmt.Sprint(n) != t {
		return 0, fmt.Errorf("%q: want a number of bytes, optionally with KiB or MiB", s)
	}
	return n * mult, nil
}

func (o *Options) validate() error {
	var errs []error
	if o.Input == "" {
		errs = append(errs, errors.New("--input: required"))
	}
	l := o.layout()
	if err := l.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("--%s", flagFor(err.Error())))
	}
	errs = append(errs, o.encodingErrors()...)
	var err error
	if o.tools, err = checkImagerBinaries(o.ImagerBinaries); err != nil {
		errs = append(errs, err)
	}
	bin, err := findXZ(o.XZEncoder)
	if err != nil {
		errs = append(errs, err)
	}
	o.xzBin = bin
	if err := o.S3.validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return &Error{Code: CodeInvalidArgument, Err: errors.Join(errs...)}
	}
	return nil
}

// encodingErrors checks the flags that shape the encoding: formats, block
// and sector sizes, threads.
func (o *Options) encodingErrors() []error {
	var errs []error
	if len(o.Formats) == 0 {
		errs = append(errs, errors.New("--formats: empty: want zst, xz or both"))
	}
	if o.BlockSize < 64<<10 || o.BlockSize > 256<<20 {
		errs = append(errs, fmt.Errorf("--block-size: %d: want 64KiB..256MiB", o.BlockSize))
	}
	if o.SectorSize != 512 && o.SectorSize != 4096 {
		errs = append(errs, fmt.Errorf("--sector-size: %d: want 512 or 4096", o.SectorSize))
	}
	if o.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("--concurrency: %d: want >= 0", o.Concurrency))
	}
	return errs
}

// flagFor turns a manifest validation message ("schematicID: ...") into the
// flag's spelling ("schematic: ...").
func flagFor(msg string) string {
	for field, fl := range map[string]string{"schematicID:": "schematic:", "talosVersion:": "talos-version:", "arch:": "arch:", "prefix:": "prefix:"} {
		if strings.HasPrefix(msg, field) {
			return fl + strings.TrimPrefix(msg, field)
		}
	}
	return msg
}

func (o *Options) layout() manifest.Layout {
	return manifest.Layout{Prefix: o.Prefix, SchematicID: o.SchematicID, TalosVersion: o.TalosVersion, Arch: o.Arch}
}

// Run verifies and encodes the input, uploads what is missing and then the
// manifest. The Summary is non-nil whenever something was learned.
func Run(ctx context.Context, o *Options, log *slog.Logger) (*Summary, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	sum := &Summary{Endpoint: o.S3.Endpoint, Bucket: o.S3.Bucket}
	layout := o.layout()
	sum.ManifestKey = layout.ManifestKey()

	client, err := o.S3.newClient()
	if err != nil {
		return sum, &Error{Code: CodeInvalidArgument, Err: err}
	}
	// Check the bucket and the credentials before spending minutes encoding.
	existing, existingBytes, err := readManifest(ctx, client, o.S3.Bucket, sum.ManifestKey)
	if err != nil {
		return sum, err
	}

	workdir, err := os.MkdirTemp(o.WorkDir, "em-imager-publish-")
	if err != nil {
		return sum, &Error{Code: CodeInternal, Err: fmt.Errorf("work dir: %w", err)}
	}
	defer os.RemoveAll(workdir)

	p, err := prepare(ctx, o, log, workdir)
	if err != nil {
		return sum, err
	}
	sum.InputFormat, sum.InputSize, sum.InputSHA256 = p.inputFormat, p.inputSize, p.inputSHA256
	if err := checkConflict(existing, p.raw, o.Force, sum.ManifestKey); err != nil {
		return sum, err
	}
	pub := publisher{ctx: ctx, client: client, o: o, log: log, layout: layout, existing: existing, raw: p.raw}
	m := newManifest(o, p)
	if err := pub.uploadFiles(p.files, m, sum); err != nil {
		return sum, err
	}
	if err := pub.uploadManifest(m, existingBytes, sum); err != nil {
		return sum, err
	}
	if sum.Tools, err = putTools(ctx, client, o.S3.Bucket, o.Prefix, o.tools, log); err != nil {
		return sum, err
	}
	sum.OK = true
	return sum, nil
}

// newManifest describes the prepared image; its files are added as they are uploaded.
func newManifest(o *Options, p *prepared) *manifest.Manifest {
	return &manifest.Manifest{
		SchemaVersion: manifest.SchemaVersion,
		SchematicID:   o.SchematicID,
		TalosVersion:  o.TalosVersion,
		Arch:          o.Arch,
		SectorSize:    o.SectorSize,
		Raw:           p.raw,
		Boot:          p.boot,
		Public:        o.Public,
		Tool:          manifest.Tool{Name: ToolName, Version: version.Version},
		Created:       o.Now().UTC().Truncate(time.Second),
	}
}

// checkConflict refuses, without --force, to replace a manifest that describes another raw image.
func checkConflict(existing *manifest.Manifest, raw manifest.Digest, force bool, key string) error {
	if existing == nil || existing.Raw == raw || force {
		return nil
	}
	return &Error{Code: CodeConflict, Err: fmt.Errorf("%s already describes a different raw image (sha256 %s, %d bytes; this input is %s, %d bytes): refusing to replace it without --force",
		key, existing.Raw.SHA256, existing.Raw.Size, raw.SHA256, raw.Size)}
}

// publisher uploads one image's files and manifest next to the manifest already published
// (existing, nil when none).
type publisher struct {
	ctx      context.Context
	client   *minio.Client
	o        *Options
	log      *slog.Logger
	layout   manifest.Layout
	existing *manifest.Manifest
	raw      manifest.Digest
}

// uploadFiles uploads each staged file (or keeps what is published) and lists it in m and sum.
func (pub publisher) uploadFiles(files []staged, m *manifest.Manifest, sum *Summary) error {
	for _, s := range files {
		f, obj, err := pub.uploadFile(s)
		if err != nil {
			return err
		}
		m.Files = append(m.Files, f)
		sum.Objects = append(sum.Objects, obj)
	}
	return nil
}

// uploadFile uploads one staged file, unless re-publishing makes it pointless. Re-publishing an
// identical image must change nothing. A file whose bytes equal the existing manifest's entry
// keeps that entry. A file that differs only because the encoder changed (another xz version)
// while the raw image is the same also keeps the existing object, if that object is intact:
// replacing it would only make readers of the current manifest see a digest mismatch until the
// new manifest lands.
func (pub publisher) uploadFile(s staged) (manifest.File, Object, error) {
	key, _ := pub.layout.ImageKey(s.format)
	f := manifest.File{Format: s.format, Size: s.size, SHA256: s.sha256, BlockSize: s.blockSize, Encoder: s.encoder}
	f.Name, _ = manifest.ImageName(pub.o.Arch, s.format)
	old, hasOld := pub.published(s.format)
	if hasOld && old.SHA256 != f.SHA256 && !pub.o.Reencode {
		intact, err := objectMatches(pub.ctx, pub.client, pub.o.S3.Bucket, key, old.Size, old.SHA256)
		if err != nil {
			return f, Object{}, err
		}
		if intact {
			pub.log.Info("keeping the published encoding of the same raw image", "key", key, "sha256", old.SHA256)
			return old, Object{Key: key, Format: s.format, Size: old.Size, SHA256: old.SHA256, Action: "skipped"}, nil
		}
	}
	if hasOld && old.SHA256 == f.SHA256 && old.Size == f.Size {
		f = old
	}
	action, err := putFile(pub.ctx, pub.client, pub.o.S3.Bucket, key, s, pub.log)
	if err != nil {
		return f, Object{}, err
	}
	return f, Object{Key: key, Format: s.format, Size: s.size, SHA256: s.sha256, Action: action}, nil
}

// published is the existing manifest's entry for format, when it describes the same raw image.
func (pub publisher) published(format string) (manifest.File, bool) {
	if pub.existing == nil || pub.existing.Raw != pub.raw {
		return manifest.File{}, false
	}
	return pub.existing.File(format)
}

// uploadManifest uploads m, last, so a reader never sees a manifest whose files are incomplete;
// a manifest that describes the same image as the existing one is left as it is.
func (pub publisher) uploadManifest(m *manifest.Manifest, existingBytes []byte, sum *Summary) error {
	same := pub.existing != nil && manifest.SameImage(pub.existing, m)
	if same {
		m.Created, m.Tool = pub.existing.Created, pub.existing.Tool
	}
	body, err := m.Marshal()
	if err != nil {
		return &Error{Code: CodeInternal, Err: err}
	}
	sum.Manifest = m
	if same {
		sum.ManifestAction = "skipped"
		sum.ManifestSHA256 = digest(existingBytes)
		pub.log.Info("manifest unchanged", "key", sum.ManifestKey)
		return nil
	}
	_, err = pub.client.PutObject(pub.ctx, pub.o.S3.Bucket, sum.ManifestKey, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{
		ContentType:  "application/json",
		CacheControl: "no-cache",
	})
	if err != nil {
		return s3Error("uploading "+sum.ManifestKey, err)
	}
	sum.ManifestAction = "uploaded"
	sum.ManifestSHA256 = digest(body)
	pub.log.Info("manifest uploaded", "key", sum.ManifestKey)
	return nil
}

// readManifest returns the manifest at key and its bytes, nil when there is
// none (or it is unreadable, which publish then replaces).
func readManifest(ctx context.Context, c *minio.Client, bucket, key string) (*manifest.Manifest, []byte, error) {
	obj, err := c.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, nil, s3Error("reading "+key, err)
	}
	defer obj.Close()
	data, err := io.ReadAll(io.LimitReader(obj, manifest.MaxSize+1))
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil, nil, nil
		}
		return nil, nil, s3Error("reading "+key, err)
	}
	m, err := manifest.Parse(data)
	if err != nil {
		return nil, nil, nil
	}
	return m, data, nil
}

// putFile uploads a staged file unless the object already has the same size
// and sha256 metadata. Large files go up in parallel multipart uploads.
func putFile(ctx context.Context, c *minio.Client, bucket, key string, s staged, log *slog.Logger) (string, error) {
	st, err := c.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	switch {
	case err == nil:
		if st.Size == s.size && metaSHA256(st.UserMetadata) == s.sha256 {
			log.Info("already uploaded", "key", key, "size", s.size)
			return "skipped", nil
		}
	case minio.ToErrorResponse(err).Code == "NoSuchKey":
	default:
		return "", s3Error("checking "+key, err)
	}
	f, err := os.Open(s.path)
	if err != nil {
		return "", &Error{Code: CodeInternal, Err: err}
	}
	defer f.Close()
	contentType := "application/zstd"
	if s.format == manifest.FormatXZ {
		contentType = "application/x-xz"
	}
	start := time.Now()
	_, err = c.PutObject(ctx, bucket, key, f, s.size, minio.PutObjectOptions{
		ContentType:  contentType,
		UserMetadata: map[string]string{manifest.MetaSHA256: s.sha256},
		PartSize:     16 << 20,
	})
	if err != nil {
		return "", s3Error("uploading "+key, err)
	}
	log.Info("uploaded", "key", key, "size", s.size, "took", time.Since(start).Round(time.Millisecond))
	return "uploaded", nil
}

// objectMatches reports whether key exists with this size and sha256 metadata.
func objectMatches(ctx context.Context, c *minio.Client, bucket, key string, size int64, sha string) (bool, error) {
	st, err := c.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	switch {
	case err == nil:
		return st.Size == size && metaSHA256(st.UserMetadata) == sha, nil
	case minio.ToErrorResponse(err).Code == "NoSuchKey":
		return false, nil
	}
	return false, s3Error("checking "+key, err)
}

// metaSHA256 finds the sha256 user metadata whatever case the server used.
func metaSHA256(meta map[string]string) string {
	for k, v := range meta {
		if strings.EqualFold(k, manifest.MetaSHA256) {
			return v
		}
	}
	return ""
}

// parseFlagSet parses args into fs: -h is flag.ErrHelp as it is, a bad flag
// or a positional argument an invalid_argument Error.
func parseFlagSet(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &Error{Code: CodeInvalidArgument, Err: err}
	}
	if fs.NArg() > 0 {
		return &Error{Code: CodeInvalidArgument, Err: fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	return nil
}
