package publish

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/manifest"
)

// em-imager itself goes into the bucket beside the images, one static build
// per server architecture, so that an operator in a rescue shell can fetch
// it, and its sha256 to check it against:
//
//	<prefix>/tools/em-imager-linux-amd64
//	<prefix>/tools/em-imager-linux-amd64.sha256   "<hex>  em-imager-linux-amd64\n" (sha256sum -c)
//
// Each object also carries its sha256 in x-amz-meta-sha256, like the images.

// imagerPackage is the main package a binary must have been built from.
const imagerPackage = "github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/cmd/em-imager"

// ToolsDir is the key prefix of the tools, under Options.Prefix.
const ToolsDir = "tools"

// Tool is one em-imager build uploaded (or already there).
type Tool struct {
	Key       string `json:"key"`
	SHA256Key string `json:"sha256Key"`
	Arch      string `json:"arch"`
	Size      int64  `json:"size"`
	SHA256    string `json:"sha256"`
	Action    string `json:"action"` // uploaded | skipped
	path      string
}

// ToolKey is the key of the em-imager build for arch under prefix.
func ToolKey(prefix, arch string) string {
	return path.Join(strings.Trim(prefix, "/"), ToolsDir, "em-imager-linux-"+arch)
}

// checkImagerBinary reads what a file says about itself: an em-imager
// main package built for Linux without cgo (static: the rescue system has
// no matching libc) for one of the architectures images exist for.
func checkImagerBinary(p string) (Tool, error) {
	bi, err := buildinfo.ReadFile(p)
	if err != nil {
		return Tool{}, fmt.Errorf("--imager-binary %s: not a Go binary: %w", p, err)
	}
	if bi.Path != imagerPackage {
		return Tool{}, fmt.Errorf("--imager-binary %s: built from %s, not em-imager (%s)", p, bi.Path, imagerPackage)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	arch := settings["GOARCH"]
	switch {
	case settings["GOOS"] != "linux":
		return Tool{}, fmt.Errorf("--imager-binary %s: built for %s, not linux", p, settings["GOOS"])
	case manifest.ValidateArch(arch) != nil:
		return Tool{}, fmt.Errorf("--imager-binary %s: built for %s; servers are %s", p, arch, strings.Join(manifest.Arches, " or "))
	case settings["CGO_ENABLED"] != "0":
		return Tool{}, fmt.Errorf("--imager-binary %s: built with cgo; the rescue system needs a static build (CGO_ENABLED=0, make imager-binaries)", p)
	}
	f, err := elf.Open(p)
	if err != nil {
		return Tool{}, fmt.Errorf("--imager-binary %s: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return Tool{}, fmt.Errorf("--imager-binary %s: dynamically linked; the rescue system needs a static build", p)
		}
	}
	t := Tool{Arch: arch, path: p}
	r, err := os.Open(p)
	if err != nil {
		return Tool{}, err
	}
	defer r.Close()
	h := sha256.New()
	if t.Size, err = io.Copy(h, r); err != nil {
		return Tool{}, fmt.Errorf("--imager-binary %s: %w", p, err)
	}
	t.SHA256 = hex.EncodeToString(h.Sum(nil))
	return t, nil
}

// checkImagerBinaries checks every build, one per architecture.
func checkImagerBinaries(paths []string) ([]Tool, error) {
	var out []Tool
	seen := map[string]string{}
	for _, p := range paths {
		t, err := checkImagerBinary(p)
		if err != nil {
			return nil, err
		}
		if other, dup := seen[t.Arch]; dup {
			return nil, fmt.Errorf("--imager-binary %s and %s are both %s builds: give one per architecture", other, p, t.Arch)
		}
		seen[t.Arch] = p
		out = append(out, t)
	}
	return out, nil
}

// putTools uploads each build and then its .sha256 file, unless the
// object already has the same size and sha256.
func putTools(ctx context.Context, c *minio.Client, bucket, prefix string, tools []Tool, log *slog.Logger) ([]Tool, error) {
	var out []Tool
	for _, t := range tools {
		t.Key = ToolKey(prefix, t.Arch)
		t.SHA256Key = t.Key + ".sha256"
		same, err := objectMatches(ctx, c, bucket, t.Key, t.Size, t.SHA256)
		if err != nil {
			return out, err
		}
		sumFile := []byte(t.SHA256 + "  " + path.Base(t.Key) + "\n")
		if same {
			if same, err = objectMatches(ctx, c, bucket, t.SHA256Key, int64(len(sumFile)), digest(sumFile)); err != nil {
				return out, err
			}
		}
		t.Action = "skipped"
		if !same {
			if err := putTool(ctx, c, bucket, t, sumFile); err != nil {
				return out, err
			}
			t.Action = "uploaded"
			log.Info("em-imager uploaded", "key", t.Key, "arch", t.Arch, "sha256", t.SHA256)
		}
		out = append(out, t)
	}
	return out, nil
}

func putTool(ctx context.Context, c *minio.Client, bucket string, t Tool, sumFile []byte) error {
	f, err := os.Open(t.path)
	if err != nil {
		return &Error{Code: CodeInternal, Err: err}
	}
	defer f.Close()
	if _, err := c.PutObject(ctx, bucket, t.Key, f, t.Size, minio.PutObjectOptions{
		ContentType:  "application/octet-stream",
		UserMetadata: map[string]string{manifest.MetaSHA256: t.SHA256},
	}); err != nil {
		return s3Error("uploading "+t.Key, err)
	}
	// The digest file last: a reader that finds it finds the binary it names.
	if _, err := c.PutObject(ctx, bucket, t.SHA256Key, bytes.NewReader(sumFile), int64(len(sumFile)), minio.PutObjectOptions{
		ContentType:  "text/plain",
		CacheControl: "no-cache",
		UserMetadata: map[string]string{manifest.MetaSHA256: digest(sumFile)},
	}); err != nil {
		return s3Error("uploading "+t.SHA256Key, err)
	}
	return nil
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
