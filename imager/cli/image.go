package cli

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/decompress"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/manifest"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/source"
)

// imageFlags say which image: its URL and digests directly (scripts, the
// controller), or the manifest that holds them (people).
type imageFlags struct {
	image, sha, format    string
	manifest, manifestSHA string
	imageSize             int64
	connectTimeout        time.Duration
}

// imageSpec is the image to write, whichever flags named it.
type imageSpec struct {
	url        string
	sha        string
	size       int64             // raw bytes, 0 when unknown
	format     decompress.Format // "" = detect from the data
	sectorSize int               // the manifest's; 0 when unknown
	fetched    *manifest.Fetched
	// file is the manifest's entry for url; nil until the format is
	// detected when --image overrides the manifest's URL.
	file *manifest.File
}

// describe fills the report's image section with what is known before
// downloading.
func (s imageSpec) describe(r *report.Report, concurrency int) {
	r.Image = &report.Image{URL: source.RedactURL(s.url), ExpectedSHA256: s.sha, DecodeConcurrency: concurrency, Format: string(s.format)}
	if s.fetched != nil {
		r.Image.Manifest, r.Image.ManifestSHA256 = s.fetched.Location, s.fetched.SHA256
	}
}

func validSHA(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == 32
}

// resolveImage checks the image flags and, with --manifest, reads the
// manifest under manifest.Fetch's rules.
func resolveImage(ctx context.Context, f imageFlags, needSHA bool) (imageSpec, *report.Error) {
	f.sha = strings.ToLower(strings.TrimSpace(f.sha))
	format, rerr := checkImageFlags(f)
	if rerr != nil {
		return imageSpec{}, rerr
	}
	spec := imageSpec{url: f.image, sha: f.sha, size: f.imageSize, format: format}
	if f.manifest != "" {
		return fromManifest(ctx, f, spec)
	}
	if rerr := directImage(f, needSHA); rerr != nil {
		return imageSpec{}, rerr
	}
	return spec, nil
}

// invalidArgument is the error for a flag, or a combination of flags, that cannot work.
func invalidArgument(format string, args ...any) *report.Error {
	return &report.Error{Code: report.CodeInvalidArgument, Message: fmt.Sprintf(format, args...)}
}

// checkImageFlags checks the flags that stand on their own and parses --format.
func checkImageFlags(f imageFlags) (decompress.Format, *report.Error) {
	format, err := decompress.ParseFormat(f.format)
	if err != nil {
		return "", invalidArgument("--format: %v", err)
	}
	if f.imageSize < 0 {
		return "", invalidArgument("--image-size must not be negative")
	}
	if f.sha != "" && !validSHA(f.sha) {
		return "", invalidArgument("--sha256 must be 64 hex digits, got %d characters", len(f.sha))
	}
	return format, nil
}

// directImage checks the flags of an image given without a manifest: a command that writes
// needs its URL and raw SHA-256.
func directImage(f imageFlags, needSHA bool) *report.Error {
	switch {
	case f.manifestSHA != "":
		return invalidArgument("--manifest-sha256 pins a --manifest, and none is given")
	case needSHA && f.image == "":
		return invalidArgument("--image or --manifest is required (the image's URL, or the manifest em-imager publish wrote)")
	case needSHA && f.sha == "":
		return invalidArgument("--sha256 is required with --image (the SHA-256 of the raw image), or use --manifest")
	}
	return nil
}

// fromManifest fetches --manifest and completes spec from it: the raw image's digest and
// sector size, and the file to write unless --image names one.
func fromManifest(ctx context.Context, f imageFlags, spec imageSpec) (imageSpec, *report.Error) {
	fetched, err := manifest.Fetch(ctx, f.manifest, manifest.FetchOptions{
		SHA256:     f.manifestSHA,
		Client:     httpClient(f.connectTimeout),
		AllowLocal: true,
	})
	if err != nil {
		return imageSpec{}, &report.Error{Code: manifestCode(ctx, err), Message: "--manifest: " + err.Error()}
	}
	m := fetched.Manifest
	spec.fetched = fetched
	if m.Arch != runtime.GOARCH {
		return imageSpec{}, &report.Error{Code: report.CodeManifestInvalid, Message: fmt.Sprintf("--manifest: %s is an image for %s servers; this em-imager runs on %s", fetched.Location, m.Arch, runtime.GOARCH)}
	}
	if rerr := agreesWithManifest(f, m.Raw); rerr != nil {
		return imageSpec{}, rerr
	}
	spec.sha, spec.size, spec.sectorSize = m.Raw.SHA256, m.Raw.Size, m.SectorSize
	prefs, rerr := manifestPrefs(spec.format)
	if rerr != nil {
		return imageSpec{}, rerr
	}
	if f.image != "" {
		// The operator's own URL (say, presigned) for one of the files
		// the manifest lists: matched once its format is known.
		return spec, nil
	}
	file, err := m.Pick(prefs)
	if err != nil {
		return imageSpec{}, &report.Error{Code: report.CodeUnsupportedFormat, Message: "--manifest: " + err.Error()}
	}
	spec.url, spec.file, spec.format = fetched.FileURL(file.Name), &file, decompress.Format(file.Format)
	return spec, nil
}

// agreesWithManifest refuses a --sha256 or --image-size that contradicts the manifest's raw image.
func agreesWithManifest(f imageFlags, raw manifest.Digest) *report.Error {
	if f.sha != "" && f.sha != raw.SHA256 {
		return invalidArgument("--sha256 %s is not the raw SHA-256 the manifest gives (%s); drop --sha256", f.sha, raw.SHA256)
	}
	if f.imageSize != 0 && f.imageSize != raw.Size {
		return invalidArgument("--image-size %d is not the raw size the manifest gives (%d); drop --image-size", f.imageSize, raw.Size)
	}
	return nil
}

// manifestPrefs is the order to pick a manifest's file in: --format's alone (xz or zstd, the
// formats a manifest lists), else the preferred order.
func manifestPrefs(format decompress.Format) ([]string, *report.Error) {
	if format == "" {
		return manifest.PreferredFormats, nil
	}
	if format != decompress.FormatXZ && format != decompress.FormatZstd {
		return nil, invalidArgument("--format %s: a manifest lists xz and zstd files only", format)
	}
	return []string{string(format)}, nil
}

// matchFile checks the downloaded object against the manifest's entry
// for its format: the wrong format or size is refused before anything is
// written.
func (s *imageSpec) matchFile(detected decompress.Format, size int64) *report.Error {
	if s.fetched == nil {
		return nil
	}
	if s.file == nil {
		f, ok := s.fetched.File(string(detected))
		if !ok {
			return &report.Error{Code: report.CodeUnsupportedFormat, Message: fmt.Sprintf("--image is %s data, and the manifest lists no %s file", detected, detected)}
		}
		s.file = &f
	}
	if size >= 0 && size != s.file.Size {
		return &report.Error{Code: report.CodeDigestMismatch, Message: fmt.Sprintf("the image object has %d bytes, the manifest says %s has %d: it was replaced, or the manifest is stale", size, s.file.Name, s.file.Size)}
	}
	return nil
}

func manifestCode(ctx context.Context, err error) string {
	switch {
	case ctx.Err() != nil:
		return report.CodeInterrupted
	case errors.Is(err, manifest.ErrInsecure):
		return report.CodeInvalidArgument
	case errors.Is(err, manifest.ErrPinMismatch):
		return report.CodeDigestMismatch
	case errors.Is(err, manifest.ErrRejected), errors.Is(err, manifest.ErrRedirect):
		return report.CodeSourceRejected
	case errors.Is(err, manifest.ErrUnreachable):
		return report.CodeSourceUnreachable
	case errors.Is(err, manifest.ErrInvalid):
		return report.CodeManifestInvalid
	}
	return report.CodeInternal
}

// httpClient connects within timeout; manifest.Fetch bounds the rest.
func httpClient(connect time.Duration) *http.Client {
	if connect <= 0 {
		connect = 15 * time.Second
	}
	d := &net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}
	return &http.Client{Transport: &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         d.DialContext,
		TLSHandshakeTimeout: connect,
	}}
}
