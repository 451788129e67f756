// Package chartpkg packages the project's Helm charts as `helm package` does
// (the chart archive <name>-<version>.tgz that `helm push` sends to an OCI
// registry), with Helm's Go SDK, which the module already builds with, so
// `make chart-package` needs no helm binary.
package chartpkg

import (
	"fmt"
	"os"

	"github.com/blang/semver/v4"
	helmchart "helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// Package loads the charts in dirs (each honours its .helmignore), checks
// them, and writes one archive each into outDir. It returns the archives'
// paths in the order of dirs. The charts must share one version and one
// appVersion (docs/upgrade.md: one version for the charts and the images),
// each a strict semantic version as OCI registries tag it.
func Package(outDir string, dirs ...string) ([]string, error) {
	if len(dirs) == 0 {
		return nil, fmt.Errorf("no chart directory given")
	}
	charts := make([]*helmchart.Chart, 0, len(dirs))
	for _, dir := range dirs {
		c, err := loadChart(dir)
		if err != nil {
			return nil, err
		}
		if len(charts) > 0 {
			if err := sameVersion(c, charts[0]); err != nil {
				return nil, err
			}
		}
		charts = append(charts, c)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(charts))
	for _, c := range charts {
		path, err := chartutil.Save(c, outDir)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name(), err)
		}
		out = append(out, path)
	}
	return out, nil
}

// loadChart loads and checks the chart in dir: valid, a semantic version,
// no dependencies.
func loadChart(dir string) (*helmchart.Chart, error) {
	c, err := loader.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if _, err := semver.Parse(c.Metadata.Version); err != nil {
		return nil, fmt.Errorf("%s: version %q is not a semantic version (an OCI tag needs one): %w", dir, c.Metadata.Version, err)
	}
	if len(c.Metadata.Dependencies) > 0 {
		// None of the project's charts has any; packaging one would
		// need `helm dependency build`, which this does not do.
		return nil, fmt.Errorf("%s: chart dependencies are not supported", dir)
	}
	return c, nil
}

// sameVersion wants c to share first's version and appVersion.
func sameVersion(c, first *helmchart.Chart) error {
	if c.Metadata.Version != first.Metadata.Version || c.Metadata.AppVersion != first.Metadata.AppVersion {
		return fmt.Errorf("%s is version %s (appVersion %s), %s is %s (%s): the charts share one version",
			c.Name(), c.Metadata.Version, c.Metadata.AppVersion, first.Name(), first.Metadata.Version, first.Metadata.AppVersion)
	}
	return nil
}
