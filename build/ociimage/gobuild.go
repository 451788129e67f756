package ociimage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// goBuilder compiles the static binaries. Everything that changes the output
// is set here rather than inherited, so the same source, Go toolchain and
// version give the same bytes on any machine: GOFLAGS from the environment
// or `go env -w` (e.g. -race, -buildvcs) would otherwise change them.
type goBuilder struct {
	goCmd   string
	root    string // module root, absolute
	version string
	tmp     string // where binaries are written
	log     func(format string, args ...any)
}

func (g *goBuilder) ldflags() string {
	// Stripped (-s -w) and stamped: em-imager and the controller print
	// imager/version.Version; Karpenter core reports its Version in the
	// build_info metric and the User-Agent.
	return "-s -w -X " + modulePath + "/imager/version.Version=" + g.version +
		" -X sigs.k8s.io/karpenter/pkg/operator.Version=" + g.version
}

// build compiles img's main package for linux/arch. When img embeds
// em-imager, imagerPath is the linux/ServerArch em-imager to embed.
func (g *goBuilder) build(ctx context.Context, img Image, arch, imagerPath string) (string, error) {
	out := filepath.Join(g.tmp, img.Name+"-linux-"+arch)
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags", g.ldflags(), "-o", out}
	if img.EmbedsImager {
		if imagerPath == "" {
			return "", fmt.Errorf("%s embeds em-imager but none was built", img.Name)
		}
		overlay, err := g.overlay(imagerPath)
		if err != nil {
			return "", err
		}
		args = append(args, "-overlay", overlay)
	}
	args = append(args, img.Package)
	cmd := exec.CommandContext(ctx, g.goCmd, args...)
	cmd.Dir = g.root
	cmd.Env = append(os.Environ(),
		"CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch,
		"GOAMD64=v1", "GOARM64=v8.0", // baseline CPUs: the images run on any server
		"GOFLAGS=", "GOEXPERIMENT=",
	)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	g.log("go build %s (linux/%s)", img.Package, arch)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s for linux/%s: %w\n%s", img.Package, arch, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// overlay writes the -overlay file that makes controller/imagerbin embed
// imagerPath: the source tree (and a bin/em-imager `make build` copied into
// it for the host) stays untouched.
func (g *goBuilder) overlay(imagerPath string) (string, error) {
	b, err := json.Marshal(map[string]map[string]string{
		"Replace": {filepath.Join(g.root, imagerEmbedPath): imagerPath},
	})
	if err != nil {
		return "", err
	}
	path := filepath.Join(g.tmp, "overlay.json")
	return path, os.WriteFile(path, b, 0o644)
}
