// Package ociimage is the one definition of the project's two container
// images, karpenter-scaleway-em (the controller, em-imager embedded) and
// em-imager, and builds them without a container engine: it compiles the
// static binaries for every platform, assembles the layers itself (the
// binary; passwd/group naming the non-root user; CA certificates from
// Debian's ca-certificates), and writes reproducible multi-arch OCI image
// layouts and archives with go-containerregistry. `make image` runs it
// (cmd/ociimage); `make image-push REGISTRY=...` pushes what it wrote.
//
// It lives under build/ because it is release packaging, not part of a
// shipped binary nor a test harness: nothing outside build/ and the tests
// that check its output imports it, so go-containerregistry never reaches the
// controller or em-imager.
package ociimage

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/google/go-containerregistry/pkg/name"
	"sigs.k8s.io/yaml"
)

const (
	// DefaultRegistry is where releases are pushed; the controller chart's
	// default image.repository is DefaultRegistry/karpenter-scaleway-em.
	DefaultRegistry = "ghcr.io/karpenter-scaleway-em"
	// Source is the org.opencontainers.image.source label.
	Source = "https://github.com/karpenter-scaleway-em/karpenter-scaleway-em"
	// Licenses is the org.opencontainers.image.licenses label (SPDX).
	Licenses = "Apache-2.0"
	// ServerArch is the architecture of the em-imager the controller embeds
	// whatever its own platform: it runs in the servers' rescue system.
	ServerArch = "amd64"
	// NonRootUID is the user (and group) both images run as, distroless's
	// "nonroot".
	NonRootUID = 65532
	// DefaultCACerts holds the certificates Debian's ca-certificates ships.
	DefaultCACerts    = "/usr/share/ca-certificates/mozilla"
	debianCACopyright = "/usr/share/doc/ca-certificates/copyright"

	modulePath = "github.com/karpenter-scaleway-em/karpenter-scaleway-em"
	// chartFile gives the default version: images are tagged with the
	// chart's appVersion, which the chart uses as its default image tag.
	chartFile = "charts/karpenter-scaleway-em/Chart.yaml"
	// imagerEmbedPath is the file controller/imagerbin embeds; the build
	// supplies it through -overlay so the source tree is never written.
	imagerEmbedPath = "controller/imagerbin/em-imager"
)

// Image is what goes into one image.
type Image struct {
	// Name is the repository under the registry, the binary's name (the
	// entrypoint is /Name) and the layout's directory name.
	Name        string
	Title       string
	Description string
	// Package is the Go main package, relative to the module root.
	Package string
	// EmbedsImager: the binary embeds em-imager for linux/ServerArch
	// (controller/imagerbin), built in the same run.
	EmbedsImager bool
}

var (
	// Imager is the em-imager image. It runs as non-root by default, which
	// is what `em-imager publish` and `version` need; writing or inspecting
	// a disk takes `--user 0 --privileged` (docs/install.md).
	Imager = Image{
		Name:        "em-imager",
		Title:       "em-imager",
		Description: "Streams a Talos image onto a bare-metal disk and reports the hardware; publishes images to S3.",
		Package:     "./imager/cmd/em-imager",
	}
	// Controller is the controller image, referenced by the Helm chart.
	Controller = Image{
		Name:         "karpenter-scaleway-em",
		Title:        "karpenter-scaleway-em",
		Description:  "Karpenter cloud provider for Scaleway Elastic Metal servers running Talos Linux.",
		Package:      "./controller/cmd/karpenter-scaleway-em",
		EmbedsImager: true,
	}
	// Images in build order: em-imager first, the controller embeds it.
	Images = []Image{Imager, Controller}
	// Platforms the images are built for (all linux).
	Platforms = []string{"amd64", "arm64"}
)

// Entrypoint is the path of the image's only binary.
func (i Image) Entrypoint() string { return "/" + i.Name }

// Repository is the image's repository under registry (e.g. DefaultRegistry).
func (i Image) Repository(registry string) (name.Repository, error) {
	r, err := name.NewRepository(registry+"/"+i.Name, name.StrictValidation)
	if err != nil {
		return name.Repository{}, fmt.Errorf("registry %q: %w", registry, err)
	}
	return r, nil
}

// Reference is registry/name:version, the name an image is loaded or pushed
// under.
func (i Image) Reference(registry, version string) (name.Tag, error) {
	r, err := i.Repository(registry)
	if err != nil {
		return name.Tag{}, err
	}
	if !validTag.MatchString(version) {
		return name.Tag{}, fmt.Errorf("version %q is not a valid image tag ([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})", version)
	}
	return r.Tag(version), nil
}

// validTag is the OCI distribution spec's tag grammar (name.NewTag accepts
// more when not strict, e.g. "+").
var validTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// ChartVersion is the controller chart's appVersion under the repository
// root: the default version of the images and the chart's default tag.
func ChartVersion(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, chartFile))
	if err != nil {
		return "", err
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		return "", fmt.Errorf("%s: %w", chartFile, err)
	}
	if c.AppVersion == "" {
		return "", fmt.Errorf("%s has no appVersion", chartFile)
	}
	return c.AppVersion, nil
}
