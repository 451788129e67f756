// Package manifest holds the JSON document published beside Talos images in an
// S3 bucket (see doc.go): its type, its strict validation, and the object key
// layout that both `em-imager publish` and the controller's image source use.
package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/kernelargs"
)

// SchemaVersion is the only manifest schema this code reads and writes.
// Additive fields keep it; a field that changes meaning bumps it.
const SchemaVersion = 1

// MaxSize bounds how much of a manifest object a reader accepts, so a wrong
// key (an image instead of the manifest) fails fast instead of filling memory.
const MaxSize = 1 << 20

// Compressed formats a manifest may list. The names match imager/decompress.
const (
	FormatXZ   = "xz"
	FormatZstd = "zstd"
)

// MetaSHA256 is the S3 user-metadata key (sent as x-amz-meta-sha256) holding
// an object's sha256, so a reader can check an object against the manifest
// without downloading it, and publish can skip identical uploads.
const MetaSHA256 = "Sha256"

// ManifestName is the object name of the manifest, beside the images.
const ManifestName = "manifest.json"

// Manifest describes one Talos image (schematic + version + architecture) and
// the compressed files that carry it.
type Manifest struct {
	SchemaVersion int    `json:"schemaVersion"`
	SchematicID   string `json:"schematicID"`
	TalosVersion  string `json:"talosVersion"`
	Arch          string `json:"arch"`
	// SectorSize is the logical sector size the image's partition table was
	// built for (512 for Talos metal images); a disk with another logical
	// sector size would not boot it.
	SectorSize int `json:"sectorSize"`
	// Raw is the decompressed disk image: what em-imager writes and verifies,
	// and what drift compares.
	Raw Digest `json:"raw"`
	// Files are the compressed encodings of Raw, one per format.
	Files []File `json:"files"`
	// Boot is how the image boots: its kernel arguments and whether they
	// make Talos read its machine config from the disk. Manifests written
	// before publish recorded it lack it (nil): nothing is known then.
	Boot *Boot `json:"boot,omitempty"`
	// Public records that the publisher made the objects anonymously readable.
	// It is informational: the controller's own configuration decides whether
	// it hands out plain or presigned URLs.
	Public  bool      `json:"public,omitempty"`
	Tool    Tool      `json:"tool"`
	Created time.Time `json:"created"`
}

// Digest is a size and a lowercase hex sha256.
type Digest struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// File is one compressed encoding of the raw image.
type File struct {
	// Name is the object name relative to the manifest's directory
	// (metal-<arch>.raw.zst or metal-<arch>.raw.xz).
	Name   string `json:"name"`
	Format string `json:"format"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// BlockSize is the raw bytes per independently decodable unit (xz block or
	// zstd frame) when the publisher encoded the file itself; 0 when unknown
	// (a file uploaded as it came from the Image Factory).
	BlockSize int64 `json:"blockSize,omitempty"`
	// Encoder names what produced the file ("xz 5.4.1", "klauspost/compress
	// v1.20.3", "upstream" for an input uploaded unchanged).
	Encoder string `json:"encoder,omitempty"`
}

// Boot is what publish learned about the image's boot.
type Boot struct {
	// KernelArgs is the kernel command line of the image's default boot
	// entry ("" when Source is SourceUnknown).
	KernelArgs string `json:"kernelArgs"`
	// Source says where KernelArgs came from: "image:<file>" (read from
	// the image, e.g. image:EFI/Linux/Talos-v1.12.0.efi), "flag" (given to
	// publish because the image's could not be read) or "unknown".
	Source string `json:"source"`
	// MetalISO: the kernel arguments carry talos.config=metal-iso, so a node
	// reads its config from the metal-iso partition em-imager writes and
	// never opens the maintenance API. false flags an image that can only
	// get its config over the maintenance API (configDelivery: MaintenanceAPI).
	MetalISO bool `json:"metalISO"`
}

// Boot sources besides "image:<file>".
const (
	BootSourceFlag    = "flag"
	BootSourceUnknown = "unknown"
	BootSourceImage   = "image:"
)

// Tool names the program that wrote the manifest.
type Tool struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// ErrInvalid is wrapped by every Parse and Validate error.
var ErrInvalid = errors.New("invalid manifest")

var (
	hexSHA256    = regexp.MustCompile(`^[0-9a-f]{64}$`)
	schematicRe  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	talosVersion = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)
)

// Arches are the architectures Talos ships metal images for.
var Arches = []string{"amd64", "arm64"}

// Extension returns the file-name extension of a compressed format.
func Extension(format string) (string, error) {
	switch format {
	case FormatXZ:
		return "xz", nil
	case FormatZstd:
		return "zst", nil
	}
	return "", fmt.Errorf("format %q: want %q or %q", format, FormatXZ, FormatZstd)
}

// NormalizeFormat maps the spellings an operator may use ("zst", "ZSTD") to
// the canonical format name.
func NormalizeFormat(s string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "xz":
		return FormatXZ, nil
	case "zst", "zstd":
		return FormatZstd, nil
	}
	return "", fmt.Errorf("format %q: want xz or zstd", s)
}

// ImageName is the object name of the image in format beside the manifest.
func ImageName(arch, format string) (string, error) {
	ext, err := Extension(format)
	if err != nil {
		return "", err
	}
	return "metal-" + arch + ".raw." + ext, nil
}

// Parse decodes and validates a manifest. Unknown fields are accepted so that
// additive changes do not break older readers; a schemaVersion other than
// SchemaVersion is refused.
func Parse(data []byte) (*Manifest, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%w: %d bytes, more than the %d a manifest may have", ErrInvalid, len(data), MaxSize)
	}
	var probe struct {
		SchemaVersion *int `json:"schemaVersion"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", ErrInvalid, err)
	}
	if probe.SchemaVersion == nil {
		return nil, fmt.Errorf("%w: schemaVersion: missing", ErrInvalid)
	}
	if *probe.SchemaVersion != SchemaVersion {
		return nil, fmt.Errorf("%w: schemaVersion: %d is not supported (this build reads %d)", ErrInvalid, *probe.SchemaVersion, SchemaVersion)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data after the JSON object", ErrInvalid)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Marshal validates m and encodes it, indented, with a trailing newline.
func (m *Manifest) Marshal() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Validate checks every field; the error names the field and the reason.
// The checks run part by part (header, raw image, files, boot, provenance)
// and every problem is reported, in field order.
func (m *Manifest) Validate() error {
	var p problems
	m.checkHeader(&p)
	m.checkRaw(&p)
	m.checkFiles(&p)
	checkBoot(&p, m.Boot)
	if strings.TrimSpace(m.Tool.Name) == "" {
		p.bad("tool.name", "empty")
	}
	if m.Created.IsZero() {
		p.bad("created", "missing")
	}
	if len(p) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(p...)) //nolint:errorlint // ErrInvalid and every field error, for errors.Is on each
}

// problems collects a manifest's field errors, each naming its field.
type problems []error

func (p *problems) bad(field, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: "+format, append([]any{field}, args...)...))
}

func (p *problems) add(err error) {
	if err != nil {
		*p = append(*p, err)
	}
}

// checkHeader checks what names the image: schema, schematic, Talos
// version, architecture and sector size.
func (m *Manifest) checkHeader(p *problems) {
	if m.SchemaVersion != SchemaVersion {
		p.bad("schemaVersion", "%d is not supported (want %d)", m.SchemaVersion, SchemaVersion)
	}
	p.add(ValidateSchematicID(m.SchematicID))
	p.add(ValidateTalosVersion(m.TalosVersion))
	p.add(ValidateArch(m.Arch))
	if m.SectorSize != 512 && m.SectorSize != 4096 {
		p.bad("sectorSize", "%d: want 512 or 4096", m.SectorSize)
	}
}

// checkRaw checks the uncompressed image: a whole number of sectors and a
// digest.
func (m *Manifest) checkRaw(p *problems) {
	if m.Raw.Size <= 0 {
		p.bad("raw.size", "%d: want > 0", m.Raw.Size)
	} else if m.SectorSize > 0 && m.Raw.Size%int64(m.SectorSize) != 0 {
		p.bad("raw.size", "%d is not a multiple of the sector size %d", m.Raw.Size, m.SectorSize)
	}
	if !hexSHA256.MatchString(m.Raw.SHA256) {
		p.bad("raw.sha256", "%q: want 64 lowercase hex digits", m.Raw.SHA256)
	}
}

// checkFiles checks the compressed files: at least one, each format once,
// named as ImageName says for the architecture.
func (m *Manifest) checkFiles(p *problems) {
	if len(m.Files) == 0 {
		p.bad("files", "empty: want at least one compressed file")
	}
	seen := map[string]bool{}
	for i, f := range m.Files {
		field := fmt.Sprintf("files[%d]", i)
		if f.Format != FormatXZ && f.Format != FormatZstd {
			p.bad(field+".format", "%q: want %q or %q", f.Format, FormatXZ, FormatZstd)
		} else {
			if seen[f.Format] {
				p.bad(field+".format", "%q listed twice", f.Format)
			}
			seen[f.Format] = true
			if want, _ := ImageName(m.Arch, f.Format); f.Name != want {
				p.bad(field+".name", "%q: want %q for format %s and arch %s", f.Name, want, f.Format, m.Arch)
			}
		}
		if f.Size <= 0 {
			p.bad(field+".size", "%d: want > 0", f.Size)
		}
		if !hexSHA256.MatchString(f.SHA256) {
			p.bad(field+".sha256", "%q: want 64 lowercase hex digits", f.SHA256)
		}
		if f.BlockSize < 0 {
			p.bad(field+".blockSize", "%d: want >= 0", f.BlockSize)
		}
	}
}

// checkBoot checks the boot section, when there is one: where the kernel
// arguments came from, and that metalISO agrees with them.
func checkBoot(p *problems, b *Boot) {
	if b == nil {
		return
	}
	switch {
	case b.Source == BootSourceUnknown:
		if b.KernelArgs != "" || b.MetalISO {
			p.bad("boot", "source %q with kernel arguments or metalISO set", b.Source)
		}
	case b.Source != BootSourceFlag && !(strings.HasPrefix(b.Source, BootSourceImage) && len(b.Source) > len(BootSourceImage)):
		p.bad("boot.source", "%q: want image:<file>, %s or %s", b.Source, BootSourceFlag, BootSourceUnknown)
	case strings.TrimSpace(b.KernelArgs) == "":
		p.bad("boot.kernelArgs", "empty")
	case b.MetalISO != kernelargs.MetalISO(b.KernelArgs):
		p.bad("boot.metalISO", "%v, but the kernel arguments say %v (%s=%s)", b.MetalISO, !b.MetalISO, kernelargs.ConfigParam, kernelargs.ConfigMetalISO)
	}
}

// File returns the entry for format, or false.
func (m *Manifest) File(format string) (File, bool) {
	for _, f := range m.Files {
		if f.Format == format {
			return f, true
		}
	}
	return File{}, false
}

// SameImage reports whether two manifests describe the same bytes: the same
// schematic, version, architecture, sector size, raw digest, boot and files. The
// tool and creation time do not count, so re-publishing is a no-op.
func SameImage(a, b *Manifest) bool {
	if !sameHeader(a, b) || len(a.Files) != len(b.Files) {
		return false
	}
	for _, fa := range a.Files {
		fb, ok := b.File(fa.Format)
		if !ok || fa != fb {
			return false
		}
	}
	return true
}

// sameHeader compares what describes the image beside its files.
func sameHeader(a, b *Manifest) bool {
	return a.SchematicID == b.SchematicID && a.TalosVersion == b.TalosVersion && a.Arch == b.Arch &&
		a.SectorSize == b.SectorSize && a.Raw == b.Raw && a.Public == b.Public && sameBoot(a, b)
}

// sameBoot: both without boot, or both with the same.
func sameBoot(a, b *Manifest) bool {
	if a.Boot == nil || b.Boot == nil {
		return a.Boot == b.Boot
	}
	return *a.Boot == *b.Boot
}

// ValidateSchematicID checks an Image Factory schematic ID (64 lowercase hex).
func ValidateSchematicID(s string) error {
	if !schematicRe.MatchString(s) {
		return fmt.Errorf("schematicID: %q: want the 64 lowercase hex digits of an Image Factory schematic ID", s)
	}
	return nil
}

// ValidateTalosVersion checks a Talos release tag such as v1.12.0.
func ValidateTalosVersion(s string) error {
	if !talosVersion.MatchString(s) {
		return fmt.Errorf("talosVersion: %q: want a release tag such as v1.12.0", s)
	}
	return nil
}

// ValidateArch checks an architecture name.
func ValidateArch(s string) error {
	for _, a := range Arches {
		if s == a {
			return nil
		}
	}
	return fmt.Errorf("arch: %q: want one of %s", s, strings.Join(Arches, ", "))
}
