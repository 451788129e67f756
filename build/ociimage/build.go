package ociimage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// OCI annotation and label keys (image-spec annotations.md) and containerd's
// image name annotation, which `ctr images import` and `docker load` name
// the image by.
const (
	LabelTitle         = "org.opencontainers.image.title"
	LabelDescription   = "org.opencontainers.image.description"
	LabelSource        = "org.opencontainers.image.source"
	LabelVersion       = "org.opencontainers.image.version"
	LabelRevision      = "org.opencontainers.image.revision"
	LabelLicenses      = "org.opencontainers.image.licenses"
	LabelCreated       = "org.opencontainers.image.created"
	AnnotationRefName  = "org.opencontainers.image.ref.name"
	AnnotationImageRef = "io.containerd.image.name"
)

// Options say what to build and where.
type Options struct {
	// Root is the module root (holds go.mod); Out the output directory:
	// Out/<name>/ is an OCI image layout, Out/<name>.tar the same as an
	// archive (podman load, ctr images import, docker load), Out/context the
	// files the top-level Dockerfiles copy (writeContext).
	Root, Out string
	// Version tags the images, fills the version label and is stamped into
	// the binaries. Empty: the chart's appVersion (ChartVersion).
	Version string
	// Revision is the source revision label (a git commit).
	Revision string
	// SourceDateEpoch is every timestamp in the images (Unix seconds):
	// https://reproducible-builds.org/specs/source-date-epoch/
	SourceDateEpoch int64
	// Registry names the images in the layouts' annotations; empty:
	// DefaultRegistry. Pushing may use another one.
	Registry string
	// CACerts is the directory of Debian's certificates; empty: DefaultCACerts.
	CACerts string
	// Platforms are linux architectures; empty: Platforms.
	Platforms []string
	// Go is the go command; empty: "go".
	Go string
	// Log receives progress lines; nil: none.
	Log io.Writer
}

// Result is what Build wrote.
type Result struct {
	Images []Built
	// Context is the Dockerfiles' build context (Out/ContextDir).
	Context  string
	CACerts  int // certificates in the bundle
	Duration time.Duration
}

// Built is one image's index as written.
type Built struct {
	Image     Image
	Reference string  // registry/name:version
	Digest    v1.Hash // of the multi-arch index
	Layout    string  // OCI layout directory
	Archive   string  // the layout as a tar
	Platforms []BuiltPlatform
}

// BuiltPlatform is one platform's image.
type BuiltPlatform struct {
	Arch       string
	Digest     v1.Hash // image manifest
	BinarySize int64
	Size       int64 // compressed layers and config
}

func (o *Options) defaults() error {
	if err := o.resolvePaths(); err != nil {
		return err
	}
	if o.Revision == "" {
		return errors.New("options: Revision is required (the git commit; \"unknown\" outside git)")
	}
	if o.SourceDateEpoch < 0 {
		return fmt.Errorf("SOURCE_DATE_EPOCH %d is negative", o.SourceDateEpoch)
	}
	o.fillDefaults()
	if err := checkPlatforms(o.Platforms); err != nil {
		return err
	}
	for _, img := range Images {
		if _, err := img.Reference(o.Registry, o.Version); err != nil {
			return err
		}
	}
	return nil
}

// resolvePaths makes Root and Out absolute (both are required) and reads
// the default version from the chart under Root.
func (o *Options) resolvePaths() error {
	if o.Root == "" || o.Out == "" {
		return errors.New("options: Root and Out are required")
	}
	var err error
	if o.Root, err = filepath.Abs(o.Root); err != nil {
		return err
	}
	if o.Out, err = filepath.Abs(o.Out); err != nil {
		return err
	}
	if o.Version == "" {
		if o.Version, err = ChartVersion(o.Root); err != nil {
			return fmt.Errorf("default version: %w", err)
		}
	}
	return nil
}

// fillDefaults sets the optional fields left empty.
func (o *Options) fillDefaults() {
	if o.Registry == "" {
		o.Registry = DefaultRegistry
	}
	if o.CACerts == "" {
		o.CACerts = DefaultCACerts
	}
	if len(o.Platforms) == 0 {
		o.Platforms = Platforms
	}
	if o.Go == "" {
		o.Go = "go"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// checkPlatforms refuses a platform the images are not built for, or one
// given twice.
func checkPlatforms(platforms []string) error {
	for i, p := range platforms {
		if !slices.Contains(Platforms, p) {
			return fmt.Errorf("platform %q: the images are built for %v", p, Platforms)
		}
		if slices.Contains(platforms[:i], p) {
			return fmt.Errorf("platform %q given twice", p)
		}
	}
	return nil
}

// Build compiles the binaries and writes both images' layouts and archives
// under o.Out, replacing earlier ones.
func Build(ctx context.Context, o Options) (*Result, error) {
	start := time.Now()
	if err := o.defaults(); err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) { fmt.Fprintf(o.Log, format+"\n", args...) }
	created := time.Unix(o.SourceDateEpoch, 0).UTC()

	baseTar, base, caCount, err := baseLayer(o.CACerts, created)
	if err != nil {
		return nil, err
	}

	tmp, err := os.MkdirTemp("", "ociimage-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	gb := &goBuilder{goCmd: o.Go, root: o.Root, version: o.Version, tmp: tmp, log: logf}
	binaries, err := buildBinaries(ctx, gb, o.Platforms)
	if err != nil {
		return nil, err
	}

	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	res := &Result{CACerts: caCount, Context: filepath.Join(o.Out, ContextDir)}
	if err := writeContext(res.Context, baseTar, binaries, o, created); err != nil {
		return nil, fmt.Errorf("write %s: %w", res.Context, err)
	}
	logf("%s: the Dockerfiles' build context (rootfs.tar, binaries, build-args)", rel(o.Root, res.Context))
	for _, img := range Images {
		b, err := buildImage(img, o, binaries[img.Name], base, created, caCount)
		if err != nil {
			return nil, err
		}
		res.Images = append(res.Images, b)
		logf("%s@%s", b.Reference, b.Digest)
		for _, p := range b.Platforms {
			logf("  linux/%-5s %s  binary %5.1f MiB, image %5.1f MiB compressed", p.Arch, p.Digest, mib(p.BinarySize), mib(p.Size))
		}
		logf("  %s (OCI layout), %s", rel(o.Root, b.Layout), rel(o.Root, b.Archive))
	}
	res.Duration = time.Since(start)
	logf("CA certificates: %d from %s; SOURCE_DATE_EPOCH=%d; built in %s", caCount, o.CACerts, o.SourceDateEpoch, res.Duration.Round(time.Second))
	return res, nil
}

// baseLayer is the layer every image shares: the CA bundle read from
// caCerts (with Debian's licence terms when the certificates are Debian's;
// a certificate directory given by hand may come without), as a tar and as
// a layer.
func baseLayer(caCerts string, created time.Time) (baseTar []byte, base v1.Layer, caCount int, err error) {
	caBundle, caCount, err := readCABundle(caCerts)
	if err != nil {
		return nil, nil, 0, err
	}
	var caCopyright []byte
	if caCerts == DefaultCACerts {
		caCopyright, _ = os.ReadFile(debianCACopyright)
	}
	if baseTar, err = layerTar(baseFiles(caBundle, caCopyright), created); err != nil {
		return nil, nil, 0, err
	}
	if base, err = gzipLayer(baseTar); err != nil {
		return nil, nil, 0, err
	}
	return baseTar, base, caCount, nil
}

// buildBinaries builds every image's binary for every platform, plus the
// em-imager the controller embeds: image name -> arch -> path.
func buildBinaries(ctx context.Context, gb *goBuilder, platforms []string) (map[string]map[string]string, error) {
	imagerArchs := slices.Clone(platforms)
	if !slices.Contains(imagerArchs, ServerArch) {
		imagerArchs = append(imagerArchs, ServerArch)
	}
	binaries := map[string]map[string]string{}
	for _, img := range Images {
		binaries[img.Name] = map[string]string{}
		archs := platforms
		if img == Imager {
			archs = imagerArchs
		}
		for _, arch := range archs {
			p, err := gb.build(ctx, img, arch, binaries[Imager.Name][ServerArch])
			if err != nil {
				return nil, err
			}
			binaries[img.Name][arch] = p
		}
	}
	return binaries, nil
}

// buildImage assembles img's multi-platform index from its binaries (arch
// -> path) and writes it as an OCI layout and an archive under o.Out.
func buildImage(img Image, o Options, binaries map[string]string, base v1.Layer, created time.Time, caCount int) (Built, error) {
	ref, _ := img.Reference(o.Registry, o.Version) // checked in defaults
	b := Built{Image: img, Reference: ref.String(),
		Layout: filepath.Join(o.Out, img.Name), Archive: filepath.Join(o.Out, img.Name+".tar")}
	labels := map[string]string{
		LabelTitle:       img.Title,
		LabelDescription: img.Description,
		LabelSource:      Source,
		LabelVersion:     o.Version,
		LabelRevision:    o.Revision,
		LabelLicenses:    Licenses,
		LabelCreated:     created.Format(time.RFC3339),
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range o.Platforms {
		p, im, err := builtPlatform(img, arch, binaries[arch], base, labels, created, caCount)
		if err != nil {
			return Built{}, err
		}
		b.Platforms = append(b.Platforms, p)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: im, Descriptor: v1.Descriptor{Platform: platform(arch)}})
	}
	// Registries (GHCR) show a multi-arch package's description and
	// source from the index's annotations.
	idx = mutate.Annotations(idx, labels).(v1.ImageIndex)
	var err error
	if b.Digest, err = idx.Digest(); err != nil {
		return Built{}, err
	}
	if err := writeLayout(b.Layout, idx, ref.TagStr(), ref.String()); err != nil {
		return Built{}, fmt.Errorf("write %s: %w", b.Layout, err)
	}
	if err := writeArchive(b.Archive, b.Layout, created); err != nil {
		return Built{}, fmt.Errorf("write %s: %w", b.Archive, err)
	}
	return b, nil
}

// builtPlatform assembles one platform's image from the binary at bin and
// measures it.
func builtPlatform(img Image, arch, bin string, base v1.Layer, labels map[string]string, created time.Time, caCount int) (BuiltPlatform, v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return BuiltPlatform{}, nil, err
	}
	im, err := platformImage(img, arch, data, base, labels, created, caCount)
	if err != nil {
		return BuiltPlatform{}, nil, fmt.Errorf("%s linux/%s: %w", img.Name, arch, err)
	}
	d, err := im.Digest()
	if err != nil {
		return BuiltPlatform{}, nil, err
	}
	size, err := imageSize(im)
	if err != nil {
		return BuiltPlatform{}, nil, err
	}
	return BuiltPlatform{Arch: arch, Digest: d, BinarySize: int64(len(data)), Size: size}, im, nil
}

// platformImage assembles one platform's image: the shared base layer, then
// the binary.
func platformImage(img Image, arch string, binary []byte, base v1.Layer, labels map[string]string, created time.Time, caCount int) (v1.Image, error) {
	bin, err := newLayer([]file{{path: img.Entrypoint(), mode: 0o755, data: binary}}, created)
	if err != nil {
		return nil, err
	}
	user := strconv.Itoa(NonRootUID)
	cfg := &v1.ConfigFile{
		Architecture: arch,
		OS:           "linux",
		Variant:      platform(arch).Variant,
		Created:      v1.Time{Time: created},
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint: []string{img.Entrypoint()},
			User:       user + ":" + user,
			WorkingDir: "/",
			Env: []string{
				"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"SSL_CERT_FILE=" + CABundlePath,
			},
			Labels: labels,
		},
	}
	im := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	im = mutate.ConfigMediaType(im, types.OCIConfigJSON)
	if im, err = mutate.ConfigFile(im, cfg); err != nil {
		return nil, err
	}
	hist := func(by string) v1.History { return v1.History{Created: v1.Time{Time: created}, CreatedBy: by} }
	return mutate.Append(im,
		mutate.Addendum{Layer: base, History: hist(fmt.Sprintf(
			"ociimage: passwd/group (nonroot %d), nsswitch.conf, %d CA certificates (Debian ca-certificates), /tmp", NonRootUID, caCount))},
		mutate.Addendum{Layer: bin, History: hist(fmt.Sprintf(
			"ociimage: %s (go build %s, CGO_ENABLED=0, linux/%s)", img.Entrypoint(), img.Package, arch))},
	)
}

// platform is the descriptor platform: arm64 is ARMv8, as the Go port needs.
func platform(arch string) *v1.Platform {
	p := &v1.Platform{OS: "linux", Architecture: arch}
	if arch == "arm64" {
		p.Variant = "v8"
	}
	return p
}

func imageSize(im v1.Image) (int64, error) {
	m, err := im.Manifest()
	if err != nil {
		return 0, err
	}
	n := m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}

// writeLayout replaces dir with an OCI layout holding idx, named for
// `ctr images import` and `docker load` (io.containerd.image.name) and OCI
// tools (ref.name, the tag).
func writeLayout(dir string, idx v1.ImageIndex, tag, ref string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		AnnotationRefName:  tag,
		AnnotationImageRef: ref,
	}))
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func rel(root, path string) string {
	if r, err := filepath.Rel(root, path); err == nil && filepath.IsLocal(r) {
		return r
	}
	return path
}
