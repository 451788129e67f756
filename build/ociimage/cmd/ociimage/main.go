// Command ociimage builds the project's container images as OCI layouts
// (`make image`) and pushes them (`make image-push REGISTRY=...`); see
// package build/ociimage and docs/install.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/build/ociimage"
)

const usage = `usage:
  ociimage build [-out bin/image] [-version V] [-platforms amd64,arm64] [-ca-certs DIR]
  ociimage push -registry REGISTRY [-out bin/image]

build compiles em-imager and the controller for each platform and writes
<out>/<name>/ (OCI image layout) and <out>/<name>.tar (the same as an archive)
for em-imager and karpenter-scaleway-em. The version defaults to the chart's
appVersion, the revision label to the git commit, and every timestamp to
$SOURCE_DATE_EPOCH, else the commit's time.

push uploads both indexes to REGISTRY/<name>:<version> (e.g. REGISTRY=ghcr.io/me)
with the credentials docker login, podman login or crane auth login saved.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("missing command: " + strings.TrimSpace(usage))
	}
	fs := flag.NewFlagSet("ociimage "+args[0], flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage) }
	out := fs.String("out", "bin/image", "output directory")
	switch args[0] {
	case "build":
		o := ociimage.Options{Root: ".", Log: stdout}
		fs.StringVar(&o.Version, "version", "", "image tag and binaries' version (default: the chart's appVersion)")
		fs.StringVar(&o.Registry, "registry", ociimage.DefaultRegistry, "registry the layouts name the images under")
		fs.StringVar(&o.CACerts, "ca-certs", ociimage.DefaultCACerts, "Debian ca-certificates directory")
		platforms := fs.String("platforms", strings.Join(ociimage.Platforms, ","), "linux architectures")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		o.Out, o.Platforms = *out, strings.Split(*platforms, ",")
		var err error
		if o.Revision, o.SourceDateEpoch, err = gitSource(ctx); err != nil {
			return err
		}
		_, err = ociimage.Build(ctx, o)
		return err
	case "push":
		registry := fs.String("registry", "", "registry to push to, e.g. ghcr.io/me (required)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *registry == "" {
			return fmt.Errorf("push needs -registry (make image-push REGISTRY=...), e.g. %s", ociimage.DefaultRegistry)
		}
		for _, img := range ociimage.Images {
			ref, digest, err := ociimage.Push(ctx, *out, img, *registry)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "pushed %s@%s\n", ref, digest)
		}
		return nil
	default:
		return fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
}

// gitSource is the revision label and SOURCE_DATE_EPOCH: the environment's
// SOURCE_DATE_EPOCH wins, else the commit's time, so that rebuilding a
// commit gives the same digests. Outside git: "unknown" and 0.
func gitSource(ctx context.Context) (revision string, epoch int64, err error) {
	if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
		if epoch, err = strconv.ParseInt(v, 10, 64); err != nil || epoch < 0 {
			return "", 0, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds", v)
		}
	}
	git := func(args ...string) (string, error) {
		b, err := exec.CommandContext(ctx, "git", args...).Output()
		return strings.TrimSpace(string(b)), err
	}
	revision, err = git("rev-parse", "HEAD")
	if err != nil {
		fmt.Fprintln(os.Stderr, "ociimage: not a git checkout: revision label \"unknown\"")
		return "unknown", epoch, nil
	}
	// Uncommitted changes are in the binaries: say so in the label.
	if st, err := git("status", "--porcelain", "--untracked-files=no"); err == nil && st != "" {
		revision += "-dirty"
	}
	if os.Getenv("SOURCE_DATE_EPOCH") == "" {
		ct, err := git("log", "-1", "--format=%ct")
		if err != nil {
			return "", 0, err
		}
		if epoch, err = strconv.ParseInt(ct, 10, 64); err != nil {
			return "", 0, fmt.Errorf("commit time %q: %w", ct, err)
		}
	}
	return revision, epoch, nil
}
