package ociimage

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// ContextDir is where, under the output directory, Build writes the build
// context of the top-level Dockerfile and Dockerfile.imager. With the default
// output (bin/image) that is bin/image/context, the one directory the
// repository's .dockerignore lets into a `docker build .`.
const ContextDir = "context"

// BuildArgsFile, in the context, holds one KEY=VALUE line per build argument
// the Dockerfiles take (VERSION, REVISION, CREATED): passed as --build-arg,
// they give the images the labels `make image` gives.
const BuildArgsFile = "build-args"

// writeContext replaces dir with what the Dockerfiles copy, so that a
// container engine builds the images `make image` builds without pulling a
// base image or compiling anything (the binaries are the ones Build put into
// its own images, byte for byte):
//
//	rootfs.tar                    the base layer, uncompressed (ADD unpacks it with its owners and modes)
//	linux-<arch>/<image name>     each image's static binary for each platform
//	build-args                    VERSION, REVISION and CREATED for the labels
func writeContext(dir string, baseTar []byte, binaries map[string]map[string]string, o Options, created time.Time) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "rootfs.tar"), baseTar, 0o644); err != nil {
		return err
	}
	for _, arch := range o.Platforms {
		archDir := filepath.Join(dir, "linux-"+arch)
		if err := os.MkdirAll(archDir, 0o755); err != nil {
			return err
		}
		for _, img := range Images {
			data, err := os.ReadFile(binaries[img.Name][arch])
			if err != nil {
				return err
			}
			p := filepath.Join(archDir, img.Name)
			if err := os.WriteFile(p, data, 0o755); err != nil {
				return err
			}
			// COPY keeps the file's mode: 0755 whatever the umask.
			if err := os.Chmod(p, 0o755); err != nil {
				return err
			}
		}
	}
	args := fmt.Sprintf("VERSION=%s\nREVISION=%s\nCREATED=%s\n", o.Version, o.Revision, created.Format(time.RFC3339))
	return os.WriteFile(filepath.Join(dir, BuildArgsFile), []byte(args), 0o644)
}
