package publish

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/manifest"
)

// DefaultPresignExpiry is how long `em-imager presign`'s URLs work: long
// enough to boot a server into rescue and write the image by hand, short
// enough that a URL pasted into a ticket soon stops opening the bucket.
const DefaultPresignExpiry = 2 * time.Hour

// maxPresignExpiry is the longest lifetime S3 signatures (SigV4) allow.
const maxPresignExpiry = 7 * 24 * time.Hour

// Presigned is what `em-imager presign` prints: GET URLs, signed with the
// publisher's key, for what an operator fetches in a rescue shell from a
// private bucket (the controller presigns the same objects itself), plus
// the digests to check them against.
type Presigned struct {
	OK        bool   `json:"ok"`
	ExpiresAt string `json:"expiresAt,omitempty"`
	// Manifest is the manifest's URL, for em-imager write --manifest; its
	// own SHA-256 is ManifestSHA256 (--manifest-sha256, required over http).
	Manifest       string `json:"manifest,omitempty"`
	ManifestSHA256 string `json:"manifestSha256,omitempty"`
	// Image is the URL of the manifest's file in Format, for --image: a
	// presigned manifest's neighbours are not readable without their own
	// signature.
	Image  string `json:"image,omitempty"`
	Format string `json:"format,omitempty"`
	// Imager is em-imager's build for the architecture, and ImagerSHA256
	// its digest as its .sha256 file in the bucket gives it.
	Imager       string        `json:"imager,omitempty"`
	ImagerSHA256 string        `json:"imagerSha256,omitempty"`
	Error        *SummaryError `json:"error,omitempty"`
}

// presignOptions are presign's flags.
type presignOptions struct {
	layout manifest.Layout
	format string
	expiry time.Duration
	s3     S3Config
}

// PresignMain runs `em-imager presign args...` and returns the exit status
// (as publish's: 2 bad flags, 5 credentials refused, 6 other S3 failures).
func PresignMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return presignEnv(ctx, args, stdout, stderr, os.Getenv, time.Now)
}

func presignEnv(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string, now func() time.Time) int {
	o, err := parsePresignFlags(args, stderr, getenv)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	out := &Presigned{}
	if err == nil {
		out, err = Presign(ctx, o.s3, o.layout, o.format, o.expiry, now)
	}
	if err != nil {
		out = &Presigned{Error: &SummaryError{Code: CodeOf(err), Message: err.Error()}}
		fmt.Fprintln(stderr, "em-imager presign:", err)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if werr := enc.Encode(out); werr != nil && err == nil {
		return 1
	}
	return ExitCode(CodeOf(err))
}

func parsePresignFlags(args []string, stderr io.Writer, getenv func(string) string) (*presignOptions, error) {
	fs := flag.NewFlagSet("em-imager presign", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: em-imager presign --schematic ID --talos-version vX.Y.Z [--prefix P] [flags]

Prints presigned GET URLs for what "em-imager publish" put into a private
bucket: the manifest, its image file and em-imager itself, with their
SHA-256, for running em-imager by hand in a rescue shell (imager/README.md).
The rescue system never sees the bucket's keys, only URLs that expire.

Environment: as publish: %s, %s, %s (default %s), %s, %s

Flags:
`, EnvEndpoint, EnvBucket, EnvRegion, DefaultRegion, EnvAccessKey, EnvSecretKey)
		fs.PrintDefaults()
	}
	o := &presignOptions{}
	var bucket, endpoint string
	fs.StringVar(&o.layout.SchematicID, "schematic", "", "Image Factory schematic ID (64 hex digits), as published")
	fs.StringVar(&o.layout.TalosVersion, "talos-version", "", "Talos version, e.g. v1.12.4, as published")
	fs.StringVar(&o.layout.Arch, "arch", "amd64", "architecture of the image and of em-imager: amd64 or arm64")
	fs.StringVar(&o.layout.Prefix, "prefix", "", "key prefix in the bucket, as published")
	fs.StringVar(&o.format, "format", "", "image file to sign: zstd or xz (default: zstd when the manifest lists it)")
	fs.DurationVar(&o.expiry, "expires", DefaultPresignExpiry, "lifetime of the URLs (at most 168h): long enough to write the image")
	fs.StringVar(&bucket, "bucket", "", "bucket (default $"+EnvBucket+")")
	fs.StringVar(&endpoint, "endpoint", "", "S3 endpoint URL (default $"+EnvEndpoint+")")
	if err := parseFlagSet(fs, args); err != nil {
		return nil, err
	}
	o.s3 = S3ConfigFromEnv(getenv)
	if bucket != "" {
		o.s3.Bucket = bucket
	}
	if endpoint != "" {
		o.s3.Endpoint = endpoint
	}
	return o, o.validate()
}

func (o *presignOptions) validate() error {
	if err := o.layout.Validate(); err != nil {
		return &Error{Code: CodeInvalidArgument, Err: err}
	}
	if o.expiry <= 0 || o.expiry > maxPresignExpiry {
		return &Error{Code: CodeInvalidArgument, Err: fmt.Errorf("--expires %s: want more than 0 and at most %s (S3 signatures last 7 days at most)", o.expiry, maxPresignExpiry)}
	}
	if o.format != "" {
		f, err := manifest.NormalizeFormat(o.format)
		if err != nil {
			return &Error{Code: CodeInvalidArgument, Err: fmt.Errorf("--format: %w", err)}
		}
		o.format = f
	}
	if err := o.s3.validate(); err != nil {
		return &Error{Code: CodeInvalidArgument, Err: err}
	}
	return nil
}

// Presign reads the manifest of layout (so a URL is only handed out for an
// image that was published, and its digest comes from the bucket) and signs
// GET URLs for it, its file in format ("" : the preferred one) and the
// em-imager build beside it, valid for expiry.
func Presign(ctx context.Context, s3 S3Config, layout manifest.Layout, format string, expiry time.Duration, now func() time.Time) (*Presigned, error) {
	c, err := s3.newClient()
	if err != nil {
		return nil, &Error{Code: CodeInvalidArgument, Err: err}
	}
	m, data, err := readManifest(ctx, c, s3.Bucket, layout.ManifestKey())
	if err != nil {
		return nil, err
	}
	if m == nil {
		return nil, &Error{Code: CodeS3Error, Err: fmt.Errorf("no readable manifest at %s/%s: publish the image first", s3.Bucket, layout.ManifestKey())}
	}
	prefs := manifest.PreferredFormats
	if format != "" {
		prefs = []string{format}
	}
	file, err := m.Pick(prefs)
	if err != nil {
		return nil, &Error{Code: CodeInvalidArgument, Err: fmt.Errorf("--format: %w", err)}
	}
	toolKey := ToolKey(layout.Prefix, layout.Arch)
	toolSum, err := readToolSum(ctx, c, s3.Bucket, toolKey+".sha256")
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	out := &Presigned{OK: true, ExpiresAt: now().Add(expiry).UTC().Format(time.RFC3339),
		ManifestSHA256: hex.EncodeToString(sum[:]), Format: file.Format, ImagerSHA256: toolSum}
	for _, u := range []struct {
		key  string
		into *string
	}{
		{layout.ManifestKey(), &out.Manifest},
		{layout.Dir() + "/" + file.Name, &out.Image},
		{toolKey, &out.Imager},
	} {
		signed, err := c.PresignedGetObject(ctx, s3.Bucket, u.key, expiry, nil)
		if err != nil {
			return nil, s3Error("presigning "+u.key, err)
		}
		*u.into = signed.String()
	}
	return out, nil
}

// readToolSum returns the digest an em-imager build's .sha256 file (as
// publish writes it: "<hex>  <name>") gives.
func readToolSum(ctx context.Context, c *minio.Client, bucket, key string) (string, error) {
	obj, err := c.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return "", s3Error("reading "+key, err)
	}
	defer obj.Close()
	data, err := io.ReadAll(io.LimitReader(obj, 1024))
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return "", &Error{Code: CodeS3Error, Err: fmt.Errorf("no em-imager build at %s/%s: publish uploads it unless --no-imager", bucket, strings.TrimSuffix(key, ".sha256"))}
		}
		return "", s3Error("reading "+key, err)
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 || len(fields[0]) != sha256.Size*2 {
		return "", &Error{Code: CodeS3Error, Err: fmt.Errorf("%s/%s is not a sha256sum line", bucket, key)}
	}
	return fields[0], nil
}
